"""The send desk (``roost_core.daemon.sending``): the ``send`` op's logic run with no
daemon, no socket and no disk write of the journal.

A desk is built from the parts a daemon builds it from (peer tables over job records and
foreground peers, budgets, a mailroom, receipts, the default plugins and a clock the test
moves), with a recording journal in place of the writer thread. What the tests read is
its output: answers and refusals (with their codes), the events queued on detached
connections, the journal records, the receipts, and the workers it asks to start."""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import pytest
from recording_journal import RecordingJournal

from roost_core import hookimpl
from roost_core.daemon import changes
from roost_core.daemon.budgets import Budgets
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import Mailroom, Pending
from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.receipts import MessageQuotes, Receipts
from roost_core.daemon.sending import SendDesk
from roost_core.daemon.tables import PeerTables
from roost_core.plugins import make_plugin_manager
from roost_core.protocol import (
    BAD_ARGS,
    NOT_ACCEPTED,
    NOT_FOUND,
    QUEUE_FULL,
    UNREACHABLE,
    ProtocolError,
)
from roost_core.queue import MAX_AGENT_ITEMS
from roost_core.records import OutgoingItem, Refusal
from roost_core.testing import make_config
from roost_plugins.limits import LimitsPlugin

LEAD = "/s/lead.jsonl"


class Desk:
    """A send desk over a tree: a foreground lead session (``lead``) and the jobs and
    peers the test adds. ``now`` is the desk's clock; ``silent`` hosts take no messages."""

    def __init__(self, tmp_path, silent: tuple[str, ...] = ("silent",), **config: Any) -> None:
        self.jobs: dict[str, Job] = {}
        self.foreground: dict[str, ForegroundPeer] = {}
        self.config = make_config(**config)
        self.pm = make_plugin_manager(self.config, autoload=False)
        # Rate counters of this desk's own (the module's instance is shared in a process).
        self.pm.unregister(name="limits")
        self.pm.register(LimitsPlugin(), name="limits")
        self.now = 1000.0
        self.started: list[str] = []
        self.receipts = Receipts(tmp_path / "dead.jsonl", durable=False)
        self.journal = RecordingJournal()
        mailroom = Mailroom(self.receipts, MessageQuotes(), self.start)
        mailroom.journal = self.journal
        tables = PeerTables(self.jobs, self.foreground, self.pm, self.config, lambda job: job.host not in silent)
        self.tables = tables
        self.budgets = Budgets(self.jobs, self.pm, self.config)
        self.desk = SendDesk(tables, self.budgets, mailroom, self.receipts, self.jobs, self.foreground, self.pm, self.config, lambda: self.now)
        self.lead = self.peer("f-lead", "lead", session=LEAD)

    def start(self, job: Job) -> bool:
        self.started.append(job.id)
        return True

    def peer(self, peer_id: str, name: str, *, session: str) -> ForegroundPeer:
        peer = ForegroundPeer(id=peer_id, name=name, session=session, cwd="/", pid=os.getpid(), conn=detached())
        self.foreground[peer.id] = peer
        changes.changed()
        return peer

    def child(self, job_id: str, name: str, **fields: Any) -> Job:
        """A job spawned by the lead (its parent session), idle with no worker."""
        job = Job(id=job_id, name=name, host=fields.pop("host", "scripted"), cwd="/", session=f"/s/{job_id}.jsonl", token="t", task="x",
                  parent_session=LEAD, root_session=LEAD, depth=1, spawned=True, **fields)
        self.jobs[job.id] = job
        changes.changed()
        self.budgets.usage_changed()
        return job

    def info(self, record: Job | ForegroundPeer):
        return self.tables.info_of(record)

    def send(self, sender: Job | ForegroundPeer, to: str, message: str = "hello", **args: Any) -> dict[str, Any] | Pending:
        job = sender if isinstance(sender, Job) else None
        return self.desk.send(self.info(sender), job, {"to": to, "message": message, **args})

    def refused(self, sender: Job | ForegroundPeer, to: str, message: str = "hello", **args: Any) -> ProtocolError:
        with pytest.raises(ProtocolError) as caught:
            self.send(sender, to, message, **args)
        return caught.value

    def receipts_of(self, sender_id: str) -> list[tuple[Any, ...]]:
        return [(r["to"], r["state"], r["reason"]) for r in self.receipts.sent_by(sender_id)]


