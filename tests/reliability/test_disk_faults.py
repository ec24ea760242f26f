"""A full disk and failing I/O: every durable file of roost meets ``ENOSPC`` and ``EIO``.

The I/O fault points of :mod:`roost_core.faults` (``io.<file>.write`` / ``io.<file>.fsync``)
make a write or an fsync of the queue journal, the job records, the dead letters or a
session file fail while ``$ROOST_HOME/faults/<point>`` holds an errno name; removing the
file gives the space back. A write point fails half-way through its write, so what a
full disk leaves behind (a torn record) is there too. Then real runs: ``ROOST_HOME`` on
a tmpfs of 4 MiB, filled up to the last byte, and emptied again. Mounting needs root: as
root (CI on Linux) a mount that fails fails the test; without root they are skipped,
unless ``ROOST_REQUIRE_MOUNT=1``.

What must hold each time:

- a change that cannot be made durable is refused with ``not_stored`` and not reported as
  accepted; none of it stays (no job, no queued item). The one exception is stated in
  docs/reliability.md: an item pushed to a connected receiver before the first failing
  commit reported its failure (items go out before they are durable) may arrive once;
- nothing accepted before is lost; nothing arrives twice or out of order;
- reads are served all along (``jobs``, ``agents``, ``peers``, ``log``, ``dead``, status);
- once the space is back everything works again with no restart: sends are accepted,
  what was kept in memory (job records, dead letters) reaches the disk, items a receiver
  could not write reach its transcript.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import DaemonHandle, wait_until
from fg import in_thread, run_async, session
from reliability.kit import (
    Ledger,
    accepted,
    check_delivery,
    quiet,
    received_messages,
    stuck_jobs,
    transcript,
)

from roost_core import faults
from roost_core.protocol import ProtocolError
from roost_core.queue import MAX_AGENT_ITEMS

pytestmark = pytest.mark.timeout(180)

ERRNOS = ("ENOSPC", "EIO")
PER_PHASE = 5
#: The journal's reserve in the real full-disk test: a few messages' records, so that
#: the test spends it (the daemon's own is a megabyte).
JOURNAL_RESERVE = 4096
#: More sends than that reserve can take, so a test that never sees a refusal ends.
MAX_SENDS_INTO_THE_RESERVE = 40


@pytest.fixture
def external(write_config) -> None:
    """The talkers are foreground peers outside the receiver's tree: reach them by id."""
    write_config({"agentExternalMessages": True})


def fail(daemon: DaemonHandle, point: str, code: str) -> Path:
    """Make ``point`` fail with ``code`` from now on (in every armed process)."""
    folder = daemon.paths.home / "faults"
    folder.mkdir(exist_ok=True)
    control = folder / point
    control.write_text(code)
    return control


def heal(control: Path) -> None:
    control.unlink()


def reads_served(daemon: DaemonHandle, job: str) -> list[str]:
    """Every read op a user or an agent makes, through the CLI's client; the ones that
    failed (an empty list when all were served)."""
    failed = []
    for op, args in (("daemon_status", {}), ("jobs", {}), ("agents", {}), ("dead", {}), ("log", {"job": job, "entries": True})):
        try:
            daemon.call(op, **args)
        except Exception as exc:  # noqa: BLE001 - counted, reported by the assertion
            failed.append(f"{op}: {exc}")
    return failed


async def send(me, to: str, body: str, ledger: Ledger) -> str:
    """One send; what the sender was told goes into ``ledger``; the result or error code."""
    try:
        result = await me.call("send", to=to, message=body)
    except ProtocolError as exc:
        ledger.told(me.peer_id, to, body, exc.code)
        return exc.code
    ledger.told(me.peer_id, to, body, result["result"])
    return result["result"]


def message_bodies(entries: list[dict[str, Any]]) -> list[str]:
    return [body for _, body in received_messages(entries)]


# --------------------------------------------------------------------------- the journal


