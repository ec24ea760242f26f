"""Every named crash point (``roost_core.faults``), hit on purpose, then a restart, then the
invariants:

- every message whose sender was told ``delivered``/``queued``/``started`` is in the
  receiver's transcript exactly once, in the order it was sent; one whose answer was lost
  arrives at most once; nothing arrives that nobody sent;
- every report-worthy settle of a child yields exactly one report to its parent;
- no job is left ``running`` with no worker, or holding items no worker will deliver.

Daemon-side points fire inside the daemon process. Each scenario sets up unarmed, then
restarts the daemon with ``ROOST_FAULTS`` set (so the point fires at the step under test
and not during set-up), lets it fire, and restarts again (the marker under
``$ROOST_HOME/faults`` keeps it from firing twice). Worker-side points fire in workers
started by the armed daemon, which inherit its environment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import wait_until
from fg import in_thread, run_async, session, taken
from reliability.kit import (
    Ledger,
    check_delivery,
    quiet,
    received_messages,
    reports_in,
    start_expect_death,
    stuck_jobs,
    user_texts,
)

from roost_core.client import DaemonUnavailable
from roost_core.protocol import ProtocolError

pytestmark = pytest.mark.timeout(150)

#: The parent: its first run spawns the child; reports start short runs that note them.
GATE_NAME = "gate"


def parent_scenario(home: Path, child_steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "run": [{"match": "^lead", "steps": [{"spawn": {"task": "child task", "name": "kid", "model": "kid"}}, {"say": "spawned"}]}],
        "default": {"steps": [{"say": "noted {from_name}: {input}"}]},
        "models": {"kid": child_steps},
    }


def kid_scenario(gate: Path) -> dict[str, Any]:
    """The child: its task run is quick; every later run waits at ``gate`` (a slow tool,
    so items sent meanwhile are steered in at its boundary), then answers."""
    return {
        "run": [{"match": "^child task", "steps": [{"say": "Done: child task"}]}],
        "default": {"steps": [{"wait_for": str(gate)}, {"say": "ok: {input}"}]},
    }


class Story:
    """A parent job ``lead`` with a spawned child ``kid``, and a foreground peer ``talker``
    in another tree sending to the child by exact id (external reach is on), so the
    messages start runs that never report: the only report-worthy settles are the
    child's task run and the runs of user replies."""

    def __init__(self, daemon, tmp_path: Path) -> None:
        self.daemon = daemon
        self.tmp_path = tmp_path
        self.gate = tmp_path / GATE_NAME
        self.ledger = Ledger()
        self.replies = 0
        self.lead = daemon.start_job("lead the work", name="lead", scenario=parent_scenario(tmp_path, kid_scenario(self.gate)))
        self.kid = wait_until(lambda: next((r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == "kid"), None), what="the child")

    def rows(self) -> list[dict[str, Any]]:
        return self.daemon.call("jobs")["jobs"]

    def row(self, job: str) -> dict[str, Any]:
        return self.daemon.job(job)

    async def send(self, me, body: str) -> str | None:
        """Send one message; back off on ``queue_full``. Returns what the sender was told
        (None when the answer was lost)."""
        while True:
            try:
                result = await me.call("send", to=self.kid, message=body)
            except DaemonUnavailable:
                self.ledger.told(me.peer_id, self.kid, body, None)
                return None
            except ProtocolError as exc:
                if exc.code == "queue_full":
                    await anyio.sleep(0.05)
                    continue
                self.ledger.told(me.peer_id, self.kid, body, exc.code)
                return exc.code
            self.ledger.told(me.peer_id, self.kid, body, result["result"])
            return result["result"]

    async def during(self, talker, point: str, steer: bool) -> None:
        """The sends across ``point``: with ``steer``, one message starts a run that waits
        at the gate and the rest arrive while it waits, steered in at the boundary when
        the gate opens; else sends until the point has fired."""
        if steer:
            await self.send(talker, "during-0")
            # In its transcript: the run has taken it and waits at the gate, so what comes
            # next is steered in (a worker merely connected could still take them all into
            # its first run, and nothing would be steered).
            await in_thread(
                wait_until,
                lambda: any(body == "during-0" for _, body in received_messages(self.daemon.entries(self.kid))),
                what="during-0 in the kid's run",
            )
            for n in range(1, 6):
                await self.send(talker, f"during-{n}")
            self.gate.write_text("open")
        else:
            for n in range(6):
                await self.send(talker, f"during-{n}")
                if self.fired(point):
                    break

    def reply(self, text: str) -> None:
        self.daemon.call("reply", job=self.kid, text=text)
        self.replies += 1

    def arm(self, point: str) -> None:
        """Restart the daemon (gracefully: workers wait for it) with ``point`` armed."""
        self.daemon.terminate()
        self.daemon.env["ROOST_FAULTS"] = point
        self.daemon.restart()

    def fired(self, point: str) -> bool:
        return (self.daemon.paths.home / "faults" / point).exists()

    def restart_after_fault(self, point: str) -> None:
        """Wait for ``point`` to fire; a daemon point killed the daemon: start it again (a
        worker point killed a worker, which the daemon starts again by itself)."""
        wait_until(lambda: self.fired(point), what=f"{point} fired")
        if point.startswith(("daemon.", "store.")):
            self.daemon.process.wait(20)
            self.daemon.restart()

    def settle(self, timeout: float = 60) -> list[dict[str, Any]]:
        self.gate.write_text("open")
        return wait_until(lambda: (rows := self.rows()) and quiet(rows) and rows, timeout=timeout, what="everything settled")

    def verdicts(self, expected_reports: int) -> dict[str, Any]:
        self.settle()
        reports = wait_reports(self.daemon, self.lead, self.kid, expected_reports)
        rows = self.settle()
        kid_entries = self.daemon.entries(self.kid)
        verdict = check_delivery(self.ledger, {self.kid: received_messages(kid_entries)})
        return {
            "verdict": verdict,
            "reports": reports,
            "stuck": stuck_jobs(rows),
            "rows": rows,
            "kid_entries": kid_entries,
        }

    def assert_invariants(self, expected_reports: list[str], result: dict[str, Any]) -> None:
        verdict = result["verdict"]
        assert verdict.ok, verdict.explain()
        assert result["stuck"] == [], result["stuck"]
        got = [r["body"] for r in result["reports"]]
        assert len(got) == len(expected_reports), f"reports from the child: {got}"
        for body, expected in zip(got, expected_reports, strict=True):
            assert expected in body, got