def detached() -> Connection:
    return Connection.detached(1, pid=os.getpid(), uid=os.getuid())


def run(story) -> None:
    anyio.run(story)


def test_a_send_to_a_child_job_is_framed_queued_and_answered_once_durable(tmp_path):
    async def story() -> None:
        t = Desk(tmp_path)
        child = t.child("j-1", "worker")
        pending = t.send(t.lead, "worker", "look at the tests")
        assert isinstance(pending, Pending) and t.started == []
        (record,) = t.journal.records
        item = record["deliver"]
        assert (record["op"], record["job"], item["seq"], item["text"], item["relation"]) == ("item", "j-1", 1, "look at the tests", "parent")
        # The envelope plugin framed it: the text inside, its sender named as the child sees it.
        assert "look at the tests" in item["content"] and "parent" in item["content"] and item["content"] != item["text"]
        assert (item["from"], item["hops"], item["trace"], item["delivery"]) == ("f-lead", 1, None, "steer")
        t.journal.commit_over()
        answer = pending.finish()
        assert answer == {"to": "j-1", "name": "worker", "relation": "child", "id": item["id"], "result": "started", "seq": 1}
        assert t.started == ["j-1"] and child.queue.durable == 1
        assert t.receipts_of("f-lead") == [("j-1", "queued", None)]

    run(story)


def test_a_child_job_reaches_its_foreground_parent_at_once_in_its_chain(tmp_path):
    t = Desk(tmp_path)
    child = t.child("j-1", "worker", run_trace="t-7", run_hops=2)
    answer = t.send(child, "lead", "done: 3 files changed")
    assert answer == {"to": "f-lead", "name": "lead", "relation": "parent", "id": answer["id"], "result": "delivered", "seq": 1}
    (event,) = t.lead.conn.take_sent()
    assert (event["event"], event["from"], event["relation"], event["trace"], event["hops"]) == ("deliver", "j-1", "child", "t-7", 3)
    assert event["text"] == "done: 3 files changed" and json.loads(t.lead.in_flight[1])["id"] == answer["id"]
    assert t.journal.records == []  # a foreground peer has no mailbox: nothing to store
    assert t.receipts_of("j-1") == [("f-lead", "delivered", None)]


@pytest.mark.parametrize(
    ("to", "message", "args", "code"),
    [
        ("lead", "hello", {}, "self_send"),
        ("worker", "   ", {}, "empty_message"),
        ("worker", "x" * 101, {}, "message_too_long"),
        ("worker", "hello", {"reply_to": "not-an-id"}, BAD_ARGS),
        ("nobody", "hello", {}, NOT_FOUND),
    ],
)
def test_a_refused_send_names_its_code_and_leaves_nothing_queued(tmp_path, to, message, args, code):
    t = Desk(tmp_path, max_message_chars=100)
    child = t.child("j-1", "worker")
    assert t.refused(t.lead, to, message, **args).code == code
    assert t.journal.records == [] and child.queue.items == [] and t.lead.conn.take_sent() == []
    if code not in (BAD_ARGS, NOT_FOUND):  # refused once the receiver is known: a receipt says why
        assert t.receipts_of("f-lead") == [(t.tables.route(t.info(t.lead), to)[0].id, "refused", code)]


