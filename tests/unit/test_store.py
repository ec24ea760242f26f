"""Durable state: atomic job records and the group-commit journal."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import threading

import anyio
import anyio.lowlevel
import pytest

from roost_core import faults, platform
from roost_core.store import (
    RESERVE_BYTES,
    JobFiles,
    Journal,
    JournalError,
    atomic_write,
    encode_record,
    read_journal,
    write_json,
)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


# --------------------------------------------------------------------------- atomic files


@pytest.mark.parametrize("durable", [True, False])
def test_atomic_write_replaces_the_file_and_leaves_no_temp_file(tmp_path, durable):
    target = tmp_path / "record.json"
    target.write_bytes(b"old")
    atomic_write(target, b"new contents", durable=durable)
    assert target.read_bytes() == b"new contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]
    assert mode(target) == 0o600


def test_atomic_write_of_a_large_file(tmp_path):
    target = tmp_path / "big"
    data = os.urandom(3 * 1024 * 1024)
    atomic_write(target, data)
    assert target.read_bytes() == data
    assert [p.name for p in tmp_path.iterdir()] == ["big"]


def test_job_files_round_trip(tmp_path):
    files = JobFiles(tmp_path, durable=False)
    records = {
        "a1b2c3d4": {"id": "a1b2c3d4", "state": "idle", "scenario": {"run": [{"steps": [{"say": "x"}]}]}},
        "0badc0de": {"id": "0badc0de", "state": "done", "name": "ünïcode"},
    }
    for job_id, data in records.items():
        files.save(job_id, data)
    assert read_back(JobFiles(tmp_path)) == records
    files.save("a1b2c3d4", {**records["a1b2c3d4"], "state": "running"})
    assert read_back(files)["a1b2c3d4"]["state"] == "running"
    for path in tmp_path.iterdir():
        assert mode(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0badc0de.json", "a1b2c3d4.json"]
    files.delete("a1b2c3d4")
    files.delete("a1b2c3d4")  # deleting twice is fine
    assert list(read_back(files)) == ["0badc0de"]


def read_back(files: JobFiles) -> dict[str, object]:
    """Every record as the daemon reads them at its start (``JobFiles.records``), by file name."""
    return {path.stem: data for path, data in files.records()}


def test_job_files_read_every_record_and_no_temp_file(tmp_path):
    """What the daemon's start reads: each record file, what is not JSON as None (it sets
    those aside); never a temp file of a write that did not finish."""
    files = JobFiles(tmp_path)
    files.save("a1b2c3d4", {"id": "a1b2c3d4"})
    (tmp_path / "torn.json").write_text('{"id": "torn"')
    (tmp_path / "noid.json").write_text('{"state": "idle"}')
    (tmp_path / ".a1b2c3d4.json.123.tmp").write_text('{"id": "tmp"}')
    assert read_back(files) == {"a1b2c3d4": {"id": "a1b2c3d4"}, "noid": {"state": "idle"}, "torn": None}


# --------------------------------------------------------------------------- the journal


def test_read_journal_skips_a_torn_last_line_and_non_objects(tmp_path):
    path = tmp_path / "queue.journal"
    path.write_bytes(b'{"op":"item","n":1}\n[1,2]\n\n{"op":"ack","n":2}\n{"op":"item","n":3')
    assert list(read_journal(path)) == [{"op": "item", "n": 1}, {"op": "ack", "n": 2}]
    assert list(read_journal(tmp_path / "missing")) == []


def test_read_journal_reads_through_zeros_wherever_they_are(tmp_path):
    """Zeros written ahead follow the records; a crash can leave some between records
    too (a write's pages reach the disk in any order). No record holds a zero byte, so
    replay reads every whole record around them."""
    path = tmp_path / "queue.journal"
    path.write_bytes(b'{"op":"item","n":1}\n' + bytes(5000) + b'{"op":"ack","n":2}\n' + bytes(3) + b'{"op":"item","n":3}\n' + bytes(70000))
    unreadable: list[int] = []
    assert list(read_journal(path, unreadable)) == [{"op": "item", "n": 1}, {"op": "ack", "n": 2}, {"op": "item", "n": 3}]
    assert unreadable == []


def test_read_journal_counts_every_torn_record(tmp_path):
    """Zeros inside a line stand for bytes lost there (a page of a write that never
    reached the disk): the record is torn, counted, and never glued to the record after
    it; a torn last record (no newline before the zeros or the end) is counted too."""
    path = tmp_path / "queue.journal"
    path.write_bytes(
        b'{"op":"item","n":1}\n{"op":"it' + bytes(3) + b'em","n":2}\n{"op":"item",' + bytes(9) + b'{"op":"ack","n":3}\n{"op":"item","n":4}\nnot json\n{"op":"ite' + bytes(500)
    )
    unreadable: list[int] = []
    torn: list[int] = []
    assert list(read_journal(path, unreadable, torn)) == [{"op": "item", "n": 1}, {"op": "ack", "n": 3}, {"op": "item", "n": 4}]
    assert unreadable == [2, 2, 3, 5, 6]
    assert torn == [2, 2, 3, 6]
    path.write_bytes(b'{"op":"item","n":1}\n{"op":"item","n":2')
    unreadable, torn = [], []
    assert list(read_journal(path, unreadable, torn)) == [{"op": "item", "n": 1}]
    assert unreadable == torn == [2]


async def _with_journal(journal, body):
    async with anyio.create_task_group() as tg:
        await tg.start(journal.run)
        try:
            await body()
        finally:
            await journal.aclose()


def test_group_commit_many_concurrent_appends_take_fewer_commits(tmp_path):
    path = tmp_path / "queue.journal"
    journal = Journal(path, durable=True)
    count = 300

    async def body():
        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(journal.append, {"op": "item", "n": n})

    anyio.run(_with_journal, journal, body)
    records = list(read_journal(path))
    assert sorted(r["n"] for r in records) == list(range(count))
    assert journal.records == count
    assert 1 <= journal.commits < count
    assert mode(path) == 0o600


def test_append_returns_only_once_the_record_is_in_the_file(tmp_path):
    path = tmp_path / "queue.journal"
    journal = Journal(path, durable=True)
    seen = []

    async def body():
        await journal.append({"op": "item", "n": 1}, {"op": "item", "n": 2})
        seen.extend(read_journal(path))

    anyio.run(_with_journal, journal, body)
    assert seen == [{"op": "item", "n": 1}, {"op": "item", "n": 2}]


def test_append_after_close_fails(tmp_path):
    journal = Journal(tmp_path / "j", durable=False)

    async def main():
        async with anyio.create_task_group() as tg:
            await tg.start(journal.run)
            await journal.aclose()
        with pytest.raises(JournalError):
            await journal.append({"op": "x"})

    anyio.run(main)


def test_a_journal_opened_on_a_torn_tail_does_not_lose_the_next_record(tmp_path):
    # A crash mid-append leaves a torn last line; the next append must start on a new
    # line, or replay reads "torn+new" as one broken line and loses the new record.
    path = tmp_path / "queue.journal"
    path.write_bytes(b'{"op":"item","n":1}\n{"op":"it')
    journal = Journal(path, durable=False)

    async def body():
        await journal.append({"op": "ack", "n": 2})

    anyio.run(_with_journal, journal, body)
    assert list(read_journal(path)) == [{"op": "item", "n": 1}, {"op": "ack", "n": 2}]


#: What makes a file durable, and what makes a commit's data durable, on the platform
#: this test runs (:mod:`roost_core.platform`): Linux writes a commit with ``RWF_DSYNC``;
#: the portable implementation syncs after the write, with ``F_FULLFSYNC`` where it exists.
FULL_FSYNC = platform.NAME == "portable" and hasattr(fcntl, "F_FULLFSYNC")
FILE_SYNC = "full fsync" if FULL_FSYNC else "fsync"
DATA_SYNC = "dsync write" if platform.NAME == "linux" else "full fsync" if FULL_FSYNC else "fdatasync"


class SyncCalls:
    """How each commit's write was made durable: ``os.fsync``, ``os.fdatasync``, a write
    synced as it is made (``os.pwritev`` with ``RWF_DSYNC``: "dsync write"), or
    ``fcntl(F_FULLFSYNC)`` ("full fsync"), each still doing its real work, named in a
    list as they are called."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[str] = []
        for name in ("fsync", "fdatasync"):
            if hasattr(os, name):
                monkeypatch.setattr(os, name, self._named(name, getattr(os, name)))
        real_pwritev = os.pwritev

        def pwritev(fd, buffers, offset, flags=0):
            if flags & getattr(os, "RWF_DSYNC", 0):
                self.calls.append("dsync write")
            return real_pwritev(fd, buffers, offset, flags)

        monkeypatch.setattr(os, "pwritev", pwritev)
        real_fcntl = fcntl.fcntl

        def fcntl_call(fd, cmd, arg=0):
            if cmd == getattr(fcntl, "F_FULLFSYNC", None):
                self.calls.append("full fsync")
            return real_fcntl(fd, cmd, arg)

        monkeypatch.setattr(fcntl, "fcntl", fcntl_call)

    def _named(self, name, real):
        def sync(fd):
            self.calls.append(name)
            real(fd)

        return sync


def test_a_durable_journal_writes_its_records_into_zeros_written_ahead(tmp_path, monkeypatch):
    """The first commit writes its records and a reserve of zeros after them, and
    fsyncs; commits that fit in the reserve overwrite zeros and need only a data sync,
    made by the write itself (the file's size does not move); one that does not fit
    writes the next reserve with it and fsyncs. A journal opened again (a restart) writes
    right after the last record, and replay reads the records, never the zeros."""
    path = tmp_path / "queue.journal"
    journal = Journal(path, durable=True)
    syncs = SyncCalls(monkeypatch)
    first, second = encode_record({"op": "item", "n": 1}), encode_record({"op": "item", "n": 2})
    big = encode_record({"op": "item", "n": 3, "pad": "z" * RESERVE_BYTES})

    async def body():
        await journal.append({"op": "item", "n": 1})
        assert path.read_bytes() == first + bytes(RESERVE_BYTES)
        await journal.append({"op": "item", "n": 2})
        assert path.read_bytes() == first + second + bytes(RESERVE_BYTES - len(second))
        await journal.append({"op": "item", "n": 3, "pad": "z" * RESERVE_BYTES})
        assert path.read_bytes() == first + second + big + bytes(RESERVE_BYTES)

    anyio.run(_with_journal, journal, body)
    assert syncs.calls == [FILE_SYNC, DATA_SYNC, FILE_SYNC]
    again = Journal(path, durable=True)
    anyio.run(_with_journal, again, lambda: again.append({"op": "ack", "n": 4}))
    assert path.read_bytes().rstrip(b"\0") == first + second + big + encode_record({"op": "ack", "n": 4})
    assert [record["n"] for record in read_journal(path)] == [1, 2, 3, 4]
    assert syncs.calls[-1] == DATA_SYNC


@pytest.mark.skipif(platform.NAME != "linux", reason="RWF_DSYNC is the Linux implementation's (the portable one syncs after the write)")
def test_a_filesystem_without_per_write_sync_gets_write_then_fdatasync(tmp_path, monkeypatch):
    """Where the kernel or filesystem refuses ``RWF_DSYNC`` (before writing a byte), a
    commit inside the reserve is written, then fdatasynced, and every later one goes
    that way at once."""
    from roost_core.platform import linux

    monkeypatch.setattr(linux, "_DSYNC", getattr(os, "RWF_DSYNC", 2))
    syncs = SyncCalls(monkeypatch)
    real = os.pwritev

    def refusing(fd, buffers, offset, flags=0):
        if flags:
            syncs.calls.append("dsync write refused")
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real(fd, buffers, offset)

    path = tmp_path / "queue.journal"
    journal = Journal(path, durable=True)
    monkeypatch.setattr(os, "pwritev", refusing)

    async def body():
        for n in range(3):
            await journal.append({"op": "item", "n": n})

    anyio.run(_with_journal, journal, body)
    assert syncs.calls == ["fsync", "dsync write refused", "fdatasync", "fdatasync"]
    assert [record["n"] for record in read_journal(path)] == [0, 1, 2]


def test_a_torn_record_in_the_zeros_is_ended_where_it_stops(tmp_path):
    """A crash mid-commit leaves part of a record in the reserve, zeros after it: the
    journal opened on it ends that part with a newline where it stops (not past the
    zeros), so the next record stands alone on its line and nothing is lost. (Replay
    counts the torn part, before and after: it may be a record that was answered.)"""
    path = tmp_path / "queue.journal"
    path.write_bytes(b'{"op":"item","n":1}\n{"op":"it' + bytes(4096))
    unreadable: list[int] = []
    assert list(read_journal(path, unreadable)) == [{"op": "item", "n": 1}] and unreadable == [2]
    unreadable = []
    journal = Journal(path, durable=True)
    anyio.run(_with_journal, journal, lambda: journal.append({"op": "item", "n": 2}))
    assert path.read_bytes().rstrip(b"\0") == b'{"op":"item","n":1}\n{"op":"it\n{"op":"item","n":2}\n'
    assert list(read_journal(path, unreadable)) == [{"op": "item", "n": 1}, {"op": "item", "n": 2}]
    assert unreadable == [2]


def test_close_waits_for_a_commit_in_flight(tmp_path, monkeypatch):
    # A slow disk: the committer is inside fsync when the daemon shuts the journal. The
    # fsync is held until the close has begun and waits (every task blocked), then let go.
    real_fsync = os.fsync
    inside, release = threading.Event(), threading.Event()

    def held_fsync(fd):
        inside.set()
        release.wait()
        real_fsync(fd)

    path = tmp_path / "queue.journal"
    journal = Journal(path, durable=True)
    monkeypatch.setattr(os, "fsync", held_fsync)
    outcome: list[str] = []
    closed: list[bool] = []

    async def main():
        async with anyio.create_task_group() as tg:
            await tg.start(journal.run)

            async def append():
                try:
                    await journal.append({"op": "item", "n": 1})
                    outcome.append("ok")
                except JournalError as exc:
                    outcome.append(f"error: {exc}")

            async def close():
                await journal.aclose()
                closed.append(True)

            tg.start_soon(append)
            await anyio.to_thread.run_sync(inside.wait)  # the commit is in its thread, in fsync
            tg.start_soon(close)
            await anyio.wait_all_tasks_blocked()
            assert closed == [] and outcome == [], "the close did not wait for the commit in flight"
            release.set()

    try:
        anyio.run(main)
    finally:
        release.set()
    assert outcome == ["ok"] and closed == [True]
    assert list(read_journal(path)) == [{"op": "item", "n": 1}]


def test_compaction_rewrites_the_journal_as_the_live_snapshot(tmp_path):
    path = tmp_path / "queue.journal"
    live = [{"op": "seq", "job": "a1b2c3d4", "replySeq": 99, "acked": 97}, {"op": "item", "job": "a1b2c3d4", "item": {"seq": 98}}, {"op": "item", "job": "a1b2c3d4", "item": {"seq": 99}}]
    journal = Journal(path, durable=False, snapshot=lambda: live, compact_after=2000)

    async def body():
        for n in range(100):
            await journal.append({"op": "item", "job": "a1b2c3d4", "item": {"seq": n, "content": "x" * 50}})

    anyio.run(_with_journal, journal, body)
    records = list(read_journal(path))
    # The file was rewritten: it is small, holds the live records, and dropped history.
    assert path.stat().st_size < 2000 + 200
    for record in live:
        assert record in records
    assert {"op": "item", "job": "a1b2c3d4", "item": {"seq": 0, "content": "x" * 50}} not in records
    assert journal.records == 100
    assert [p.name for p in tmp_path.iterdir()] == ["queue.journal"]
    assert mode(path) == 0o600


def test_appends_after_compaction_go_to_the_new_file(tmp_path):
    path = tmp_path / "queue.journal"
    journal = Journal(path, durable=False, snapshot=lambda: [{"op": "seq", "n": -1}], compact_after=100)

    async def body():
        await journal.append({"op": "item", "n": 0, "pad": "x" * 200})  # compacts after this commit
        await journal.append({"op": "item", "n": 1})

    anyio.run(_with_journal, journal, body)
    assert list(read_journal(path)) == [{"op": "seq", "n": -1}, {"op": "item", "n": 1}]


def test_replace_with_is_atomic_and_reopens_for_append(tmp_path):
    path = tmp_path / "queue.journal"
    journal = Journal(path, durable=False)
    journal.replace_with(b'{"op":"seq"}\n')

    async def body():
        await journal.append({"op": "item"})

    anyio.run(_with_journal, journal, body)
    assert path.read_bytes() == b'{"op":"seq"}\n{"op":"item"}\n'
    assert json.loads(path.read_bytes().splitlines()[0]) == {"op": "seq"}


# --------------------------------------------------------------------------- failing disks


@pytest.fixture
def failing(monkeypatch, tmp_path):
    """Arm I/O fault points in this process; ``failing(point, "ENOSPC")`` makes it fail,
    ``failing(point, None)`` heals it."""
    monkeypatch.setenv("ROOST_HOME", str(tmp_path))
    (tmp_path / "faults").mkdir()
    armed: set[str] = set()

    def set_fault(point: str, code: str | None) -> None:
        armed.add(point)
        monkeypatch.setenv("ROOST_FAULTS", ",".join(sorted(armed)))
        faults._forget()
        control = tmp_path / "faults" / point
        if code is None:
            control.unlink(missing_ok=True)
        else:
            control.write_text(code)

    yield set_fault
    monkeypatch.delenv("ROOST_FAULTS")
    faults._forget()


@pytest.mark.parametrize("point", ["io.journal.write", "io.journal.fsync"])
def test_a_failed_commit_leaves_nothing_and_the_next_one_stands_alone(tmp_path, failing, point):
    """A write that fails half-way (or whose fsync fails) is cut off again: the file holds
    only the commits that succeeded, each on its own line, and ``append`` raised for the
    failed one."""
    path = tmp_path / "queue.journal"
    journal = Journal(path, durable=True)
    raised = []

    async def body():
        await journal.append({"op": "item", "n": 1})
        failing(point, "ENOSPC")
        try:
            await journal.append({"op": "item", "n": 2, "pad": "x" * 100}, {"op": "item", "n": 3})
        except JournalError as exc:
            raised.append(str(exc))
        assert not journal.healthy
        failing(point, None)
        await journal.append({"op": "item", "n": 4})
        assert journal.healthy

    anyio.run(_with_journal, journal, body)
    assert len(raised) == 1 and "No space left" in raised[0]
    assert path.read_bytes().rstrip(b"\0") == b'{"op":"item","n":1}\n{"op":"item","n":4}\n'


def test_when_the_cut_fails_too_the_next_commit_rewrites_the_file_from_the_snapshot(tmp_path, failing, monkeypatch):
    path = tmp_path / "queue.journal"
    live = [{"op": "seq", "n": 0}]
    journal = Journal(path, durable=False, snapshot=lambda: list(live))

    def no_truncate(fd, size):
        raise OSError(errno.EIO, "Input/output error")

    async def body():
        await journal.append({"op": "seq", "n": 0})
        failing("io.journal.write", "EIO")
        with monkeypatch.context() as patch:
            patch.setattr(os, "ftruncate", no_truncate)
            with pytest.raises(JournalError):
                await journal.append({"op": "item", "n": 1, "pad": "y" * 100})
        failing("io.journal.write", None)
        live.append({"op": "item", "n": 2})  # what the daemon holds now
        await journal.append({"op": "item", "n": 2})

    anyio.run(_with_journal, journal, body)
    assert list(read_journal(path)) == [{"op": "seq", "n": 0}, {"op": "item", "n": 2}]
    assert b"y" * 10 not in path.read_bytes()


def test_a_compaction_that_fails_does_not_fail_its_commit(tmp_path):
    """Regression: a compaction (a rewrite after the commit's records are on disk) that
    failed marked the commit failed, so the daemon dropped items that were durable and told
    their senders so; after a restart they were delivered anyway."""
    path = tmp_path / "queue.journal"
    journal = Journal(path, durable=False, snapshot=lambda: [{"op": "seq", "n": -1}], compact_after=100)
    (tmp_path / f".queue.journal.{os.getpid()}.tmp").mkdir()  # the rewrite's temp file cannot be made

    async def body():
        await journal.append({"op": "item", "n": 0, "pad": "x" * 200})
        await journal.append({"op": "item", "n": 1})

    anyio.run(_with_journal, journal, body)
    assert [r["n"] for r in read_journal(path)] == [0, 1]
    assert journal.healthy


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path, failing):
    path = tmp_path / "job.json"
    write_json(path, {"v": 1})
    for point in ("io.record.write", "io.record.fsync"):
        failing(point, "ENOSPC")
        with pytest.raises(OSError):
            write_json(path, {"v": 2})
        failing(point, None)
        assert json.loads(path.read_text()) == {"v": 1}
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["job.json"]


