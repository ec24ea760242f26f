"""Corrupt and foreign files: session files, writer locks, job records, the journal and
the dead letters, damaged the ways a crash, another program or a hand edit leaves them.

Session files and locks: a job's worker (scripted host) and a foreground session resume a
damaged file: they take what they can read, rewrite nothing they read (every line that
was there stays, byte for byte), deliver what comes next exactly once and in order, and
say in the job's log (the foreground session's log) what they skipped or found out of
order. The real pi's resume of such files is in tests/pi/test_pi_damaged_session.py.

The daemon's files: a daemon that starts on damaged job records, journal lines or dead
letters sets what it cannot read aside (``<id>.json.bad``, ``queue.journal.bad``,
``dead.jsonl.bad``), logs it, and serves the rest: the other jobs, their queued items and
the good letters.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import wait_until
from fg import in_thread, run_async, session
from reliability.kit import Ledger, check_delivery, received_messages, stuck_jobs, transcript

pytestmark = pytest.mark.timeout(240)

PER_PHASE = 3


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


def rewrite(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"\n".join(lines))


def insert_after(index: int, *new: bytes) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        lines = lines_of(path)
        rewrite(path, lines[: index + 1] + list(new) + lines[index + 1:])

    return damage


def append(*new: bytes, newline: bool = True) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        with open(path, "ab") as fh:
            for line in new:
                fh.write(line + (b"\n" if newline else b""))

    return damage


def header_last(path: Path) -> None:
    lines = [line for line in lines_of(path) if line]
    rewrite(path, [*lines[1:], lines[0], b""])


def second_header(path: Path) -> None:
    header = json.loads(lines_of(path)[0])
    append(json.dumps({**header, "id": "another-session-id"}).encode())(path)


def swap_last_two_agent_items(path: Path) -> None:
    lines = lines_of(path)
    agent = [n for n, line in enumerate(lines) if b'"pi-roost-agent-message"' in line]
    a, b = agent[-2], agent[-1]
    lines[a], lines[b] = lines[b], lines[a]
    rewrite(path, lines)


def duplicate_last_agent_item(path: Path) -> None:
    lines = lines_of(path)
    last = [line for line in lines if b'"pi-roost-agent-message"' in line][-1]
    append(last)(path)


def lock(content: bytes) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        Path(str(path) + ".lock").write_bytes(content)

    return damage


#: name -> (damage to the session file or its lock, what the log must say of it)
SESSION_DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "a torn last line": (append(b'{"type":"message","id":"torn1","parentId":"x","message":{"role":"assis', newline=False), "its last line is torn"),
    "a line that is not JSON": (insert_after(1, b"\x00\xff garbage {{{ not json"), "skipped (not JSON"),
    "JSON lines that are no entries": (insert_after(1, b"[1, 2, 3]", b'"a string"', b"null"), "a JSON list, not an entry"),
    "no session header first": (header_last, "no session header first"),
    "two session headers": (second_header, "2 session headers"),
    "parentIds that name no entry, ids that are no strings": (
        append(b'{"type":"custom","id":42,"parentId":"nobody","customType":"note","data":{}}', b'{"type":"custom","id":"n2","parentId":[1],"customType":"note"}'),
        "parentId names no entry before them",
    ),
    "fields of the wrong JSON type": (
        append(
            b'{"type":"custom_message","id":"w1","customType":"pi-roost-agent-message","details":[1,2],"content":7}',
            b'{"type":"message","id":"w2","message":"a string, not a message"}',
            b'{"type":"custom","id":"w3","customType":"roost-run","data":"not an object"}',
            b'{"type":"message","id":"w4","message":{"role":"user","content":[{"type":"text","text":5}],"roost":{"seq":"x"}}}',
        ),
        "",
    ),
    "queue seqs going back": (swap_last_two_agent_items, "queue seqs going back"),
    "an entry written twice": (duplicate_last_agent_item, "queue seqs written more than once"),
    "a lock that is not JSON": (lock(b"\x00\x01 not a lock"), "holds garbage (not JSON"),
    "a lock that is a JSON list": (lock(b"[4242]"), "holds garbage (a JSON list"),
    "a lock whose pid is a string": (lock(b'{"pid": "4242", "createTime": 1.5}'), "holds garbage (no process id"),
    "a lock naming a live process with a garbage create time": (lock(b'{"pid": 1, "createTime": "yesterday"}'), "holds garbage (no create time"),
}


def test_a_worker_resumes_damaged_session_files_and_locks(daemon_factory, write_config, tmp_path, record):
    """One job per kind of damage. Each job gets messages, settles and is reaped; its
    session file (or lock) is damaged; then more messages start it again."""
    write_config({"agentExternalMessages": True, "reapAfterSeconds": 0.3, "agentMessagesPerMinute": 1000})
    daemon = daemon_factory().start()
    jobs = {name: daemon.start_job(f"hold the box {n}", name=f"box{n}") for n, name in enumerate(SESSION_DAMAGE)}
    for job in jobs.values():
        daemon.wait_job(job, "done")
    ledger = Ledger()
    before: dict[str, list[bytes]] = {}

    def all_reaped() -> bool:
        rows = {row["id"]: row for row in daemon.call("jobs")["jobs"]}
        return all(not rows[job]["live"] and rows[job]["pending"] == 0 for job in jobs.values())

    async def story() -> None:
        async with session(daemon, tmp_path, "talker") as me:
            await me.ensure_registered()
            for phase in ("first", "second"):
                for job in jobs.values():
                    for i in range(PER_PHASE):
                        result = await me.call("send", to=job, message=f"{phase} {i}")
                        ledger.told(me.peer_id, job, f"{phase} {i}", result["result"])
                await in_thread(wait_until, all_reaped, 90, what="every job to take its messages and be reaped")
                if phase == "first":
                    for name, (damage, _) in SESSION_DAMAGE.items():
                        path = Path(daemon.record(jobs[name])["session"])
                        damage(path)
                        before[name] = lines_of(path)

    run_async(story)
    rows = daemon.call("jobs")["jobs"]
    outcomes = {}
    for name, (_, said) in SESSION_DAMAGE.items():
        job = jobs[name]
        path = Path(daemon.record(job)["session"])
        after = lines_of(path)
        old = [line for line in before[name] if line]
        kept = after[: len(old)] == old or (before[name][-1] and after[: len(old)] == [*old[:-1], old[-1]])
        log = (daemon.paths.jobs_dir / f"{job}.log").read_text()
        # The first phase's lines are checked above (kept as they were, damage included);
        # what came after the damage must arrive once and in order.
        after_damage = Ledger(promised={k: [b for b in v if b.startswith("second")] for k, v in ledger.promised.items() if k[1] == job})
        verdict = check_delivery(after_damage, {job: [m for m in received_messages(transcript(path)) if m[1].startswith("second")]})
        outcomes[name] = (kept, said in log, verdict)
    assert not stuck_jobs(rows)
    failed = {name: (kept, logged, verdict.explain()) for name, (kept, logged, verdict) in outcomes.items() if not (kept and logged and verdict.ok)}
    assert not failed, failed
    assert ledger.promised_count == 2 * PER_PHASE * len(jobs)
    record(
        "corrupt file",
        "a worker resumes a damaged session file or lock: " + "; ".join(SESSION_DAMAGE),
        runs=len(SESSION_DAMAGE),
        messages=sum(v.arrived for _, _, v in outcomes.values()),
        cases=len(SESSION_DAMAGE),
        result=(
            f"{len(SESSION_DAMAGE)}/{len(SESSION_DAMAGE)} resumed: every line kept byte for byte, the damage named in the job's log, "
            f"the {PER_PHASE} messages sent after the damage arrived once and in order in each "
            f"({sum(v.arrived for _, _, v in outcomes.values())} in all); stuck 0"
        ),
    )


def test_a_foreground_session_resumes_a_damaged_file_and_lock(daemon_factory, write_config, tmp_path, record, caplog):
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()
    path = tmp_path / "listener.jsonl"
    ledger = Ledger()
    ids: dict[str, str] = {}

    async def first() -> None:
        async with session(daemon, tmp_path, "listener") as listener, session(daemon, tmp_path, "talker") as me:
            ids["listener"] = await listener.ensure_registered()
            ids["talker"] = await me.ensure_registered()
            for i in range(PER_PHASE):
                result = await me.call("send", to=ids["listener"], message=f"first {i}")
                ledger.told(me.peer_id, ids["listener"], f"first {i}", result["result"])
            await listener.wait_for_delivery(PER_PHASE)

    run_async(first)
    for damage in (header_last, insert_after(1, b"\x00\xff not json"), append(b'{"type":"message","id":"t","mess', newline=False)):
        damage(path)
    lock(b'{"pid": 1, "createTime": "garbage"}')(path)
    old = [line for line in lines_of(path) if line]
    caplog.set_level(logging.WARNING)

    async def second() -> None:
        async with session(daemon, tmp_path, "listener") as listener, session(daemon, tmp_path, "talker") as me:
            assert await listener.ensure_registered() == ids["listener"]
            await me.ensure_registered()
            for i in range(PER_PHASE):
                result = await me.call("send", to=ids["listener"], message=f"second {i}")
                ledger.told(me.peer_id, ids["listener"], f"second {i}", result["result"])
            await listener.wait_for_delivery(PER_PHASE)

    run_async(second)
    after = [line for line in lines_of(path) if line]
    said = caplog.text
    verdict = check_delivery(ledger, {ids["listener"]: received_messages(transcript(path))})
    assert after[: len(old)] == old
    assert verdict.ok and verdict.arrived == 2 * PER_PHASE, verdict.explain()
    for expected in ("no session header first", "skipped (not JSON", "its last line is torn", "holds garbage (no create time"):
        assert expected in said, expected
    record(
        "corrupt file",
        "a foreground session resumes a damaged file (header last, a non-JSON line, a torn last line) and a garbage lock",
        messages=verdict.arrived,
        cases=4,
        result=f"registered again as the same peer; every line kept; each damage named in its log; {verdict.summary()}",
    )


# --------------------------------------------------------------------------- the daemon's files


def test_a_daemon_starts_on_damaged_records_journal_and_dead_letters(daemon_factory, write_config, tmp_path, record):
    write_config({"agentExternalMessages": True, "reapAfterSeconds": 0.3})
    daemon = daemon_factory().start()
    names = ["keep", "garbage", "wrong-type", "foreign", "other-id", "bad-state"]
    jobs = {name: daemon.start_job(f"task of {name}", name=name) for name in names}
    for job in jobs.values():
        daemon.wait_job(job, "done")
    ledger = Ledger()
    ids: dict[str, str] = {}

    async def queue_some() -> None:
        async with session(daemon, tmp_path, "talker") as me:
            ids["talker"] = await me.ensure_registered()
            async with session(daemon, tmp_path, "gone") as gone:
                ids["gone"] = await gone.ensure_registered()
            await in_thread(lambda: wait_until(lambda: not any(r["live"] for r in daemon.call("agents")["agents"] if r["id"] == ids["gone"]), what="gone to go"))
            for i in range(2):
                await me.call("send", to=ids["gone"], message=f"letter {i}")
            await in_thread(daemon.call, "stop", job=jobs["keep"])  # keeps what it is sent
            for i in range(PER_PHASE):
                result = await me.call("send", to=jobs["keep"], message=f"queued {i}")
                ledger.told(me.peer_id, jobs["keep"], f"queued {i}", result["result"])

    run_async(queue_some)
    daemon.terminate()
    records = daemon.paths.jobs_dir
    (records / f"{jobs['garbage']}.json").write_bytes(b"\x00{{{ not a record")
    data = json.loads((records / f"{jobs['wrong-type']}.json").read_text())
    (records / f"{jobs['wrong-type']}.json").write_text(json.dumps({**data, "replySeq": "many", "depth": True}))
    (records / f"{jobs['foreign']}.json").write_text("[1, 2, 3]")
    data = json.loads((records / f"{jobs['other-id']}.json").read_text())
    (records / f"{jobs['other-id']}.json").write_text(json.dumps({**data, "id": "0000beef"}))
    data = json.loads((records / f"{jobs['bad-state']}.json").read_text())
    (records / f"{jobs['bad-state']}.json").write_text(json.dumps({**data, "state": "exploded", "worker_pid": "abc"}))
    journal = daemon.paths.journal
    good_journal = journal.read_bytes()
    journal.write_bytes(
        b"\xff\xfe not json\n"
        + good_journal
        + json.dumps({"op": "item", "job": jobs["keep"], "item": {"seq": "x", "kind": "message", "content": 5}}).encode() + b"\n"
        + json.dumps({"op": "seq", "job": jobs["keep"], "replySeq": "lots"}).encode() + b"\n"
        + json.dumps({"op": "explode", "job": jobs["keep"]}).encode() + b"\n"
    )
    dead = daemon.paths.state_dir / "dead.jsonl"
    good_dead = dead.read_bytes()
    dead.write_bytes(b"garbage line\n" + good_dead + b'{"sender": 5}\n[1]\n{"sender":"torn')
    daemon.restart()
    rows = {row["id"]: row for row in daemon.call("jobs")["jobs"]}
    letters = daemon.call("dead")["dead"]
    log = daemon.paths.daemon_log.read_text()
    daemon.call("reply", job=jobs["keep"], text="go on")
    daemon.wait_job(jobs["keep"], "done")
    arrived = received_messages(daemon.entries(jobs["keep"]))
    verdict = check_delivery(ledger, {jobs["keep"]: arrived})
    set_aside = sorted(p.name for p in records.glob("*.bad*"))
    bad_names = [n for n in names if n != "keep"]
    assert set(rows) == {jobs["keep"]}, rows
    assert set_aside == sorted(f"{jobs[n]}.json.bad" for n in bad_names), set_aside
    assert log.count("is unreadable") == len(bad_names)
    assert (daemon.paths.journal.with_name("queue.journal.bad")).read_bytes().startswith(b"\xff\xfe not json")
    assert "journal: 1 lines are not JSON" in log and "3 records are not ones roost writes" in log
    assert [letter["preview"] for letter in letters] == ["letter 0", "letter 1"]
    assert (daemon.paths.state_dir / "dead.jsonl.bad").read_bytes() == b'garbage line\n{"sender": 5}\n[1]\n'
    assert verdict.ok and verdict.arrived == PER_PHASE, verdict.explain()
    record(
        "corrupt file",
        "a daemon starts on damaged job records (not JSON, wrong types, a list, another id, a bad state), journal lines and dead letters",
        messages=verdict.arrived,
        cases=len(bad_names) + 4 + 3,
        result=(
            f"{len(bad_names)} records set aside as <id>.json.bad with a log line each; 1 unreadable journal line and 3 foreign "
            f"records skipped, the journal kept as queue.journal.bad; 3 bad dead-letter lines set aside in dead.jsonl.bad (a torn "
            f"last one dropped); the good job served with its {PER_PHASE} queued messages delivered ({verdict.summary()}); "
            f"`dead` lists the {len(letters)} good letters"
        ),
    )


def tear(data: bytes, start: int, end: int) -> bytes:
    """``data`` with the bytes from ``start`` to ``end`` lost as a crash loses them: a write
    whose pages did not all reach the disk leaves what was there before, and the journal
    writes its records into zeros written ahead of them."""
    return data[:start] + bytes(end - start) + data[end:]


@pytest.mark.parametrize("where", ["last", "middle"])
def test_a_journal_record_torn_in_the_middle_is_named_and_kept(daemon_factory, write_config, tmp_path, record, where):
    """Queue items on a stopped job, stop the daemon, tear one item's record through its
    middle, as a crash in a write does (its second half and its newline lost: zeros), and
    start the daemon again. It must say so in its log and keep the journal as it was in
    ``queue.journal.bad``: the item may have been answered as stored, and nobody would
    learn it is gone. A record after the torn one is read (not glued to the torn half)."""
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()
    job = daemon.start_job("hold the queue", name="keep")
    daemon.wait_job(job, "done")
    daemon.call("stop", job=job)  # keeps what it is sent, once its worker is gone
    wait_until(lambda: daemon.job(job)["workerPid"] is None, what="the stopped job's worker to exit")
    told: list[str] = []

    async def queue_some() -> None:
        async with session(daemon, tmp_path, "talker") as me:
            await me.ensure_registered()
            for i in range(PER_PHASE):
                told.append((await me.call("send", to=job, message=f"queued {i}"))["result"])

    run_async(queue_some)
    assert told == ["stopped"] * PER_PHASE, told
    daemon.terminate()
    journal = daemon.paths.journal
    before = journal.read_bytes()
    records = [line for line in before.rstrip(b"\0").split(b"\n") if line]
    bodies = {n: f"queued {n}".encode() for n in range(PER_PHASE)}
    torn_n = PER_PHASE - 1 if where == "last" else 0
    line = next(line for line in records if bodies[torn_n] in line)
    start = before.index(line) + len(line) // 2
    torn = tear(before, start, before.index(line) + len(line) + 1)
    journal.write_bytes(torn)
    daemon.restart()
    log = daemon.paths.daemon_log.read_text()
    daemon.call("reply", job=job, text="go on")
    daemon.wait_job(job, "done")
    arrived = received_messages(daemon.entries(job))
    bodies_arrived = [body for _, body in arrived]
    kept = journal.with_name("queue.journal.bad")
    assert "journal:" in log and "torn" in log, log[-2000:]
    assert kept.exists() and kept.read_bytes() == torn
    assert bodies_arrived == [f"queued {n}" for n in range(PER_PHASE) if n != torn_n], bodies_arrived
    assert not stuck_jobs(daemon.call("jobs")["jobs"])
    record(
        "corrupt file",
        f"a journal item record torn through its middle ({where} record), the daemon restarted",
        messages=len(arrived),
        cases=1,
        result=f"a log line names the torn record; the journal as it was kept in queue.journal.bad; the {len(bodies_arrived)} whole items delivered",
    )
