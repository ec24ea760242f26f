"""Durable state: job records by atomic replace, queue items in one shared journal.

Job records change rarely (state, worker pid), so each is written atomically: temp file,
fsync, rename, fsync dir. Queue items change per message, so they go to one append-only
journal with group commit: appends that arrive while an fsync is in flight join the next
one, which keeps the cost per item near the cost of ``write``. Replay is idempotent (an
item already held or acked is ignored), which lets compaction run between commits.

The journal's file is its records followed by zeros written ahead of them
(:data:`RESERVE_BYTES`): a commit that lands inside that space changes no metadata, so
a data sync (:func:`write_durably`: on Linux one write with ``RWF_DSYNC``, see
:mod:`roost_core.platform`) makes it durable without a commit of the filesystem's own
journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import queue
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import anyio

from roost_core import faults, platform
from roost_core.protocol import _long_digits, _orjson, _shallow, encode

COMPACT_AFTER_BYTES = 8 * 1024 * 1024
#: Zeros a durable journal keeps written (and fsynced) past its last record. A commit
#: inside them overwrites blocks that exist already: the file's size and extents stay as
#: they are, so a data sync (``fdatasync``, or a write with ``RWF_DSYNC``) flushes the
#: data alone, while an append that grows the file makes ``fsync`` wait for the
#: filesystem's journal as well (on this machine's ext4 the former takes about half the
#: time per 28 KB commit, idle or busy: ``python -m bench.syncs``). A commit past them
#: writes the next reserve with it and fsyncs (or less, on a nearly full disk: see
#: ``Journal._write_reserve``). The reserve also keeps room for messages when the disk
#: fills up. Replay ignores the zeros.
RESERVE_BYTES = 1024 * 1024
#: What the reserve is written from, a piece at a time: a zero buffer of the reserve's own
#: size, made per growth, would stay in the daemon's heap once freed (glibc raises its
#: mmap threshold to a freed block's size).
_ZERO_BLOCK = bytes(64 * 1024)

log = logging.getLogger("roost.store")
#: This Python writes several buffers in one call.
_PWRITEV = hasattr(os, "pwritev")


def fsync_dir(folder: Path) -> None:
    """Make the names in ``folder`` durable (a rename or a new file in it)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        platform.sync_file(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True, kind: str = "record") -> None:
    """Replace ``path`` with ``data`` so a reader sees the old or the new file, never a mix.

    A write or fsync that fails (a full disk, an I/O error) raises ``OSError`` and leaves
    the old file as it was; the temp file is removed, so a full disk is not filled further.
    ``kind`` names the I/O fault points (``io.<kind>.write``, ``io.<kind>.fsync``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            faults.io(f"io.{kind}.write")
            write_all(fd, data)
            if durable:
                faults.io(f"io.{kind}.fsync")
                platform.sync_file(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    faults.point("store.during_atomic_write")
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until all of ``data`` is written (a short write is not an error)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_zeros(fd: int, count: int, offset: int) -> None:
    """Write ``count`` zero bytes at ``offset``, from :data:`_ZERO_BLOCK` (one ``pwritev``
    of up to 64 pieces at a time)."""
    block = memoryview(_ZERO_BLOCK)
    while count > 0:
        whole, rest = divmod(min(count, 64 * len(block)), len(block))
        pieces = [block] * whole + ([block[:rest]] if rest else [])
        # (macOS before 11 has no pwritev: one piece at a time there.)
        written = os.pwritev(fd, pieces, offset) if _PWRITEV else os.pwrite(fd, pieces[0], offset)
        count, offset = count - written, offset + written


def write_at(fd: int, data: bytes | memoryview, offset: int) -> None:
    """``os.pwrite`` of all of ``data`` at ``offset`` (a short write is not an error)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def write_durably(fd: int, data: bytes | memoryview, offset: int) -> None:
    """:func:`write_at`, durable once it returns, as a data sync after it would make it
    (:func:`roost_core.platform.write_synced`: one ``pwritev2`` with ``RWF_DSYNC`` on
    Linux, so the journal's thread takes the GIL back once per commit, not twice)."""
    platform.write_synced(fd, data, offset)