def wait_reports(daemon, parent: str, child: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The child's reports in the parent's transcript once everything is quiet.

    Quiet (nothing running, nothing pending) is the point after which no report can come:
    a worker's ``handback`` settles its run on the daemon's side (report queued) before
    its job leaves ``running``, a killed worker keeps its job ``running`` until the
    daemon has handled its exit, and a queued report keeps its receiver ``pending`` until
    it is in the transcript. So a duplicate, if any, is there when this returns."""

    def got() -> list[dict[str, Any]]:
        return [r for r in reports_in(daemon.entries(parent)) if r["from"] == child]

    try:
        wait_until(lambda: len(got()) >= count and quiet(daemon.call("jobs")["jobs"]), timeout=timeout, what=f"{count} reports")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; reports so far: {[r['body'] for r in got()]}") from None
    return got()


def run_message_path(daemon_factory, write_config, tmp_path, point: str, *, steer: bool, arm_after_setup: bool = True) -> dict[str, Any]:
    """Messages from a foreground peer to the child, before, across and after ``point``."""
    write_config({"agentExternalMessages": True, "reapAfterSeconds": 0.5})
    daemon = daemon_factory().start()
    story = Story(daemon, tmp_path)
    outcome: dict[str, Any] = {}

    async def main():
        async with session(daemon, tmp_path, name="talker") as talker:
            await talker.ensure_registered()
            # The child's task report reached the parent; both have gone idle and reaped,
            # so the workers that come next are started by the armed daemon.
            await in_thread(wait_until, lambda: len(reports_in(daemon.entries(story.lead))) == 1, what="task report")
            await in_thread(wait_until, lambda: not story.row(story.kid)["live"] and not story.row(story.lead)["live"], what="reaped")
            for n in range(5):
                await story.send(talker, f"before-{n}")
            story.gate.write_text("open")
            await in_thread(wait_until, lambda: quiet(story.rows()), what="first batch settled")
            story.gate.unlink()
            await in_thread(wait_until, lambda: not story.row(story.kid)["live"], what="kid reaped again")
            await in_thread(story.arm, point)
            async with anyio.create_task_group() as tg:
                # A send whose answer the point takes is asked again (its key) once the
                # daemon is back, so the daemon is started again alongside the sends.
                tg.start_soon(in_thread, story.restart_after_fault, point)
                await story.during(talker, point, steer)
            for n in range(5):
                await story.send(talker, f"after-{n}")
            await in_thread(story.reply, "final reply")
            outcome.update(await in_thread(story.verdicts, 2))

    run_async(main)
    outcome["story"] = story
    return outcome


def record_point(record, point: str, outcome: dict[str, Any], *, what: str) -> None:
    verdict = outcome["verdict"]
    record(
        "crash point",
        point,
        runs=1,
        messages=verdict.promised + outcome["story"].ledger.unknown_count,
        cases=len(outcome["reports"]),
        result=f"{what}: {verdict.summary()}; {len(outcome['reports'])} reports; stuck {len(outcome['stuck'])}",
    )


# ------------------------------------------------------------------------ the send/deliver/ack path


@pytest.mark.parametrize(
    "point, steer",
    [
        ("daemon.after_accept_before_persist", False),
        ("daemon.after_persist_before_answer", False),
        ("worker.after_steer_before_message_end", True),
        ("worker.after_message_end_before_ack", False),
        ("worker.after_message_end_before_ack", True),
    ],
    ids=["accept-before-persist", "persist-before-answer", "steer-before-message-end", "message-end-before-ack", "message-end-before-ack-steered"],
)
def test_message_path_crash_point(daemon_factory, write_config, tmp_path, record, point, steer):
    outcome = run_message_path(daemon_factory, write_config, tmp_path, point, steer=steer)
    story = outcome["story"]
    record_point(record, point + (" (steered)" if steer and point.endswith("ack") else ""), outcome, what="messages")
    assert story.fired(point)
    story.assert_invariants(["Done: child task", "final reply"], outcome)


# --------------------------------------------------------------------------- start and spawn


def test_crash_after_accepting_a_spawn_leaves_no_job_running_without_a_worker(daemon_factory, write_config, tmp_path, record):
    """The spawn's task is accepted, the child's record written, and the daemon dies before
    the task is durable: the spawner was told nothing; the child must not stay 'running'
    with no worker for ever."""
    daemon = daemon_factory().start()
    point = "daemon.after_accept_before_persist"

    async def main():
        async with session(daemon, tmp_path, name="lead") as lead:
            await lead.ensure_registered()
            await in_thread(lambda: (daemon.terminate(), daemon.env.__setitem__("ROOST_FAULTS", point), daemon.restart()))
            async with anyio.create_task_group() as tg:
                tg.start_soon(in_thread, lambda: (wait_until(lambda: (daemon.paths.home / "faults" / point).exists(), what="fired"), daemon.process.wait(20), daemon.restart()))
                # Asked again with its key once the daemon is back: the child the first ask
                # made (its record was written) gets its task now; no second child.
                first = await lead.call("spawn", task="never durable", name="kid", scenario={"default": {"steps": [{"say": "hi"}]}})
            await in_thread(daemon.wait_job, first["id"], "done")
            # The spawner can spawn again and that child runs.
            again = await lead.call("spawn", task="second try", name="kid2", scenario={"default": {"steps": [{"say": "hi"}]}})
            await in_thread(daemon.wait_job, again["id"], "done")
            kids = [row for row in daemon.call("jobs")["jobs"] if row["name"] == "kid"]
            assert [row["id"] for row in kids] == [first["id"]], kids

    run_async(main)
    rows = wait_until(lambda: (rows := daemon.call("jobs")["jobs"]) and rows, what="jobs")
    stuck = stuck_jobs(rows)
    record("crash point", point + " (spawn)", runs=1, cases=len(rows), result=f"{len(rows)} job records after restart; stuck {len(stuck)}")
    assert stuck == [], f"{stuck}: {rows}"


def test_crash_after_persisting_a_start_runs_the_job_after_restart(daemon_factory, tmp_path, record):
    """``start`` is durable but unanswered: after the restart the job runs its task once."""
    daemon = daemon_factory(ROOST_FAULTS="daemon.after_persist_before_answer").start()
    with pytest.raises((DaemonUnavailable, OSError)):
        daemon.call("start", task="durable task", name="j", host="scripted", cwd=str(tmp_path), scenario={"default": {"steps": [{"say": "did {input}"}]}})
    daemon.process.wait(20)
    daemon.restart()
    rows = wait_until(lambda: (rows := daemon.call("jobs")["jobs"]) and quiet(rows) and rows, what="settled")
    (row,) = rows
    texts = user_texts(daemon.entries(row["id"]))
    record("crash point", "daemon.after_persist_before_answer (start)", runs=1, messages=1, result=f"task in transcript {texts.count('durable task')}x; state {row['state']}")
    assert texts == ["durable task"]
    assert row["state"] == "done" and stuck_jobs(rows) == []


# --------------------------------------------------------------------------- atomic writes


def test_crash_during_the_journal_rewrite_at_start_loses_nothing(daemon_factory, write_config, tmp_path, record):
    """Items wait in a stopped job's queue; the daemon is killed; its successor dies in the
    middle of the atomic rewrite of the journal (``store.during_atomic_write``, the first
    atomic write of a start); the next one still has every item, delivered once."""
    daemon = daemon_factory().start()
    job = daemon.start_job("first", name="j", scenario={"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon.wait_job(job)
    daemon.call("stop", job=job)
    daemon.wait_reaped(job)
    ledger = Ledger()

    async def main():
        async with session(daemon, tmp_path, name="lead") as lead:
            await lead.ensure_registered()
            for n in range(15):
                # A stopped job keeps what it is sent (the user will start it again).
                result = await lead.call("send", to=job, message=f"kept-{n}")
                ledger.told(lead.peer_id, job, f"kept-{n}", result["result"])

    write_config({"agentExternalMessages": True})
    daemon.terminate()
    daemon.restart()
    run_async(main)
    daemon.kill9()
    daemon.env["ROOST_FAULTS"] = "store.during_atomic_write"
    status = start_expect_death(daemon)
    assert status == -signal.SIGKILL
    leftovers = sorted(p.name for p in daemon.paths.state_dir.iterdir() if p.name.endswith(".tmp"))
    daemon.restart()
    assert daemon.job(job)["pending"] == 15
    daemon.call("reply", job=job, text="carry on")
    rows = wait_until(lambda: (rows := daemon.call("jobs")["jobs"]) and quiet(rows) and rows, what="settled")
    verdict = check_delivery(ledger, {job: received_messages(daemon.entries(job))})
    record(
        "crash point",
        "store.during_atomic_write (journal rewrite)",
        runs=1,
        messages=verdict.promised,
        result=f"{verdict.summary()}; temp files left by the crash: {len(leftovers)}",
    )
    assert verdict.ok, verdict.explain()
    assert stuck_jobs(rows) == []


ATOMIC_CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from roost_core.store import JobFiles
    files = JobFiles(Path(sys.argv[1]))
    files.save("0abc0abc", {"id": "0abc0abc", "version": "new", "pad": "y" * 200000})
    """
)


