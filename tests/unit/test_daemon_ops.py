"""The daemon's op logic with no socket: requests in, frames and journal records out.

The daemon is built in process on a throwaway home (no server, no listener), and its
clients are detached connections (``Connection.detached``): what the daemon sends them
stays queued, so each test reads exactly the answers and events a request made, in the
order they would leave. The journal's committer is not running: a durable answer appears
only once the test flushes the journal, which is how the tests see that answers wait for
the disk and that pushes to a receiver do not. Worker starts go to a spawner that records
them and makes no process.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from roost_core import identity, locks, platform
from roost_core.daemon.connection import Connection, Flusher
from roost_core.daemon.core import Daemon
from roost_core.daemon.jobs import Job
from roost_core.paths import Paths, resolve_paths
from roost_core.plugins import make_plugin_manager
from roost_core.protocol import encode
from roost_core.store import JobFiles
from roost_core.testing import make_config

CONFIG = {"agentExternalMessages": True}


def job_record(paths: Paths, state: str = "stopped") -> str:
    """A job record written before the daemon loads, as after a restart: stopped (it is
    never woken by a message) unless ``state`` says otherwise; it has no worker."""
    job_id = identity.new_job_id(set())
    now = time.time()
    job = Job(
        id=job_id,
        name="receiver",
        host="scripted",
        cwd=str(paths.home),
        session=str(paths.sessions_dir / f"{job_id}.jsonl"),
        token=identity.new_token(),
        task="wait",
        state=state,
        created=now,
        updated=now,
    )
    JobFiles(paths.jobs_dir, durable=False).save(job_id, job.to_json())
    return job_id


def run(tmp_path, story, *, jobs: int = 0, state: str = "stopped") -> None:
    """Build a daemon on ``tmp_path`` (``jobs`` job records in ``state`` first) and run
    ``story(daemon, job_ids)`` on anyio."""
    paths = resolve_paths({"ROOST_HOME": str(tmp_path / "home")})
    paths.ensure()
    job_ids = [job_record(paths, state) for _ in range(jobs)]
    config = make_config(CONFIG)

    async def main() -> None:
        daemon = Daemon(paths, config, make_plugin_manager(config), durable=False)
        daemon.load()
        try:
            await story(daemon, job_ids)
        finally:
            assert daemon.journal is not None
            await daemon.journal.aclose()

    anyio.run(main)


async def registered(daemon: Daemon, number: int, name: str) -> tuple[Connection, str]:
    """A detached connection from this process, registered as a no-session peer."""
    conn = Connection.detached(number, pid=os.getpid(), uid=os.getuid())
    await handle_frame(daemon, conn, {"id": "reg", "op": "peer_register", "pid": os.getpid(), "name": name, "sessionId": f"s-{name}"})
    (answer,) = conn.take_sent()
    assert answer["ok"], answer
    return conn, answer["result"]["id"]


def accept_frame(daemon: Daemon, conn: Connection, frame: dict[str, Any]) -> bool:
    """The request line of ``frame`` read and done as the wire does a line: True when it
    needed no wait (``Dispatcher.accept``)."""
    return daemon.dispatcher.accept(conn, daemon.dispatcher.decode(encode(frame)[:-1]))


async def handle_frame(daemon: Daemon, conn: Connection, frame: dict[str, Any]) -> None:
    """The request line of ``frame`` read and done as the connection's lane does it."""
    await daemon.dispatcher.run(conn, daemon.dispatcher.decode(encode(frame)[:-1]))


def send(to: str, text: str, request_id: Any) -> dict[str, Any]:
    return {"id": request_id, "op": "send", "to": to, "message": text}


async def attached(conn: Connection, flusher: Flusher) -> socket.socket:
    """Attach ``conn`` to a real socket that writes through ``flusher``, as the daemon's
    wire does; the client's end, non-blocking."""
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(asyncio.Protocol, ours)
    conn.attach(transport, flusher)  # type: ignore[arg-type]
    return theirs