def test_the_rate_limit_counts_accepted_sends_in_the_desks_clock_window(tmp_path):
    t = Desk(tmp_path, messages_per_minute=2)
    t.child("j-1", "worker")
    t.send(t.lead, "worker", "one")
    t.send(t.lead, "worker", "two")
    assert t.refused(t.lead, "worker", "three").code == "rate_limited"
    t.now += 61  # the window moves with the clock the desk was given, not the wall clock
    assert isinstance(t.send(t.lead, "worker", "three, later"), Pending)
    assert [item.text for item in t.jobs["j-1"].queue.items] == ["one", "two", "three, later"]


def test_a_send_refused_by_a_full_queue_does_not_count_towards_the_rate(tmp_path):
    t = Desk(tmp_path, messages_per_minute=MAX_AGENT_ITEMS + 1)
    t.child("j-1", "worker")
    t.child("j-2", "other")
    for n in range(MAX_AGENT_ITEMS):
        assert isinstance(t.send(t.lead, "worker", f"item {n}"), Pending)
    # Passed by the limits, then refused by the receiver's queue: never counted.
    assert t.refused(t.lead, "worker", "one too many").code == QUEUE_FULL
    assert isinstance(t.send(t.lead, "other", "still within the rate"), Pending)
    assert t.refused(t.lead, "other", "now past it").code == "rate_limited"


def test_a_send_asked_again_is_queued_past_the_cap_and_a_new_one_is_not(tmp_path):
    """A send asked again (``again``, with its key) may have reached its receiver before a
    crash the new daemon does not know of: refusing it ``queue_full`` would tell its sender
    "not sent" about a message the receiver may hold. A new send, or ``again`` with no
    key, is held to the cap."""
    t = Desk(tmp_path)
    worker = t.child("j-1", "worker")
    for n in range(MAX_AGENT_ITEMS):
        assert isinstance(t.send(t.lead, "worker", f"item {n}"), Pending)
    assert t.refused(t.lead, "worker", "new", key="k-new").code == QUEUE_FULL
    assert t.refused(t.lead, "worker", "no key", again=True).code == QUEUE_FULL
    assert isinstance(t.send(t.lead, "worker", "asked again", key="k-1", again=True), Pending)
    assert len(worker.queue.items) == MAX_AGENT_ITEMS + 1
    # Past it once, still full for the next new send.
    assert t.refused(t.lead, "worker", "another new", key="k-2").code == QUEUE_FULL