def test_crash_during_an_atomic_job_record_write_leaves_the_old_record(tmp_path, record):
    """A process killed between the temp file's fsync and the rename: readers see the old
    record, whole, and the next save replaces it."""
    from roost_core.store import JobFiles

    folder = tmp_path / "jobs"
    folder.mkdir()
    files = JobFiles(folder)
    files.save("0abc0abc", {"id": "0abc0abc", "version": "old"})
    env = {**os.environ, "ROOST_HOME": str(tmp_path), "ROOST_FAULTS": "store.during_atomic_write"}
    runs = 5
    for _ in range(runs):
        (tmp_path / "faults").exists() and [p.unlink() for p in (tmp_path / "faults").iterdir()]
        done = subprocess.run([sys.executable, "-c", ATOMIC_CHILD, str(folder)], env=env, timeout=60)
        assert done.returncode == -signal.SIGKILL
        assert [(path.name, data) for path, data in files.records()] == [("0abc0abc.json", {"id": "0abc0abc", "version": "old"})]
    files.save("0abc0abc", {"id": "0abc0abc", "version": "newer"})
    assert [data["version"] for _, data in files.records()] == ["newer"]
    record("crash point", "store.during_atomic_write (job record)", runs=runs, cases=runs, result="old record intact after every kill; next save wins")