def test_a_send_to_a_foreground_peer_is_pushed_and_answered_at_once(tmp_path):
    async def story(daemon: Daemon, _jobs: list[str]) -> None:
        alice, _ = await registered(daemon, 1, "alice")
        bob, bob_id = await registered(daemon, 2, "bob")
        assert accept_frame(daemon, alice, send(bob_id, "hello bob", 7)) is True
        (event,) = bob.take_sent()
        assert (event["event"], event["seq"], event["text"], event["fromName"]) == ("deliver", 1, "hello bob", "alice")
        assert "hello bob" in event["content"]
        (answer,) = alice.take_sent()
        assert answer["id"] == 7 and answer["ok"]
        assert answer["result"]["result"] == "delivered" and answer["result"]["seq"] == 1
        assert answer["result"]["relation"] == "external"
        # bob's ack empties what the daemon holds for it until acked.
        assert accept_frame(daemon, bob, {"id": 1, "op": "ack", "seq": 1})
        assert bob.take_sent() == [{"id": 1, "ok": True, "result": {"acked": 1}}]
        assert daemon.foreground[bob_id].in_flight == {}

    run(tmp_path, story)


def test_a_send_to_a_job_is_pushed_before_the_disk_and_answered_after_it(tmp_path):
    async def story(daemon: Daemon, jobs: list[str]) -> None:
        (job_id,) = jobs
        alice, _ = await registered(daemon, 1, "alice")
        accept_frame(daemon, alice, send(job_id, "for the record", 1))
        # Queued on the job; no answer until its record is written.
        assert alice.take_sent() == []
        (item,) = daemon.jobs[job_id].queue.items
        assert item.text == "for the record"
        assert daemon.jobs[job_id].queue.durable < item.seq
        await daemon.journal.flush()
        (answer,) = alice.take_sent()
        assert answer["ok"] and answer["result"]["result"] == "stopped"
        assert daemon.jobs[job_id].queue.durable == answer["result"]["seq"]

    run(tmp_path, story, jobs=1)


def test_answers_leave_in_request_order_whatever_waits_for_the_disk(tmp_path):
    """A send to a job waits for the disk; a send to a foreground peer, an error and an
    unknown op behind it do not, yet they are answered after it, in order."""

    async def story(daemon: Daemon, jobs: list[str]) -> None:
        (job_id,) = jobs
        alice, _ = await registered(daemon, 1, "alice")
        bob, bob_id = await registered(daemon, 2, "bob")
        frames = [
            send(job_id, "durable", 1),
            send(bob_id, "pushed", 2),
            send("no-such-peer", "lost", 3),
            {"id": 4, "op": "no_such_op"},
            send(job_id, "durable too", 5),
        ]
        assert all(accept_frame(daemon, alice, frame) for frame in frames)
        # bob was pushed to at once; alice's answers all wait behind the first send's commit.
        assert [event["text"] for event in bob.take_sent()] == ["pushed"]
        assert alice.take_sent() == []
        await daemon.journal.flush()
        answers = alice.take_sent()
        assert [answer["id"] for answer in answers] == [1, 2, 3, 4, 5]
        assert [answer["ok"] for answer in answers] == [True, True, False, False, True]
        assert [answers[2]["error"]["code"], answers[3]["error"]["code"]] == ["not_found", "unknown_op"]
        assert alice.pending == 0

    run(tmp_path, story, jobs=1)


def test_an_op_that_waits_is_left_to_the_connections_task(tmp_path):
    """``Dispatcher.accept`` does only what needs no wait: ``peers`` (an op without an
    accept step) is refused there, untouched, and done by ``Dispatcher.run``."""

    async def story(daemon: Daemon, _jobs: list[str]) -> None:
        alice, _ = await registered(daemon, 1, "alice")
        _bob, bob_id = await registered(daemon, 2, "bob")
        assert accept_frame(daemon, alice, {"id": 9, "op": "peers"}) is False
        assert alice.take_sent() == []
        await handle_frame(daemon, alice, {"id": 9, "op": "peers"})
        (answer,) = alice.take_sent()
        assert [row["id"] for row in answer["result"]["peers"]] == [bob_id]

    run(tmp_path, story)