def write_json(path: Path, data: dict[str, Any], *, durable: bool = True) -> None:
    atomic_write(path, json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True).encode("utf-8"), durable=durable)


class JobFiles:
    """One JSON file per job under ``jobs/``."""

    def __init__(self, folder: Path, *, durable: bool = True) -> None:
        self.folder = folder
        self.durable = durable

    def save(self, job_id: str, data: dict[str, Any]) -> None:
        write_json(self.folder / f"{job_id}.json", data, durable=self.durable)

    def delete(self, job_id: str) -> None:
        try:
            (self.folder / f"{job_id}.json").unlink()
        except FileNotFoundError:
            return
        if self.durable:
            fsync_dir(self.folder)

    def records(self) -> Iterator[tuple[Path, Any]]:
        """Each record file and what it holds (None when it is not JSON at all)."""
        for path in sorted(self.folder.glob("*.json")):
            try:
                data: Any = json.loads(path.read_bytes())
            except (OSError, ValueError, RecursionError):
                data = None
            yield path, data

    def set_aside(self, path: Path) -> Path:
        """Rename a record the daemon cannot read to ``<name>.bad`` (``.bad.2``... if taken),
        where no load looks and a person can; returns the new path."""
        target = path.with_name(path.name + ".bad")
        number = 1
        while target.exists():
            number += 1
            target = path.with_name(f"{path.name}.bad.{number}")
        os.replace(path, target)
        return target


#: A journal's pieces: the bytes between newlines and runs of zeros. A record never holds
#: either, so a zero inside a line is not one to drop but the mark of bytes lost there.
_PIECE = re.compile(rb"[^\n\0]+")