@pytest.mark.parametrize("code", ERRNOS)
@pytest.mark.parametrize("point", ["io.journal.write", "io.journal.fsync"])
def test_the_journal_meets_a_full_disk_and_io_errors(daemon_factory, external, tmp_path, record, point, code):
    """Sends to a connected job while its journal commits fail: refused ``not_stored``,
    the job's queue keeps nothing of them, reads go on; a daemon started while the disk
    fails comes up and serves; once healed, sends are accepted again with no restart, and
    the transcript holds exactly what was accepted, in order."""
    daemon = daemon_factory(ROOST_FAULTS=point).start()
    box = daemon.start_job("hold the box", name="box")
    daemon.wait_job(box, "done")
    ledger = Ledger()
    told: dict[str, list[str]] = {"before": [], "during": [], "after restart": [], "healed": []}
    unserved: list[str] = []
    ids: dict[str, str] = {}

    async def story() -> None:
        async with session(daemon, tmp_path, "talker") as me:
            ids["talker"] = await me.ensure_registered()
            for i in range(PER_PHASE):
                told["before"].append(await send(me, box, f"before {i}", ledger))
            # The box takes (and acks) what was accepted before the disk fails, so what waits
            # in its queue below can only be left by the refused sends. (A busy worker still
            # working through them was counted as pending there.)
            await in_thread(wait_until, lambda: daemon.job(box)["pending"] == 0, what="the box to take the first sends")
            control = fail(daemon, point, code)
            for i in range(PER_PHASE):
                told["during"].append(await send(me, box, f"during {i}", ledger))
                unserved.extend(await in_thread(reads_served, daemon, box))
                unserved.extend([] if (await me.call("peers"))["peers"] is not None else ["peers"])
            # Nothing of a refused send waits in the queue.
            assert (await in_thread(daemon.job, box))["pending"] == 0
            # A daemon started on the failing disk comes up (its journal rewrite fails)
            # and serves; sends are still refused.
            await in_thread(daemon.terminate)
            await in_thread(daemon.restart)
            await me.ensure_registered()
            unserved.extend(await in_thread(reads_served, daemon, box))
            for i in range(2):
                told["after restart"].append(await send(me, box, f"after restart {i}", ledger))
            heal(control)
            for i in range(PER_PHASE):
                told["healed"].append(await send(me, box, f"healed {i}", ledger))

    run_async(story)
    rows = wait_until(lambda: quiet(rows := daemon.call("jobs")["jobs"]) and rows, what="the box to settle")
    received = {box: received_messages(daemon.entries(box))}
    arrived = message_bodies(daemon.entries(box))
    # The first refused send was pushed to the connected worker before its commit failed
    # (items go out before they are durable): it may arrive, once. No other refused one.
    ledger.unknown[(ids["talker"], box)].add("during 0")
    verdict = check_delivery(ledger, received)
    early = "during 0" in arrived
    assert all(accepted(result) for result in told["before"] + told["healed"]), told
    assert told["during"] == ["not_stored"] * PER_PHASE and told["after restart"] == ["not_stored"] * 2, told
    assert verdict.ok, verdict.explain()
    assert not unserved, unserved
    assert not stuck_jobs(rows)
    record(
        "disk",
        f"{point} {code}: sends to a connected job, a restart on the failing disk",
        messages=len(arrived),
        cases=sum(len(v) for v in told.values()),
        result=(
            f"{PER_PHASE} accepted before; {PER_PHASE + 2} refused not_stored during (1 pushed before its commit failed "
            f"{'arrived once' if early else 'did not arrive'}, the others never); daemon restarted on the failing disk and served; "
            f"{PER_PHASE} accepted after healing, no restart; {verdict.summary()}; reads failed {len(unserved)}; stuck 0"
        ),
    )