# --------------------------------------------------------------------------- hand-overs in flight


class GatedDisk:
    """``os.fsync``, ``os.fdatasync`` and ``store.write_durably`` (or the journal's
    ``write_at``) that hold their first call on the writer thread until the test opens
    the gate: a commit stays on the disk while the test hands more over."""

    def __init__(self, monkeypatch, *, fail_first: bool = False) -> None:
        import threading

        from roost_core import store

        self.entered = threading.Event()
        self.gate = threading.Event()
        self.calls = 0
        self.fail_first = fail_first
        if fail_first:
            real = store.write_at

            def write_at(fd, data, offset):
                self._hold()
                if self.calls == 1:
                    raise OSError(errno.EIO, "Input/output error")
                real(fd, data, offset)

            monkeypatch.setattr(store, "write_at", write_at)
        else:
            for name in ("fsync", "fdatasync"):
                if hasattr(os, name):
                    monkeypatch.setattr(os, name, self._gated(getattr(os, name)))
            # A write synced as it is made (inside the reserve) is a sync too, one only
            # (the portable platform's write then fdatasync inside it is not a second).
            real_durably = store.write_durably
            self.inside = threading.local()

            def write_durably(fd, data, offset):
                self._hold()
                self.inside.durably = True
                try:
                    real_durably(fd, data, offset)
                finally:
                    self.inside.durably = False

            monkeypatch.setattr(store, "write_durably", write_durably)

    def _hold(self) -> None:
        """Count a call; hold the first until the gate opens."""
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            self.gate.wait(30)

    def _gated(self, real):
        def sync(fd):
            if not getattr(getattr(self, "inside", None), "durably", False):
                self._hold()
            real(fd)

        return sync

    async def wait_entered(self) -> None:
        await anyio.to_thread.run_sync(self.entered.wait, 30)