def test_a_bad_request_is_refused_with_its_code_and_nothing_is_queued(tmp_path):
    async def story(daemon: Daemon, jobs: list[str]) -> None:
        (job_id,) = jobs
        alice, _ = await registered(daemon, 1, "alice")
        stranger = Connection.detached(3, pid=os.getpid(), uid=os.getuid())
        accept_frame(daemon, alice, {"id": 1, "op": "send", "to": job_id})
        accept_frame(daemon, alice, {"id": 2, "op": "send", "to": job_id, "message": "x", "extra": 1})
        accept_frame(daemon, stranger, send(job_id, "who am I", 3))
        accept_frame(daemon, alice, {"op": "send"})
        codes = [answer["error"]["code"] for answer in alice.take_sent()]
        assert codes == ["bad_args", "bad_args", "bad_args"]
        assert [answer["error"]["code"] for answer in stranger.take_sent()] == ["unauthorized"]
        assert daemon.jobs[job_id].queue.items == []

    run(tmp_path, story, jobs=1)


def test_a_burst_of_refusals_writes_its_dead_letters_together_at_the_next_pass(tmp_path):
    """Sends past a job's queue cap are refused ``queue_full``, each a dead letter; the
    letters of one pass of the loop are written together (one write and fsync), at
    the loop's next pass, not one by one as they come."""

    async def story(daemon: Daemon, jobs: list[str]) -> None:
        (job_id,) = jobs
        alice, _ = await registered(daemon, 1, "alice")
        dead_file = daemon.paths.state_dir / "dead.jsonl"
        for n in range(25):
            accept_frame(daemon, alice, send(job_id, f"m{n}", n))
        assert len(daemon.jobs[job_id].queue.items) == 20
        assert [letter["preview"] for letter in daemon.receipts.dead] == [f"m{n}" for n in range(20, 25)]
        assert not dead_file.exists() or dead_file.read_text() == ""
        await anyio.lowlevel.checkpoint()  # the loop's next pass
        assert [json.loads(line)["preview"] for line in dead_file.read_text().splitlines()] == [f"m{n}" for n in range(20, 25)]
        await daemon.journal.flush()
        codes = [answer["result"]["result"] if answer["ok"] else answer["error"]["code"] for answer in alice.take_sent()]
        assert codes == ["stopped"] * 20 + ["queue_full"] * 5

    run(tmp_path, story, jobs=1)


class RecordedWorker:
    """What a recording spawner hands back for a start: a process that is not there (a
    pid above Linux's largest, so nothing can ever be signalled by mistake)."""

    pid = 2**22 + 4321
    create_time = 0.0


class RecordingSpawner:
    """The daemon's spawner, recording each worker start as a value instead of making a
    process: what the op logic asked for can be read with no process started."""

    server = None

    def __init__(self) -> None:
        self.starts: list[dict[str, str]] = []

    def start_worker(self, env: dict[str, str], cwd: str, log_path: str) -> RecordedWorker:
        self.starts.append({"job": env["ROOST_JOB"], "token": env["PI_JOB_TOKEN"], "cwd": cwd})
        return RecordedWorker()

    async def aclose(self) -> None:
        """Nothing to stop."""


def test_a_message_to_an_idle_job_asks_for_one_worker_start_once_it_is_durable(tmp_path):
    """Process starts leave the op logic as values too: a message to an idle job with no
    worker asks the spawner for one start, with the job's id, token and folder, only
    once the item is on disk, and is answered ``started``; a second message while that
    worker has not said hello yet is ``queued`` and starts nothing more."""

    async def story(daemon: Daemon, jobs: list[str]) -> None:
        (job_id,) = jobs
        spawner = RecordingSpawner()
        daemon.spawner = spawner  # type: ignore[assignment]
        alice, _ = await registered(daemon, 1, "alice")
        accept_frame(daemon, alice, send(job_id, "wake up", 1))
        assert spawner.starts == [], "nothing starts for an item that is not durable yet"
        await daemon.journal.flush()
        accept_frame(daemon, alice, send(job_id, "and this too", 2))
        await daemon.journal.flush()
        answers = alice.take_sent()
        assert [answer["result"]["result"] for answer in answers] == ["started", "queued"]
        job = daemon.jobs[job_id]
        assert spawner.starts == [{"job": job_id, "token": job.token, "cwd": job.cwd}]
        assert job.worker_pid == RecordedWorker.pid
        assert [item.text for item in job.queue.items] == ["wake up", "and this too"]

    run(tmp_path, story, jobs=1, state="idle")