@pytest.mark.parametrize("code", ERRNOS)
def test_a_commit_fails_midway_and_a_later_one_is_not_glued_to_its_torn_record(daemon_factory, write_config, tmp_path, record, code):
    """A journal write that fails half-way leaves a torn record; the journal cuts it off,
    so the next record stands on its own line and survives a ``kill -9`` and replay:
    nothing accepted is lost, nothing refused comes back. The receiver is a job with no
    worker (reaped), so nothing is pushed before it is durable."""
    point = "io.journal.write"
    write_config({"agentExternalMessages": True, "reapAfterSeconds": 0.2})
    daemon = daemon_factory(ROOST_FAULTS=point).start()
    box = daemon.start_job("hold the box", name="box")
    daemon.wait_job(box, "done")
    daemon.wait_reaped(box)
    daemon.call("stop", job=box)  # a stopped job keeps what it is sent and is not woken
    ledger = Ledger()

    async def story() -> None:
        async with session(daemon, tmp_path, "talker") as me:
            await me.ensure_registered()
            await send(me, box, "kept 0", ledger)
            control = fail(daemon, point, code)
            for i in range(3):
                await send(me, box, f"refused {i}", ledger)
            heal(control)
            await send(me, box, "kept 1", ledger)

    run_async(story)
    journal = daemon.paths.journal.read_bytes()
    daemon.kill9()
    daemon.restart()
    pending = daemon.job(box)["pending"]
    daemon.call("reply", job=box, text="wake up")  # a user reply un-stops it
    daemon.wait_job(box, "done")
    arrived = message_bodies(daemon.entries(box))
    assert ledger.refused == {"not_stored": 3}
    assert arrived == ["kept 0", "kept 1"], arrived
    assert pending == 2
    assert b"refused" not in journal
    record(
        "disk",
        f"io.journal.write {code} half-way: torn record cut off, then kill -9 and replay",
        messages=len(arrived),
        cases=4,
        result=f"2 accepted, 3 refused; journal holds no refused record; after kill -9: {pending} pending, arrived {arrived}",
    )


# --------------------------------------------------------------------------- job records


@pytest.mark.parametrize("code", ERRNOS)
@pytest.mark.parametrize("point", ["io.record.write", "io.record.fsync"])
def test_job_records_meet_a_full_disk_and_io_errors(daemon_factory, external, tmp_path, record, point, code):
    """While job records cannot be written: a new job (``start``, ``spawn``) is refused
    ``not_stored`` and leaves no trace; an existing job keeps working (its state changes
    are kept in memory and shown), messages to it are accepted and delivered; once healed
    its record on disk catches up by itself."""
    daemon = daemon_factory(ROOST_FAULTS=point).start()
    box = daemon.start_job("hold the box", name="box")
    daemon.wait_job(box, "done")
    ledger = Ledger()
    refusals: list[str] = []
    unserved: list[str] = []

    async def story() -> None:
        async with session(daemon, tmp_path, "talker") as me:
            await me.ensure_registered()
            control = fail(daemon, point, code)
            try:
                await in_thread(daemon.call, "start", task="never made", cwd=str(tmp_path), host="scripted")
            except ProtocolError as exc:
                refusals.append(exc.code)
            try:
                await me.call("spawn", task="never made either", name="child")
            except ProtocolError as exc:
                refusals.append(exc.code)
            for i in range(PER_PHASE):
                await send(me, box, f"while records fail {i}", ledger)
            await in_thread(lambda: wait_until(lambda: len(message_bodies(daemon.entries(box))) == PER_PHASE, what="the messages in the transcript"))
            unserved.extend(await in_thread(reads_served, daemon, box))
            heal(control)

    run_async(story)
    rows = daemon.call("jobs")["jobs"]
    on_disk = wait_until(lambda: (rec := daemon.record(box))["state"] == daemon.job(box)["state"] and rec["updated"] == daemon.job(box)["updated"] and rec, what="the record written again")
    assert refusals == ["not_stored", "not_stored"], refusals
    assert [row["id"] for row in rows] == [box]
    assert sorted(p.name for p in daemon.paths.jobs_dir.glob("*.json")) == [f"{box}.json"]
    assert not list(daemon.paths.jobs_dir.glob(".*.tmp")), "a failed write left its temp file"
    verdict = check_delivery(ledger, {box: received_messages(daemon.entries(box))})
    assert verdict.ok, verdict.explain()
    assert not unserved, unserved
    record(
        "disk",
        f"{point} {code}: new jobs refused, the existing one keeps working",
        messages=verdict.arrived,
        cases=2 + PER_PHASE,
        result=(
            f"start and spawn refused not_stored, no record or temp file left; {PER_PHASE} messages accepted and delivered "
            f"({verdict.summary()}); record caught up after healing (state {on_disk['state']}); reads failed {len(unserved)}"
        ),
    )