async def handed_over(journal: Journal, count: int) -> None:
    """Until ``count`` commits wait on the writer (each hand-over is made at a loop pass)."""
    while len(journal._handed) < count:
        await anyio.lowlevel.checkpoint()


def test_hand_overs_queued_while_a_commit_is_on_the_disk_share_the_next_write(tmp_path, monkeypatch):
    """The loop does not wait for the commit in flight to hand the next records over; the
    writer takes every hand-over queued meanwhile into one write and one fsync, and the
    commits finish in the order they were handed over."""
    path = tmp_path / "queue.journal"
    journal = Journal(path, durable=True)
    disk = GatedDisk(monkeypatch)
    finished: list[str] = []

    async def body():
        commits = {"a": journal.add({"op": "item", "n": "a"})}
        await disk.wait_entered()  # a is in fsync, on the writer thread
        commits["b"] = journal.add({"op": "item", "n": "b"})
        await handed_over(journal, 2)
        commits["c"] = journal.add({"op": "item", "n": "c"})
        await handed_over(journal, 3)
        for name, commit in commits.items():
            commit.when_done(lambda _c, name=name: finished.append(name))
        disk.gate.set()
        await commits["c"].wait()
        assert all(commit.error is None for commit in commits.values())

    anyio.run(_with_journal, journal, body)
    assert finished == ["a", "b", "c"]
    assert [r["n"] for r in read_journal(path)] == ["a", "b", "c"]
    assert journal.commits == 3 and journal.records == 3
    assert disk.calls == 2  # a alone, then b and c in one fsync