# --------------------------------------------------------------------- hand-back and report routing


def run_report_path(daemon_factory, write_config, tmp_path, point: str) -> dict[str, Any]:
    """The child's task run settles while ``point`` is armed; the parent must get exactly
    one report of it, and a later user reply to the child one more."""
    write_config({"reapAfterSeconds": 0.5})
    daemon = daemon_factory().start()
    gate = tmp_path / GATE_NAME
    scenario = {
        "run": [
            {"match": "^lead", "steps": [{"say": "ready"}]},
            {"match": "^spawn", "steps": [{"spawn": {"task": "child task", "name": "kid", "model": "kid"}}, {"say": "spawned"}]},
        ],
        "default": {"steps": [{"say": "noted {from_name}: {input}"}]},
        "models": {"kid": {"run": [{"match": "^child task", "steps": [{"wait_for": str(gate)}, {"say": "Done: child task"}]}], "default": {"steps": [{"say": "ok: {input}"}]}}},
    }
    lead = daemon.start_job("lead the work", name="lead", scenario=scenario)
    daemon.wait_job(lead)
    daemon.terminate()
    daemon.env["ROOST_FAULTS"] = point
    daemon.restart()
    daemon.call("reply", job=lead, text="spawn the child")
    kid = wait_until(lambda: next((r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == "kid"), None), what="the child")
    gate.write_text("open")
    fired = daemon.paths.home / "faults" / point
    wait_until(fired.exists, what=f"{point} fired")
    if point.startswith("daemon."):
        daemon.process.wait(20)
        daemon.restart()
    after_task = [r["body"] for r in wait_reports(daemon, lead, kid, 1)]
    daemon.call("reply", job=kid, text="one more thing")
    wait_until(lambda: len(user_texts(daemon.entries(kid))) == 2, what="reply in the child")
    reports = [r["body"] for r in wait_reports(daemon, lead, kid, len(after_task) + 1)]
    rows = wait_until(lambda: (rows := daemon.call("jobs")["jobs"]) and quiet(rows) and rows, timeout=60, what="settled again")
    return {"reports_after_task": after_task, "reports": reports, "stuck": stuck_jobs(rows), "rows": rows}