# --------------------------------------------------------------------------- dead letters


@pytest.mark.parametrize("code", ERRNOS)
@pytest.mark.parametrize("point", ["io.receipts.write", "io.receipts.fsync"])
def test_dead_letters_meet_a_full_disk_and_io_errors(daemon_factory, external, tmp_path, record, point, code):
    """A send to a foreground peer that is not connected is answered ``not running`` and
    leaves a dead letter. While ``dead.jsonl`` cannot be written the answer is the same,
    ``dead`` lists the letter (memory), and once healed the file gets every letter, whole,
    without a new one to carry it; a restart then still lists them."""
    daemon = daemon_factory(ROOST_FAULTS=point).start()
    answers: list[str] = []

    async def story() -> None:
        async with session(daemon, tmp_path, "gone") as gone:
            gone_id = await gone.ensure_registered()
        async with session(daemon, tmp_path, "talker") as me:
            await me.ensure_registered()
            await in_thread(lambda: wait_until(lambda: not any(r["live"] for r in daemon.call("agents")["agents"] if r["id"] == gone_id), what="gone to go"))
            answers.append((await me.call("send", to=gone_id, message="letter 0"))["result"])
            control = fail(daemon, point, code)
            for i in range(1, 4):
                answers.append((await me.call("send", to=gone_id, message=f"letter {i}"))["result"])
            assert len((await in_thread(daemon.call, "dead"))["dead"]) == 4
            heal(control)

    run_async(story)
    dead_file = daemon.paths.state_dir / "dead.jsonl"

    def letters() -> list[str]:
        return [json.loads(line)["preview"] for line in dead_file.read_text().splitlines()]

    wait_until(lambda: len(letters()) == 4, what="the kept letters written")
    daemon.terminate()
    daemon.restart()
    listed = [letter["preview"] for letter in daemon.call("dead")["dead"]]
    assert answers == ["not running"] * 4
    assert letters() == [f"letter {i}" for i in range(4)]
    assert listed == letters()
    record(
        "disk",
        f"{point} {code}: dead letters kept in memory, written once healed",
        cases=4,
        result=f"4 sends answered 'not running' (not an error); dead.jsonl got all 4 whole after healing, with no new letter; after a restart `dead` lists {len(listed)}",
    )


# --------------------------------------------------------------------------- session files


@pytest.fixture
def armed_here(monkeypatch):
    """Arm fault points in this (the test's) process too, for a foreground session."""

    def arm(points: str, home: Path) -> None:
        monkeypatch.setenv("ROOST_FAULTS", points)
        monkeypatch.setenv("ROOST_HOME", str(home))  # where the control files are
        faults._forget()

    yield arm
    monkeypatch.undo()
    faults._forget()