def test_appends_handed_over_behind_a_write_that_could_not_be_undone_fail_and_the_next_rewrites(tmp_path, monkeypatch):
    """A write fails and its cut fails too, while another append waits on the writer:
    that append cannot go after the unknown tail, so it fails as well (its sender is told,
    its records are dropped), and the next commit writes the file anew from the snapshot,
    taken once nothing is in flight."""
    path = tmp_path / "queue.journal"
    live = [{"op": "seq", "n": 0}]
    journal = Journal(path, durable=True, snapshot=lambda: list(live))
    disk = GatedDisk(monkeypatch, fail_first=True)
    real_truncate = os.ftruncate
    truncates = []

    def no_truncate(fd, size):
        truncates.append(size)
        raise OSError(errno.EIO, "Input/output error")

    async def body():
        first = journal.add({"op": "item", "n": 1, "pad": "y" * 100})
        await disk.wait_entered()
        second = journal.add({"op": "item", "n": 2})
        await handed_over(journal, 2)
        monkeypatch.setattr(os, "ftruncate", no_truncate)
        disk.gate.set()
        await second.wait()
        monkeypatch.setattr(os, "ftruncate", real_truncate)
        assert first.error is not None and second.error is not None
        assert "rewritten" in str(second.error)
        assert not journal.healthy
        live.append({"op": "item", "n": 3})  # what the daemon holds now (1 and 2 were dropped)
        await journal.append({"op": "item", "n": 3})
        assert journal.healthy

    anyio.run(_with_journal, journal, body)
    assert truncates  # the cut was tried, and failed
    assert list(read_journal(path)) == [{"op": "seq", "n": 0}, {"op": "item", "n": 3}]