def test_a_changed_job_record_is_a_value_of_the_op_logic_written_once_per_pass(tmp_path):
    """The op logic writes no job record itself: a change (``save``) is noted, and the
    changes of one pass are written together by ``write_records`` (the wire layer calls
    it before any byte leaves), or at the loop's next pass when nobody is told. A job
    removed before that is not written back."""

    async def story(daemon: Daemon, jobs: list[str]) -> None:
        kept, removed = (daemon.jobs[job_id] for job_id in jobs)

        def on_disk(job_id: str) -> dict[str, Any] | None:
            return dict(JobFiles(daemon.paths.jobs_dir, durable=False).records()).get(daemon.paths.jobs_dir / f"{job_id}.json")

        kept.summary = "first"
        daemon.registry.save(kept)
        kept.summary = "second"
        daemon.registry.save(kept)
        removed.summary = "never written"
        daemon.registry.save(removed)
        assert on_disk(kept.id)["summary"] is None, "a change is written by write_records, not by the op"
        assert list(daemon.registry.dirty) == [kept.id, removed.id]
        daemon.jobs.pop(removed.id)
        daemon.registry.job_files.delete(removed.id)
        daemon.registry.write_records()
        assert on_disk(kept.id)["summary"] == "second" and on_disk(kept.id)["updated"] == kept.updated
        assert on_disk(removed.id) is None, "a removed job's record came back"
        assert daemon.registry.dirty == {}
        kept.summary = "third"
        daemon.registry.save(kept)
        await anyio.lowlevel.checkpoint()  # the loop's next pass
        assert on_disk(kept.id)["summary"] == "third"

    run(tmp_path, story, jobs=2, state="idle")


def test_the_flusher_writes_the_records_before_any_byte_of_a_pass_leaves(tmp_path):
    """Wired as the daemon wires it (``Flusher(before_write=daemon.before_output)``, a
    real socket): an op that changes a record and answers has its record on disk by
    the time the first byte of that pass reaches any client, and so does a connection's
    last output when it closes."""

    async def story(daemon: Daemon, jobs: list[str]) -> None:
        (job_id,) = jobs
        loop = asyncio.get_running_loop()
        #: At each call of the flusher's hook, once the records are written: the bytes
        #: that had reached the client already (peeked, left for the test to read).
        early: list[bytes] = []

        def before_write() -> None:
            daemon.before_output()
            try:
                early.append(theirs.recv(1 << 16, socket.MSG_PEEK))
            except BlockingIOError:
                early.append(b"")

        flusher = Flusher(loop, before_write=before_write)
        conn = Connection.detached(1, pid=os.getpid(), uid=os.getuid())
        theirs = await attached(conn, flusher)
        await handle_frame(daemon, conn, {"id": 1, "op": "stop", "job": job_id})
        answer = json.loads(await loop.sock_recv(theirs, 1 << 16))
        assert answer["ok"] and answer["result"]["state"] == "stopped"
        assert early == [b""], "bytes left before the records were written"
        assert dict(JobFiles(daemon.paths.jobs_dir, durable=False).records())[daemon.paths.jobs_dir / f"{job_id}.json"]["state"] == "stopped"
        daemon.jobs[job_id].summary = "said at the close"
        daemon.registry.save(daemon.jobs[job_id])
        conn.send({"event": "bye"})
        conn.close()
        assert json.loads(await loop.sock_recv(theirs, 1 << 16)) == {"event": "bye"}
        assert early == [b"", b""], "the last output left before the records were written"
        assert dict(JobFiles(daemon.paths.jobs_dir, durable=False).records())[daemon.paths.jobs_dir / f"{job_id}.json"]["summary"] == "said at the close"
        theirs.close()

    run(tmp_path, story, jobs=1, state="idle")