@pytest.mark.parametrize(
    "point",
    [
        "worker.before_handback",
        pytest.param("daemon.during_handback"),
        pytest.param("daemon.report_routing"),
    ],
)
def test_report_path_crash_point(daemon_factory, write_config, tmp_path, record, point):
    outcome = run_report_path(daemon_factory, write_config, tmp_path, point)
    after_task, reports = outcome["reports_after_task"], outcome["reports"]
    record(
        "crash point",
        point,
        runs=1,
        cases=2,
        result=f"reports of the task settle: {len(after_task)} ({'; '.join(b.splitlines()[0] for b in after_task) or 'none'}); of the reply: {len(reports) - len(after_task)}; stuck {len(outcome['stuck'])}",
    )
    assert outcome["stuck"] == []
    # Exactly one report of the task's run. A daemon that died mid hand-back must still
    # deliver that run's own report; a worker that died before handing back never told
    # anyone the run settled, so the run is reported as crashed (failed or ended).
    assert len(after_task) == 1, after_task
    if point.startswith("daemon."):
        assert "Done: child task" in after_task[0], after_task
    else:
        assert after_task[0].startswith(("state: failed", "state: ended")), after_task
    assert len(reports) == 2 and "one more thing" in reports[1], reports


# ---------------------------------------------------------------------- worker deaths outside a run


def test_an_idle_worker_killed_after_its_report_sends_no_second_report(daemon_factory, tmp_path, record):
    """The child settled and reported; its worker is then killed while idle (OOM, a stray
    kill). Nothing was lost and the job is not given up (a reply starts it again), so the
    parent must not get an 'ended' report for the settle it already had."""
    daemon = daemon_factory().start()
    story = Story(daemon, tmp_path)
    wait_reports(daemon, story.lead, story.kid, 1)
    wait_until(lambda: story.row(story.kid)["connected"], what="kid connected")
    os.kill(daemon.record(story.kid)["worker_pid"], signal.SIGKILL)
    wait_until(lambda: not story.row(story.kid)["live"], what="worker gone")
    # The daemon has handled the exit: an 'ended' report, had it sent one, is queued to the
    # lead now and counted below (the lead stays pending until it has it).
    wait_until(lambda: quiet(daemon.call("jobs")["jobs"]), what="quiet")
    story.reply("are you still there?")
    story.gate.write_text("open")
    reports = [r["body"] for r in wait_reports(daemon, story.lead, story.kid, 2)]
    record("crash point", "SIGKILL of an idle worker", runs=1, cases=len(reports), result=f"reports: {[b.splitlines()[0] for b in reports]}")
    assert len(reports) == 2 and "Done: child task" in reports[0] and "are you still there?" in reports[1], reports