def read_journal(path: Path, unreadable: list[int] | None = None, torn: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """The journal's records, each a JSON object on a line of its own.

    Zeros are no record's bytes: those written ahead (:data:`RESERVE_BYTES`) follow the
    records, and a crash in a write leaves zeros where its pages did not reach the disk,
    in place of the bytes that were to be there. So a run of zeros ends a piece as a
    newline does: a record around such a hole is torn (its two halves are never glued
    into one line, nor to the record after it), and the whole records beside it are read.
    Every other piece is skipped, its line number added to ``unreadable``; one that a
    run of zeros or the end of the file cuts short (a torn record, as a crash in a write
    leaves one, or damage since) is added to ``torn`` as well. Nothing is skipped without
    being counted: a torn record may be one whose commit was answered."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    line, counted_to = 1, 0
    for match in _PIECE.finditer(data):
        piece = match.group()
        try:
            record = _loads(piece)
        except (ValueError, RecursionError):
            record = None
        if isinstance(record, dict):
            yield record
            continue
        start, end = match.span()
        line += data.count(b"\n", counted_to, start)
        counted_to = start
        if unreadable is not None:
            unreadable.append(line)
        if torn is not None and (end == len(data) or data[end] == 0 or (start and data[start - 1] == 0)):
            torn.append(line)


def _loads(line: bytes) -> Any:
    """``json.loads``, by orjson where that reads the line to the same value."""
    if _orjson is not None:
        try:
            record = _orjson.loads(line)
        except _orjson.JSONDecodeError:
            pass
        else:
            if not _long_digits(line) and _shallow(record, line):
                return record
    return json.loads(line)


def encode_record(record: dict[str, Any]) -> bytes:
    """One journal line: the wire's encoding (compact UTF-8 JSON and a newline)."""
    return encode(record)


class JournalError(RuntimeError):
    """The journal could not be written; the records of that commit are not durable."""


class WriterThread:
    """One long-lived thread for the journal's blocking writes (append+fsync, rewrite).

    Work is handed over through a queue (:meth:`submit`); the thread takes everything
    queued at once (waiting for the first) and does it with one call of ``work(batch)``,
    so writes that queued up while one was on the disk share the next. No thread pool,
    capacity limiter, cancel scope or task per write, as ``anyio.to_thread`` has; ``work``
    answers the loop itself (``call_soon_threadsafe``)."""

    def __init__(self, name: str, work: Callable[[list[Any]], None]) -> None:
        self.name = name
        self.work = work
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, job: Any) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
            self._thread.start()
        self._jobs.put(job)

    def close(self) -> None:
        """End the thread once the work handed over is done."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    def _main(self) -> None:
        jobs = self._jobs
        while True:
            batch = [jobs.get()]
            while True:
                try:
                    batch.append(jobs.get_nowait())
                except queue.Empty:
                    break
            end = batch.index(None) if None in batch else len(batch)
            if end:
                try:
                    self.work(batch[:end])
                except RuntimeError:
                    return  # the loop is closed: nobody waits any more
            if end < len(batch):
                return


#: An append handed to the writer finds the file's tail unknown (an earlier write that
#: failed could not be cut off): it fails, and the journal is rewritten before the next.
_TAIL_UNKNOWN = "an earlier write could not be undone; the journal is rewritten before the next one"


class Journal:
    """The shared append-only queue journal, with adaptive group commit.

    ``add`` buffers records and returns the :class:`Commit` that will hold them. Commits
    are driven by callbacks, as an asyncio ``Protocol``'s writes are: once ``run`` has
    bound the journal to its loop, the first record of a loop pass schedules the hand-over
    of what is buffered at the loop's next pass (so everything added in one pass shares a
    commit). Hand-overs do not wait for the commit in flight: the writer thread takes every
    hand-over queued while it was on the disk into one write and one fsync, and answers the
    loop with one ``call_soon_threadsafe`` for all of them; commits finish in order. So
    the disk is never idle while the loop is busy, and no task is woken per commit.
    Without ``run`` (the op logic's tests) nothing is written until :meth:`flush`. Without
    ``durable`` (no fsync) writes are copies into the page cache, made on the loop.

    ``snapshot`` returns the live records, used to compact the file when it grows past
    :data:`COMPACT_AFTER_BYTES`. A rewrite (compaction, or after a failed write) is handed
    over only when nothing else is in flight, and appends wait for it: a snapshot must
    never hold the records of a commit that may still fail.

    A commit that cannot be written (a full disk, an I/O error) fails as a whole: its
    ``Commit.error`` is set and none of its records may count as stored. What a failed
    write left in the file (part of a record, or records whose fsync failed) is cut off
    again; when even that fails, appends already handed over fail too, and the next commit
    writes the whole file anew from ``snapshot`` (the state in memory, which every record
    only repeats) instead of appending. ``healthy`` is False from a failed commit until one
    succeeds.
    """

    def __init__(
        self,
        path: Path,
        *,
        durable: bool = True,
        snapshot: Callable[[], Iterable[dict[str, Any]]] | None = None,
        compact_after: int = COMPACT_AFTER_BYTES,
        reserve: int = RESERVE_BYTES,
    ) -> None:
        self.path = path
        self.durable = durable
        self.snapshot = snapshot
        self.compact_after = compact_after
        # (Not O_APPEND: records are written at ``_size``, inside the zeros written ahead.)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        #: The file's length: its records (``_size`` bytes), then zeros written ahead.
        self._allocated = os.fstat(self._fd).st_size
        self._size, last = _records_end(path, self._allocated)
        #: Zeros a commit that grows the file writes past its records (none without fsync).
        self._reserve = reserve if durable else 0
        #: What the file holds past ``_size`` is unknown (a failed write could not be cut
        #: off): the next commit rewrites the file (or, with no snapshot, cuts it first).
        self._rewrite = False
        self.healthy = True
        #: The last growth found no room for the whole reserve (the disk is nearly full).
        self._short = False
        #: Healthy, and not short of room: a record handed over now is all but sure to be
        #: stored, so what it carries may go out before it is (see ``Mailroom.queue``).
        #: On a nearly full disk only what is durable goes out: there a small commit may
        #: succeed between two that fail, and an item pushed early could arrive though its
        #: sender was told ``not_stored``.
        self.steady = True
        self.failures = 0
        if self._size and last != b"\n":
            # A torn last record (crash mid-append): end it so the next one stands alone.
            try:
                write_at(self._fd, b"\n", self._size)
            except OSError as exc:
                log.warning("journal %s: cannot end its torn last record (%s); the next commit rewrites it", path, exc)
                self._rewrite = True
            else:
                self._size += 1
                self._allocated = max(self._allocated, self._size)
        self._writer = WriterThread("roost-journal", self._work)
        self._buffer: list[bytes] = []
        self._commit_next = Commit()
        #: Commits (and compactions) handed to the writer and not finished, oldest first.
        self._handed: deque[Commit] = deque()
        #: A rewrite or a compaction is in flight: nothing else is handed over meanwhile.
        self._exclusive = False
        #: The loop hand-overs happen on by themselves (set by ``run``), and whether one is due.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hand_due = False
        self._closed = False
        self._ended: anyio.Event | None = None
        self.commits = 0
        self.records = 0

    def snapshot_bytes(self) -> bytes:
        """The live records, encoded; taken on the event loop so state does not move under it."""
        assert self.snapshot is not None
        return b"".join(encode_record(record) for record in self.snapshot())

    def replace_with(self, data: bytes) -> None:
        """Rewrite the journal as ``data`` (atomic replace) and append after it."""
        atomic_write(self.path, data, durable=self.durable, kind="journal")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError:
            # Replaced, but our descriptor is still the old file's: no record may go there,
            # so the next commit rewrites the journal again before anything else.
            self._rewrite = True
            raise
        os.close(self._fd)
        self._fd = fd
        self._size = self._allocated = len(data)
        self._rewrite = False

    def failed_to_rewrite(self) -> None:
        """A rewrite outside a commit (the daemon's start) failed: the file as it is stays
        valid, but the disk refuses writes, so until a commit succeeds the journal counts
        as failing, and that commit rewrites the file."""
        self._rewrite = True
        self.healthy = self.steady = False

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Bind the journal to the running loop, so commits start by themselves, until
        it is closed (or this task is cancelled)."""
        self._loop = asyncio.get_running_loop()
        self._ended = anyio.Event()
        task_status.started()
        self._hand_over()
        try:
            await self._ended.wait()
        finally:
            self._loop = None

    def add(self, *records: dict[str, Any]) -> Commit:
        """Buffer ``records`` for the next commit and return that commit (see
        :class:`Commit`); it is handed to the writer at the loop's next pass."""
        if self._closed:
            raise JournalError("journal is closed")
        for record in records:
            self.add_line(encode_record(record))
        return self._commit_next

    def add_line(self, line: bytes) -> Commit:
        """:meth:`add` for one record encoded already (a JSON object and a newline; an
        item's record is made around its encoded deliver event, not encoded again)."""
        if self._closed:
            raise JournalError("journal is closed")
        self._buffer.append(line)
        if not self._hand_due and self._loop is not None:
            self._hand_due = True
            self._loop.call_soon(self.hand_over_due)
        return self._commit_next

    def hand_over_due(self) -> None:
        """Hand what this pass buffered to the writer now, not at the loop's next pass
        (the daemon does it before it writes a pass's output); nothing if it was."""
        if self._hand_due:
            self._hand_due = False
            self._hand_over()

    def _hand_over(self) -> None:
        """Hand what is buffered to the writer: an append behind those in flight, or,
        when the file must be rewritten, a rewrite once nothing is in flight."""
        if not self._buffer or self._exclusive or self._closed:
            return
        rewrite = self._rewrite and self.snapshot is not None
        if rewrite and self._handed:
            return  # after the appends in flight (they fail: the file's tail is unknown)
        lines, commit = self._buffer, self._commit_next
        self._buffer, self._commit_next = [], Commit()
        self._handed.append(commit)
        if rewrite:
            # The snapshot, taken now, holds every record of this commit already, since
            # each only repeats a change made in memory before it.
            self._exclusive = True
            self._submit(("rewrite", self.snapshot_bytes(), commit, len(lines)))
        else:
            self._submit(("append", b"".join(lines), commit, len(lines)))

    def _compact(self) -> None:
        """Rewrite the file as the live snapshot (taken now, on the loop; nothing is in
        flight). Replay ignores duplicates, so records buffered meanwhile may repeat what
        the snapshot holds; a compaction that fails loses nothing (every commit is on disk
        already), and the next one tries again."""
        marker = Commit()
        self._handed.append(marker)
        self._exclusive = True
        self._submit(("compact", self.snapshot_bytes(), marker, 0))

    def _submit(self, job: tuple[str, bytes, Commit, int]) -> None:
        if self.durable:
            self._writer.submit((job, asyncio.get_running_loop()))
        else:
            # Without fsync a write is a copy into the page cache: cheaper here than the
            # hand-off to a thread and back.
            kind, data, commit, count = job
            self._written(kind, [(commit, count)], self._attempt(kind, data))

    def _work(self, batch: list[tuple[tuple[str, bytes, Commit, int], asyncio.AbstractEventLoop]]) -> None:
        """On the writer thread: every job queued at once. Consecutive appends share one
        write and one fsync; a rewrite or compaction is never queued beside another job
        (it is handed over only when nothing is in flight)."""
        start = 0
        while start < len(batch):
            (kind, data, _commit, _count), loop = batch[start]
            end = start + 1
            if kind == "append":
                while end < len(batch) and batch[end][0][0] == "append":
                    end += 1
                data = b"".join(job[0][1] for job in batch[start:end])
            entries = [(job[0][2], job[0][3]) for job in batch[start:end]]
            loop.call_soon_threadsafe(self._written, kind, entries, self._attempt(kind, data))
            start = end

    def _attempt(self, kind: str, data: bytes) -> BaseException | None:
        """Do one write job; what failed it, or None."""
        try:
            if kind == "append":
                if self._rewrite and self.snapshot is not None:
                    raise OSError(errno.EIO, _TAIL_UNKNOWN)
                self._write(data)
            else:
                self.replace_with(data)
        except BaseException as exc:  # noqa: BLE001 - judged on the loop
            return exc
        return None

    def _written(self, kind: str, entries: list[tuple[Commit, int]], exc: BaseException | None) -> None:
        """On the loop: the commits of one write are over (``exc``: what failed it), in
        order; then compact, or hand over what waits."""
        for commit, count in entries:
            handed = self._handed.popleft()
            assert handed is commit, "journal commits finish in the order they were handed over"
            if kind == "compact":
                if exc is not None:
                    log.warning("journal %s: compaction failed (%s); it stays as it is", self.path, exc)
            else:
                self._finish_commit(commit, count, exc)
            commit.finish()
        if kind != "append":
            self._exclusive = False
        if self._closed:
            return
        if exc is None and not self._handed and self.snapshot is not None and self._size > self.compact_after:
            self._compact()
        elif self._loop is not None:
            self._hand_over()

    def _finish_commit(self, commit: Commit, count: int, exc: BaseException | None) -> None:
        if exc is not None:
            if not isinstance(exc, OSError):
                log.error("journal %s: a commit failed unexpectedly", self.path, exc_info=exc)
            commit.error = JournalError(str(exc))
            if self.healthy:
                log.warning("journal %s: a commit of %d records failed (%s); they are not stored", self.path, count, exc)
            self.healthy = False
            self.failures += 1
        else:
            if not self.healthy:
                log.warning("journal %s: writing again after %d failed commits", self.path, self.failures)
            self.healthy = True
        self.steady = self.healthy and not self._short
        self.commits += 1
        self.records += count

    def _write(self, data: bytes) -> None:
        """Write ``data`` after the last record and make it durable: with a per-write sync
        (:func:`write_durably`) when it fits in the zeros written ahead, else with the
        next reserve of zeros written after it and ``fsync``. On failure cut the file back
        to where it was."""
        try:
            if self._rewrite:
                self._cut()  # no snapshot to rewrite from: the leftovers go first
            end = self._size + len(data)
            grows = end > self._allocated
            view, offset = memoryview(data), self._size
            if faults.armed("io.journal.write"):
                # The fault point stands mid-write, so an injected failure leaves a torn
                # record behind, as a disk that fills up during the write does.
                half = len(view) // 2
                write_at(self._fd, view[:half], offset)
                view, offset = view[half:], offset + half
                faults.io("io.journal.write")
            if self.durable and not grows:
                # Inside the zeros written ahead: only data changes, so a write synced as
                # it is made (``fdatasync``'s guarantee) is durable.
                write_durably(self._fd, view, offset)
                # An injected sync failure comes after the write, as a real one would: the
                # records are in the file, and the commit fails and is cut back all the same.
                faults.io("io.journal.fsync")
            else:
                write_at(self._fd, view, offset)
                zeros = self._write_reserve(end) if grows else 0
                if self.durable:
                    faults.io("io.journal.fsync")
                    platform.sync_file(self._fd)
        except OSError:
            try:
                self._cut()
            except OSError:
                self._rewrite = True
            raise
        self._size = end
        if grows:
            self._allocated = end + zeros

    def _write_reserve(self, end: int) -> int:
        """Write the zeros ahead of the records that end at ``end``, as many as fit: the
        reserve, or half the room the disk has left when that is less (the other half
        stays for the job records and transcripts). A disk that takes the records but
        not their zeros still stores the commit: it grows the file again next time.
        Returns how many zeros were written."""
        if not self._reserve:
            return 0
        room = _free_bytes(self._fd)
        zeros = self._reserve if room is None else min(self._reserve, room // 2)
        self._short = zeros < self._reserve
        if zeros <= 0:
            return 0
        try:
            write_zeros(self._fd, zeros, end)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # Filled up meanwhile: the records stay, the zeros go.
            os.ftruncate(self._fd, end)
            self._short = True
            return 0
        return zeros

    def _cut(self) -> None:
        """Cut what a failed write left past ``_size``, the zeros written ahead with it (the
        next commit writes them again), and make the cut durable."""
        os.ftruncate(self._fd, self._size)
        if self.durable:
            platform.sync_file(self._fd)
        self._allocated = self._size
        self._rewrite = False

    async def append(self, *records: dict[str, Any]) -> None:
        """Write ``records`` and return once they are on disk (raises :class:`JournalError`
        when they could not be written)."""
        commit = self.add(*records)
        if self._loop is None:
            await self.flush()
        await commit.wait()
        if commit.error is not None:
            raise commit.error

    async def flush(self) -> None:
        """Write what is buffered now, and return once it is written (or failed); the
        commits it finishes answer their waiters first."""
        target = self._commit_next if self._buffer else self._handed[-1] if self._handed else None
        while target is not None and not target.over:
            self._hand_over()
            if not self._handed:
                return  # nothing can be handed over (the journal is closed)
            await self._handed[0].wait()

    async def aclose(self) -> None:
        """Write everything buffered (after what is in flight), then close."""
        while (self._buffer and not self._closed) or self._handed:
            await self.flush()
        self._closed = True
        self._writer.close()
        os.close(self._fd)
        if self._ended is not None:
            self._ended.set()


def _free_bytes(fd: int) -> int | None:
    """The bytes the file system of ``fd`` has free for this user (None: it cannot say)."""
    try:
        stat = os.fstatvfs(fd)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def _records_end(path: Path, length: int) -> tuple[int, bytes]:
    """Where the records of a journal file of ``length`` bytes end (past its last byte
    that is not zero: what follows is zeros written ahead), and that last byte (empty for
    a file with no records)."""
    with open(path, "rb") as fh:
        end = length
        while end > 0:
            start = max(0, end - 64 * 1024)
            fh.seek(start)
            block = fh.read(end - start).rstrip(b"\0")
            if block:
                return start + len(block), block[-1:]
            end = start
    return 0, b""


class Commit:
    """One group commit of the journal: the records buffered until its write began.

    Once the write is over (on disk, or failed with ``error`` set), every ``when_done``
    callback is called in the order they were added, then ``over`` is True and
    :meth:`wait` returns. Callbacks let a request whose answer waits for its record be
    answered without a task of its own; most commits are never awaited, so the event
    :meth:`wait` needs is made only for one that is."""

    __slots__ = ("_callbacks", "_event", "error", "over")

    def __init__(self) -> None:
        self.over = False
        self.error: Exception | None = None
        self._callbacks: list[Callable[[Commit], None]] = []
        self._event: anyio.Event | None = None

    def when_done(self, callback: Callable[[Commit], None]) -> None:
        if self.over:
            callback(self)
        else:
            self._callbacks.append(callback)

    async def wait(self) -> None:
        """Until the commit is over."""
        if not self.over:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()

    def finish(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # one waiter's bug must not strand the others
                log.exception("journal commit callback failed")
        self.over = True
        if self._event is not None:
            self._event.set()