def test_a_refusals_dead_letter_is_on_disk_before_its_answer_leaves(tmp_path):
    """Wired as the daemon wires it (``Flusher(before_write=daemon.before_output)``, real
    sockets): a send refused ``queue_full`` in a pass whose output began earlier (another
    client's) has its dead letter written before any byte of that pass leaves, so the
    sender never reads a refusal whose letter a crash right after would lose."""

    async def story(daemon: Daemon, jobs: list[str]) -> None:
        (job_id,) = jobs
        loop = asyncio.get_running_loop()
        assert daemon.journal is not None
        dead_file = daemon.paths.state_dir / "dead.jsonl"
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.journal.run)
            # (Names of their own: the limits plugin counts each sender's messages across
            # the daemons of this process.)
            carol, _ = await registered(daemon, 1, "carol")
            dave, _ = await registered(daemon, 2, "dave")
            flusher = Flusher(loop, before_write=daemon.before_output, commit=daemon.journal.hand_over_due)
            theirs = await attached(carol, flusher)
            await attached(dave, flusher)
            for n in range(20):  # the job's queue is full
                assert accept_frame(daemon, carol, send(job_id, f"m{n}", n)) is True
            lines: list[bytes] = []
            while len(lines) < 20:
                lines += (await loop.sock_recv(theirs, 1 << 16)).splitlines()
            assert all(json.loads(line)["ok"] for line in lines)
            # When the letter is written: what carol could read already.
            readable_then: list[bytes] = []
            write_letters = daemon.receipts.flush

            def flush() -> bool:
                try:
                    readable_then.append(theirs.recv(1 << 16, socket.MSG_PEEK))
                except BlockingIOError:
                    readable_then.append(b"")
                return write_letters()

            daemon.receipts.flush = flush  # type: ignore[method-assign]
            dave.send({"event": "output of this pass, first"})
            assert accept_frame(daemon, carol, send(job_id, "one too many", 99)) is True
            answer = json.loads(await loop.sock_recv(theirs, 1 << 16))
            assert answer["id"] == 99 and answer["error"]["code"] == "queue_full"
            assert readable_then == [b""], "the refusal left before its letter was written"
            assert [json.loads(line)["preview"] for line in dead_file.read_text().splitlines()] == ["one too many"]
            theirs.close()
            tg.cancel_scope.cancel()

    run(tmp_path, story, jobs=1)


def test_answers_waiting_for_a_pass_commit_leave_in_that_pass_write(tmp_path):
    """Wired as the daemon wires it (``Flusher(commit=journal.hand_over_due)``, the
    journal bound to the loop, no fsync): the flusher hands the pass's journal records
    over before it writes, so the answer of a send queued on a job joins the output its
    connection queued earlier in the same pass, in one write, not a second pass."""

    async def story(daemon: Daemon, jobs: list[str]) -> None:
        (job_id,) = jobs
        loop = asyncio.get_running_loop()
        assert daemon.journal is not None
        # The worker it starts is recorded, not made (a real one would outlive the test).
        daemon.spawner = RecordingSpawner()  # type: ignore[assignment]
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.journal.run)
            alice, _ = await registered(daemon, 1, "alice")
            flusher = Flusher(loop, before_write=daemon.before_output, commit=daemon.journal.hand_over_due)
            theirs = await attached(alice, flusher)
            alice.send({"event": "queued first"})
            assert accept_frame(daemon, alice, send(job_id, "for the record", 1)) is True
            assert alice.take_sent() == [{"event": "queued first"}] and alice.pending == 1
            alice.send({"event": "queued first"})  # (take_sent emptied the outbox)
            await anyio.lowlevel.checkpoint()  # one pass of the loop: the flusher has run once
            lines = theirs.recv(1 << 16).splitlines()
            assert [json.loads(line).get("event") for line in lines] == ["queued first", None]
            answer = json.loads(lines[1])
            assert answer["id"] == 1 and answer["ok"] and answer["result"]["result"] == "started"
            assert daemon.jobs[job_id].queue.durable == answer["result"]["seq"]
            theirs.close()
            tg.cancel_scope.cancel()

    run(tmp_path, story, jobs=1, state="idle")