# --------------------------------------------------------------------------- graceful stop


def test_a_stopping_daemon_serves_no_new_connection(daemon_factory, record):
    """While a graceful stop waits for slow clients to take their answers, it has stopped
    reading acks on the old connections; a peer that reconnects in that window would be
    registered again and get its unacked items pushed again, and a send might find the
    journal closed (``internal``). A stopping daemon must serve nobody new.

    The test holds that window open and orders every step on an event it observes: a
    client that reads nothing has answers the daemon cannot hand over (``unsent``), the
    stop waits for it (up to ``ROOST_STOP_FLUSH_SECONDS``, long here), the daemon logs that
    it stopped taking connections, a late client connects while the old daemon is provably
    alive, and only then does the slow client read, letting the stop finish."""
    import socket as socket_module

    from reliability.kit import Raw

    daemon = daemon_factory(ROOST_STOP_FLUSH_SECONDS="300").start()
    old_pid = daemon.process.pid
    blocker = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    blocker.connect(str(daemon.paths.socket))
    blocker.sendall(b'{"id": 1, "op": "tools"}\n' * 4000)
    wait_until(lambda: daemon.call("daemon_status")["unsent"] > 0, what="answers the slow client has not taken")
    daemon.process.send_signal(signal.SIGTERM)
    wait_until(lambda: b"stopping: no new connections" in daemon.paths.daemon_log.read_bytes(), what="the daemon to stop listening")
    served_by_old = None
    try:
        with Raw(daemon.paths.socket, timeout=30) as late:
            answer = late.request({"id": "late", "op": "daemon_status"})
            served_by_old = answer.get("ok") and answer["result"]["pid"] == old_pid
    except (OSError, EOFError):
        served_by_old = False
    # The window was still open: the old daemon waits for the slow client.
    assert daemon.process.poll() is None
    while blocker.recv(1024 * 1024):
        pass
    blocker.close()
    assert daemon.process.wait(30) == 0
    record("crash point", "graceful stop: a connection made during the stop", runs=1, cases=1, result="served by the stopping daemon" if served_by_old else "not served")
    assert not served_by_old


def test_a_report_worthy_run_killed_before_its_ack_still_reports(daemon_factory, write_config, tmp_path, record):
    """The parent's message starts a report-worthy run of its child; the worker dies at
    ``worker.after_message_end_before_ack``. The daemon starts it again for the unacked
    item, which the new worker finds in its transcript: nothing runs. The parent must
    still get one report of that run."""
    write_config({"reapAfterSeconds": 0.5})
    daemon = daemon_factory().start()
    point = "worker.after_message_end_before_ack"

    def reports(lead) -> list[str]:
        return [event["content"] for event in lead.delivered if event["kind"] == "report"]

    async def main():
        async with session(daemon, tmp_path, name="lead") as lead:
            kid = (await lead.call("spawn", task="child task", name="kid", scenario={"default": {"steps": [{"say": "ok: {input}"}]}}))["id"]
            await in_thread(wait_until, lambda: len(reports(lead)) == 1, what="the task's report")
            await in_thread(wait_until, lambda: not daemon.job(kid)["live"], what="reaped")
            await in_thread(lambda: (daemon.terminate(), daemon.env.__setitem__("ROOST_FAULTS", point), daemon.restart()))
            await lead.call("send", to=kid, message="please do it again")
            await in_thread(wait_until, lambda: (daemon.paths.home / "faults" / point).exists(), what="fault fired")
            # Quiet jobs have handed back every report; the lead has taken each one.
            await in_thread(wait_until, lambda: quiet(daemon.call("jobs")["jobs"]) and taken(daemon, lead), what="settled")
            return reports(lead)

    got = run_async(main)
    record("crash point", point + " (a report-worthy run)", runs=1, messages=1, cases=len(got), result=f"reports: {[text.split(chr(10))[1] for text in got]}")
    assert len(got) == 2, got