class Quota:
    """A team's send limit: at most ``limit`` messages in all, counted when noted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.noted: list[str] = []

    @hookimpl
    def roost_check_send(self, item):
        return Refusal("quota", "quota spent") if len(self.noted) >= self.limit else None

    @hookimpl
    def roost_note_sent(self, item, now):
        self.noted.append(item.text)


class NoSecrets:
    @hookimpl
    def roost_check_send(self, item, now, config):
        return Refusal("secret", "no secrets") if "secret" in item.text else None


def test_every_limits_plugin_is_asked_and_only_a_send_that_went_out_is_noted(tmp_path):
    """A send refused by any plugin, or by a full queue, is noted by none (so no plugin
    has anything to take back); one that went out is noted once by each."""
    t = Desk(tmp_path, messages_per_minute=MAX_AGENT_ITEMS + 10)
    quota = Quota(limit=MAX_AGENT_ITEMS + 1)
    t.pm.register(quota, name="quota")
    t.pm.register(NoSecrets(), name="no-secrets")
    t.child("j-1", "worker")
    t.child("j-2", "other")
    assert t.refused(t.lead, "worker", "a secret").code == "secret"
    for n in range(MAX_AGENT_ITEMS):
        assert isinstance(t.send(t.lead, "worker", f"item {n}"), Pending)
    assert t.refused(t.lead, "worker", "one too many").code == QUEUE_FULL
    assert quota.noted == [f"item {n}" for n in range(MAX_AGENT_ITEMS)]
    assert isinstance(t.send(t.lead, "other", "the last the quota takes"), Pending)
    assert t.refused(t.lead, "other", "past the quota").code == "quota"
    assert quota.noted[-1] == "the last the quota takes" and len(quota.noted) == MAX_AGENT_ITEMS + 1


def test_a_job_of_another_tree_is_unreachable_by_id_and_by_its_name(tmp_path):
    t = Desk(tmp_path)
    stranger = Job(id="j-x", name="stranger", host="scripted", cwd="/", session="/s/other.jsonl", token="t", task="x")
    t.jobs[stranger.id] = stranger
    changes.changed()
    assert t.refused(t.lead, "j-x").code == UNREACHABLE
    # A name only that job has: reach's refusal and reason, as by id (issue 49 B14).
    assert t.refused(t.lead, "stranger").code == UNREACHABLE
    assert t.refused(t.lead, "nobody").code == NOT_FOUND
    assert stranger.queue.items == [] and t.receipts_of("f-lead") == [("j-x", "refused", "unreachable")] * 2


def test_a_job_whose_host_takes_no_messages_is_refused_as_such(tmp_path):
    t = Desk(tmp_path)
    t.child("j-1", "runner", host="silent")
    error = t.refused(t.lead, "runner")
    assert error.code == NOT_ACCEPTED and "takes no messages" in error.message
    assert t.receipts_of("f-lead") == [("j-1", "refused", NOT_ACCEPTED)]


def test_a_tree_whose_budget_is_spent_sends_nothing_and_its_jobs_are_not_woken(tmp_path):
    async def story() -> None:
        t = Desk(tmp_path, agent_tree_tokens=1000)
        child = t.child("j-1", "worker", usage={"tokens": 1500, "cost": 0.0})
        assert t.refused(t.lead, "worker").code == "budget_spent"
        assert child.queue.items == []
        # An item the daemon itself hands on (a report, a notice) is still kept for the
        # spent tree's job, but does not wake it.
        item = OutgoingItem(sender=t.info(t.lead), target=t.info(child), text="the budget is spent", kind="notice", relation="system")
        pending = t.desk.deliver(t.info(child), item, "<notice>")
        t.journal.commit_over()
        assert pending.finish()["result"] == "queued" and t.started == []
        # A usage that changes is summed again: under the budget, sends go on.
        child.usage = {"tokens": 10, "cost": 0.0}
        t.budgets.usage_changed()
        assert isinstance(t.send(t.lead, "worker"), Pending)

    run(story)


def test_a_broadcast_to_children_gives_each_live_child_its_own_item_under_one_id(tmp_path):
    async def story() -> None:
        t = Desk(tmp_path)
        one, two = t.child("j-1", "alpha", worker_pid=os.getpid()), t.child("j-2", "beta", worker_pid=os.getpid())
        one.conn = detached()
        t.child("j-3", "gamma", state="stopped")
        t.child("j-4", "delta", host="silent")
        pending = t.send(t.lead, "*children", "status, please")
        assert isinstance(pending, Pending)
        (event,) = one.conn.take_sent()  # pushed before the commit, as any send
        assert [(r["job"], r["deliver"]["scope"], r["deliver"]["broadcastChain"]) for r in t.journal.records] == [("j-1", "children", True), ("j-2", "children", True)]
        t.journal.commit_over()
        answer = pending.finish()
        assert answer["scope"] == "children" and answer["id"] == event["id"] == t.journal.records[1]["deliver"]["id"]
        assert [(r["to"], r["relation"], r["result"]) for r in answer["sent"]] == [("j-1", "child", "delivered"), ("j-2", "child", "queued")]
        assert two.queue.durable == 1

    run(story)


def test_a_broadcast_is_refused_whole_for_an_unknown_scope_or_inside_a_broadcast_chain(tmp_path):
    t = Desk(tmp_path)
    child = t.child("j-1", "alpha")
    assert t.refused(t.lead, "*cousins").code == "unknown_scope"
    child.run_broadcast_chain = True
    assert t.refused(child, "*siblings").code == "broadcast_chain"
    assert t.journal.records == []