@pytest.mark.parametrize("code", ERRNOS)
def test_session_files_meet_a_full_disk_and_io_errors(daemon_factory, external, tmp_path, record, armed_here, code):
    """A job's worker and a foreground session whose session files refuse writes: nothing
    is acked that is not in the file. The worker keeps the items and tries again after a
    pause (sends to it are accepted: the daemon's disk is fine). The foreground session
    drops its connection to have the item pushed again after a pause; while it is away,
    sends to it are answered ``not running`` (no mailbox for foreground peers, as
    specified) and never arrive. Once healed, each transcript holds every accepted message
    once, in order, and no torn line is left of the failed writes."""
    point = "io.session.write"
    daemon = daemon_factory(ROOST_FAULTS=point).start()
    armed_here(point, daemon.paths.home)
    box = daemon.start_job("hold the box", name="box")
    daemon.wait_job(box, "done")
    ledger = Ledger()
    seen_while_failing: dict[str, int] = {}
    ids: dict[str, str] = {}

    async def story() -> None:
        async with session(daemon, tmp_path, "listener") as listener, session(daemon, tmp_path, "talker") as me:
            listener_id = ids["listener"] = await listener.ensure_registered()
            await me.ensure_registered()
            control = fail(daemon, point, code)
            for i in range(PER_PHASE):
                await send(me, box, f"to box {i}", ledger)
                await send(me, listener_id, f"to listener {i}", ledger)
            # The worker tried, kept them, and waits: nothing acked.
            await in_thread(lambda: wait_until(lambda: daemon.job(box)["status"] or None, what="the worker to report its trouble"))
            seen_while_failing["box pending"] = (await in_thread(daemon.job, box))["pending"]
            seen_while_failing["listener wrote"] = len(listener.delivered)
            seen_while_failing["listener refusals"] = listener.write_failures
            heal(control)
            await listener.wait_for_delivery(len(ledger.promised[(me.peer_id, listener_id)]), timeout=60)

    run_async(story)
    wait_until(lambda: quiet(daemon.call("jobs")["jobs"]), what="the box to settle")
    listener_entries = transcript(tmp_path / "listener.jsonl")
    received = {box: received_messages(daemon.entries(box)), ids["listener"]: received_messages(listener_entries)}
    verdict = check_delivery(ledger, received)
    raw_lines = [line for line in (tmp_path / "listener.jsonl").read_bytes().split(b"\n") if line]
    box_lines = [line for line in Path(daemon.record(box)["session"]).read_bytes().split(b"\n") if line]
    torn = sum(1 for line in raw_lines + box_lines if not _is_json(line))
    to_box = [k for k in ledger.promised if k[1] == box]
    assert len(ledger.promised[to_box[0]]) == PER_PHASE, "every send to the job is accepted"
    assert set(ledger.refused) <= {"not running"}, ledger.refused
    assert seen_while_failing["box pending"] == PER_PHASE and seen_while_failing["listener wrote"] == 0, seen_while_failing
    assert seen_while_failing["listener refusals"] >= 1
    assert verdict.ok, verdict.explain()
    assert torn == 0
    record(
        "disk",
        f"io.session.write {code}: a worker and a foreground session cannot write their transcripts",
        messages=verdict.arrived,
        cases=2 * PER_PHASE,
        result=(
            f"{PER_PHASE} sends to the job accepted, kept unacked while failing ({seen_while_failing['box pending']} pending); "
            f"foreground: {ledger.promised_count - PER_PHASE} delivered, {sum(ledger.refused.values())} answered 'not running' "
            f"while it reconnected, wrote 0 while failing; after healing {verdict.summary()}; torn lines left {torn}"
        ),
    )


def test_a_full_queue_of_a_worker_that_cannot_write_says_not_stored(daemon_factory, external, tmp_path, record):
    """A job whose worker cannot write its session file holds what it is sent until its
    queue is full (20 agent items); the sends its full queue refuses then say
    ``not_stored`` (the disk's doing), never ``queue_full``; once healed, every accepted
    one arrives."""
    point = "io.session.write"
    daemon = daemon_factory(ROOST_FAULTS=point).start()
    box = daemon.start_job("hold the box", name="box")
    daemon.wait_job(box, "done")
    ledger = Ledger()
    told: list[str] = []

    async def story() -> None:
        async with session(daemon, tmp_path, "talker") as me:
            await me.ensure_registered()
            control = fail(daemon, point, "ENOSPC")
            told.append(await send(me, box, "held 0", ledger))
            await in_thread(lambda: wait_until(lambda: daemon.job(box)["status"] or None, what="the worker to report its trouble"))
            while len(told) < MAX_AGENT_ITEMS + 3:
                told.append(await send(me, box, f"held {len(told)}", ledger))
            heal(control)

    run_async(story)
    wait_until(lambda: quiet(daemon.call("jobs")["jobs"]), what="the box to settle")
    verdict = check_delivery(ledger, {box: received_messages(daemon.entries(box))})
    assert told[MAX_AGENT_ITEMS:] == ["not_stored"] * 3, told
    assert all(accepted(result) for result in told[:MAX_AGENT_ITEMS]), told
    assert verdict.ok, verdict.explain()
    record(
        "disk",
        "io.session.write ENOSPC: a worker that cannot write its transcript, its queue full",
        messages=verdict.arrived,
        cases=len(told),
        result=f"{MAX_AGENT_ITEMS} accepted and held, the next 3 refused not_stored (not queue_full); after healing {verdict.summary()}",
    )


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------- a real full disk


def mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], capture_output=True)
    return result.returncode == 0


def fill(folder: Path) -> int:
    """Write a filler file until the file system is full; its size."""
    filler = folder / "filler"
    written = 0
    with open(filler, "wb", buffering=0) as fh:
        chunk = b"\0" * 65536
        while True:
            try:
                written += fh.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        for size in (4096, 512, 64, 1):
            while True:
                try:
                    written += fh.write(b"\0" * size)
                except OSError:
                    break
    return written


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs, mounted for the test (it needs root, or ``mount`` rights; see the
    module docstring); unmounted after."""
    where = tmp_path / "small"
    if not mount_tmpfs(where, "4m"):
        # As root (CI runs so on Linux) mounting must work: failing to is a failure, not a
        # skip that would hide these tests. A user without mount rights skips them, unless
        # ROOST_REQUIRE_MOUNT=1 says they must run.
        if os.geteuid() == 0 or os.environ.get("ROOST_REQUIRE_MOUNT") == "1":
            pytest.fail(f"cannot mount a 4 MiB tmpfs at {where} (mount -t tmpfs failed as uid {os.geteuid()}): the real full-disk tests need it")
        pytest.skip("cannot mount a tmpfs here (needs root); set ROOST_REQUIRE_MOUNT=1 to make that a failure")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_real_full_disk(daemon_factory, roost_env, tmp_path, small_disk, record):
    """The same with no fault point: ``ROOST_HOME`` (socket, records, journal, sessions,
    logs) on a 4 MiB tmpfs filled up to the last byte while a job, a foreground peer and a
    talker work; then the filler is deleted. The journal's reserve (zeros written ahead
    of its records, made small here) takes sends until it is spent; from then on every
    send is refused until the disk has room again."""
    home = small_disk / "home"
    home.mkdir()
    (home / "roost.json").write_text(json.dumps({"agentExternalMessages": True}))
    env = {**roost_env, "ROOST_HOME": str(home), "ROOST_JOURNAL_RESERVE_BYTES": str(JOURNAL_RESERVE)}
    daemon = DaemonHandle(home, env)
    box_ledger = Ledger()
    told: dict[str, list[str]] = {"before": [], "full": [], "healed": []}
    spawn_while_full: list[str] = []
    unserved: list[str] = []
    filled = {"bytes": 0}
    try:
        daemon.start()
        box = daemon.start_job("hold the box", name="box", cwd=str(home))
        daemon.wait_job(box, "done")

        async def story() -> None:
            async with session(daemon, home, "talker") as me:
                await me.ensure_registered()
                for i in range(PER_PHASE):
                    told["before"].append(await send(me, box, f"before {i}", box_ledger))
                await in_thread(lambda: wait_until(lambda: daemon.job(box)["pending"] == 0, what="the box to take them"))
                filled["bytes"] = await in_thread(fill, small_disk)
                # The journal's reserve (and a file's last page) may still have room: the
                # first sends may go through. Once one is refused, the reserve is spent
                # and every later one is refused too. Each is accepted or refused, never lost.
                while "not_stored" not in told["full"] and len(told["full"]) < MAX_SENDS_INTO_THE_RESERVE:
                    told["full"].append(await send(me, box, f"full {len(told['full'])}", box_ledger))
                    unserved.extend(await in_thread(reads_served, daemon, box))
                for _ in range(PER_PHASE):
                    told["full"].append(await send(me, box, f"full {len(told['full'])}", box_ledger))
                    unserved.extend(await in_thread(reads_served, daemon, box))
                try:
                    await me.call("spawn", task="a child on a full disk", name="child")
                    spawn_while_full.append("made")
                except ProtocolError as exc:
                    spawn_while_full.append(exc.code)
                (small_disk / "filler").unlink()
                for i in range(PER_PHASE):
                    told["healed"].append(await send(me, box, f"healed {i}", box_ledger))

        run_async(story)
        rows = wait_until(lambda: quiet(rows := daemon.call("jobs")["jobs"]) and rows, what="the box to settle")
        arrived = received_messages(daemon.entries(box))
        # As with the fault points: the first refused send may have been pushed first.
        talker = next(iter(box_ledger.promised))[0]
        first_refused = told["full"].index("not_stored")
        box_ledger.unknown[(talker, box)].add(f"full {first_refused}")
        verdict = check_delivery(box_ledger, {box: arrived})
        refused_while_full = told["full"].count("not_stored")
        assert all(accepted(r) for r in told["before"] + told["healed"]), told
        assert all(accepted(r) for r in told["full"][:first_refused]), told
        assert told["full"][first_refused:] == ["not_stored"] * (PER_PHASE + 1), told
        assert spawn_while_full == ["not_stored"], spawn_while_full
        assert [row["id"] for row in rows] == [box]
        assert verdict.ok, verdict.explain()
        assert not unserved, unserved
        assert not stuck_jobs(rows)
        record(
            "disk",
            "a real full disk: ROOST_HOME on a 4 MiB tmpfs filled to the last byte, then emptied",
            messages=len(arrived),
            cases=sum(len(v) for v in told.values()) + 1,
            result=(
                f"filler {filled['bytes'] / 1024:.0f} KiB; {PER_PHASE} accepted before; while full {first_refused} accepted into the journal's "
                f"{JOURNAL_RESERVE // 1024} KiB reserve, then {refused_while_full} of {refused_while_full} refused not_stored, spawn refused not_stored; "
                f"{PER_PHASE} accepted after deleting the filler, no restart; {verdict.summary()}; reads failed {len(unserved)}; stuck 0"
            ),
        )
    finally:
        daemon.cleanup()


#: More refused sends than the 500 seqs the daemon once let wait for the disk
#: (``queue_full`` from then on, even after healing: issue 39, points 18 and 19).
MANY_REFUSALS = 600


def test_many_refusals_on_a_full_disk_say_not_stored_and_heal_without_a_restart(daemon_factory, roost_env, small_disk, record):
    """A job that gets many ``not_stored`` refusals on a real full disk: every refusal says
    ``not_stored`` (the disk is full, the queue is not busy), and once the space is back
    the next sends are accepted and arrive, with no restart."""
    home = small_disk / "home"
    home.mkdir()
    # A rate that lets one talker send them all in a minute.
    (home / "roost.json").write_text(json.dumps({"agentExternalMessages": True, "agentMessagesPerMinute": 10 * MANY_REFUSALS}))
    env = {**roost_env, "ROOST_HOME": str(home), "ROOST_JOURNAL_RESERVE_BYTES": str(JOURNAL_RESERVE)}
    daemon = DaemonHandle(home, env)
    ledger = Ledger()
    told: dict[str, list[str]] = {"full": [], "healed": []}
    try:
        daemon.start()
        box = daemon.start_job("hold the box", name="box", cwd=str(home))
        daemon.wait_job(box, "done")

        async def story() -> None:
            async with session(daemon, home, "talker") as me:
                await me.ensure_registered()
                await in_thread(fill, small_disk)
                # The journal's reserve takes the first sends; then every one is refused.
                while "not_stored" not in told["full"] and len(told["full"]) < MAX_SENDS_INTO_THE_RESERVE:
                    told["full"].append(await send(me, box, f"full {len(told['full'])}", ledger))
                for _ in range(MANY_REFUSALS):
                    told["full"].append(await send(me, box, f"full {len(told['full'])}", ledger))
                (small_disk / "filler").unlink()
                for i in range(PER_PHASE):
                    told["healed"].append(await send(me, box, f"healed {i}", ledger))

        run_async(story)
        first_refused = told["full"].index("not_stored")
        after = told["full"][first_refused:]
        codes = {code: after.count(code) for code in set(after)}
        assert after == ["not_stored"] * len(after) and all(accepted(result) for result in told["healed"]), (codes, told["healed"])
        rows = wait_until(lambda: quiet(rows := daemon.call("jobs")["jobs"]) and rows, what="the box to settle")
        talker = next(iter(ledger.promised))[0]
        # As in the test above: the first refused send may have been pushed first.
        ledger.unknown[(talker, box)].add(f"full {first_refused}")
        verdict = check_delivery(ledger, {box: received_messages(daemon.entries(box))})
        assert verdict.ok, verdict.explain()
        assert not stuck_jobs(rows)
        record(
            "disk",
            f"a real full disk: {len(after)} sends refused in a row, then the space comes back",
            messages=len(told["healed"]),
            cases=len(told["full"]) + len(told["healed"]),
            result=f"{len(after)} of {len(after)} refused not_stored (none queue_full); {PER_PHASE} accepted after deleting the filler, no restart; {verdict.summary()}",
        )
    finally:
        daemon.cleanup()


#: What a disk freed back after it filled up has room for in the tests below: less than
#: the journal's reserve (a megabyte), more than a few hundred ops need.
NEARLY_FULL_ROOM = 992 * 1024


def leave_room(folder: Path, room: int) -> None:
    """Fill the file system of ``folder`` with a filler file until ``room`` bytes are free."""
    stat = os.statvfs(folder)
    with open(folder / "filler", "wb", buffering=0) as fh:
        left = stat.f_bavail * stat.f_frsize - room
        chunk = b"\0" * 65536
        while left > 0:
            left -= fh.write(chunk[: min(left, len(chunk))])


def test_a_nearly_full_disk_stores_what_fits_and_after_a_restart(daemon_factory, roost_env, tmp_path, small_disk, record):
    """``ROOST_HOME`` on a disk with 992 KB free (less than the journal's 1 MiB reserve,
    the daemon's own): a job starts, sends to it are stored and arrive, and so after a
    daemon restart. The journal grows by what fits, not by its whole reserve or nothing."""
    home = small_disk / "home"
    home.mkdir()
    (home / "roost.json").write_text(json.dumps({"agentExternalMessages": True}))
    leave_room(small_disk, NEARLY_FULL_ROOM)
    env = {**roost_env, "ROOST_HOME": str(home)}
    daemon = DaemonHandle(home, env)
    ledger = Ledger()
    told: list[str] = []
    try:
        daemon.start()
        box = daemon.start_job("hold the box", name="box", cwd=str(home))
        daemon.wait_job(box, "done")

        async def sends(phase: str) -> None:
            async with session(daemon, tmp_path, "talker") as me:
                await me.ensure_registered()
                for i in range(PER_PHASE):
                    told.append(await send(me, box, f"{phase} {i}", ledger))

        run_async(lambda: sends("first"))
        daemon.terminate()
        daemon.restart()
        second = daemon.start_job("hold another box", name="box2", cwd=str(home))
        run_async(lambda: sends("after restart"))
        daemon.wait_job(second, "done")
        wait_until(lambda: quiet(daemon.call("jobs")["jobs"]), what="the jobs to settle")
        verdict = check_delivery(ledger, {box: received_messages(daemon.entries(box))})
        free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
        assert all(accepted(result) for result in told), told
        assert verdict.ok, verdict.explain()
        record(
            "disk",
            f"a nearly full disk: {NEARLY_FULL_ROOM // 1024} KB free, less than the journal's reserve",
            messages=verdict.arrived,
            cases=len(told) + 2,
            result=f"2 jobs started, {len(told)} of {len(told)} sends stored across a restart ({verdict.summary()}); {free // 1024} KB free after",
        )
    finally:
        daemon.cleanup()