def test_a_foreground_receivers_item_leaves_before_the_senders_answer_and_the_pass_ends(tmp_path):
    """Wired to real sockets through a flusher whose hook writes the records first: a
    send to a foreground peer writes the receiver's deliver at once, inside the op (the
    receiver can read it before the op returns), while the sender's answer leaves at the
    end of the pass. The records are written before that push, and a push behind output
    already queued on its connection waits its turn, in order."""

    async def story(daemon: Daemon, _jobs: list[str]) -> None:
        loop = asyncio.get_running_loop()
        alice, _ = await registered(daemon, 1, "alice")
        bob, bob_id = await registered(daemon, 2, "bob")
        hooks: list[str] = []

        def before_write() -> None:
            hooks.append("records written")
            daemon.registry.write_records()

        flusher = Flusher(loop, before_write=before_write)
        sockets = {"alice": await attached(alice, flusher), "bob": await attached(bob, flusher)}

        def readable(name: str) -> bytes:
            try:
                return sockets[name].recv(1 << 16, socket.MSG_PEEK)
            except BlockingIOError:
                return b""

        assert accept_frame(daemon, alice, send(bob_id, "hello bob", 1)) is True
        # Still inside the pass: bob can read his item already, alice not her answer yet.
        assert json.loads(readable("bob"))["text"] == "hello bob"
        assert readable("alice") == b""
        assert hooks == ["records written"]
        await anyio.lowlevel.checkpoint()  # the loop's next pass: the flusher has run
        assert json.loads(await loop.sock_recv(sockets["alice"], 1 << 16))["result"]["result"] == "delivered"
        assert json.loads(await loop.sock_recv(sockets["bob"], 1 << 16))["seq"] == 1
        # Output queued for bob in this pass goes first; his next item waits behind it.
        bob.send({"event": "queued first"})
        assert accept_frame(daemon, alice, send(bob_id, "second", 2)) is True
        assert readable("bob") == b""
        await anyio.lowlevel.checkpoint()
        lines = []
        while len(lines) < 2:
            lines += (await loop.sock_recv(sockets["bob"], 1 << 16)).splitlines()
        assert [json.loads(line).get("event") for line in lines] == ["queued first", "deliver"]
        assert json.loads(lines[1])["text"] == "second"
        for theirs in sockets.values():
            theirs.close()

    run(tmp_path, story)


def adopt(job: Job, worker: subprocess.Popen[bytes]) -> None:
    """Give ``job`` the worker ``worker``, as a daemon finds a worker its predecessor started."""
    job.worker_pid, job.worker_create_time = worker.pid, locks.create_time(worker.pid)


@pytest.fixture
def worker(sleepers) -> subprocess.Popen[bytes]:
    """A process standing in for a worker the daemon did not start: it waits to be killed."""
    return sleepers()


@pytest.mark.skipif(not platform.CAN_WATCH_EXITS, reason="this platform watches no exits (pidfds are Linux's, kqueue the BSDs')")
def test_an_adopted_workers_exit_is_noticed_at_once_with_no_liveness_polling(tmp_path, worker, monkeypatch):
    async def story(daemon: Daemon, jobs: list[str]) -> None:
        job = daemon.jobs[jobs[0]]
        adopt(job, worker)
        exited = asyncio.Event()
        handle = daemon.workers.exits.on_exit

        def on_exit(key: str, pid: int) -> None:
            handle(key, pid)
            exited.set()

        daemon.workers.exits.on_exit = on_exit
        daemon.workers.check_worker(job, daemon.clock())  # the monitor's first round: checked once, watched
        assert job.id in daemon.workers.exits and job.worker_pid == worker.pid
        polls: list[tuple[Any, ...]] = []
        monkeypatch.setattr(locks, "is_alive", lambda *args: polls.append(args) or True)
        for _ in range(5):  # the monitor's next rounds
            daemon.workers.check_worker(job, daemon.clock())
        worker.kill()
        with anyio.fail_after(30):
            await exited.wait()
        assert polls == []
        assert job.worker_pid is None and job.id not in daemon.workers.exits

    run(tmp_path, story, jobs=1)


def test_without_pidfds_the_monitor_checks_an_adopted_workers_liveness(tmp_path, worker):
    async def story(daemon: Daemon, jobs: list[str]) -> None:
        job = daemon.jobs[jobs[0]]
        adopt(job, worker)
        daemon.workers.exits.supported = False  # as on a kernel without pidfds
        daemon.workers.check_worker(job, daemon.clock())
        assert job.worker_pid == worker.pid and len(daemon.workers.exits) == 0
        worker.kill()
        worker.wait()
        daemon.workers.check_worker(job, daemon.clock())
        assert job.worker_pid is None

    run(tmp_path, story, jobs=1)
