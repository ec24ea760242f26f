"""Durable state: job records by atomic replace, queue items in one shared journal.

Job records change rarely (state, worker pid), so each is written atomically: temp file,
fsync, rename, fsync dir. Queue items change per message, so they go to one append-only
journal with group commit: appends that arrive while an fsync is in flight join the next
one, which keeps the cost per item near the cost of ``write``. Replay is idempotent (an
item already held or acked is ignored), which lets compaction run between commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import anyio

from roost_core import faults
from roost_core.protocol import _long_digits, _orjson, _shallow, encode

COMPACT_AFTER_BYTES = 8 * 1024 * 1024

log = logging.getLogger("roost.store")


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
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
                os.fsync(fd)
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


def write_json(path: Path, data: dict[str, Any], *, durable: bool = True) -> None:
    atomic_write(path, json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True).encode("utf-8"), durable=durable)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


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

    def load_all(self) -> dict[str, dict[str, Any]]:
        jobs = {}
        for path, data in self.records():
            if isinstance(data, dict) and isinstance(data.get("id"), str):
                jobs[data["id"]] = data
        return jobs

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


def read_journal(path: Path, unreadable: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """The journal's records; a torn last line (crash mid-append) is ignored. Any other
    line that is not a JSON object is skipped too, its line number added to ``unreadable``."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            record = _loads(line)
        except (ValueError, RecursionError):
            record = None
        if isinstance(record, dict):
            yield record
        elif unreadable is not None and (number < len(lines) or record is not None):
            unreadable.append(number)


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

    A write is handed over through a queue (:meth:`submit`) and answered through one
    ``call_soon_threadsafe`` on the loop that handed it over: no thread pool, capacity
    limiter, cancel scope or task per commit, as ``anyio.to_thread`` has. Writes run one
    at a time, in the order they were handed over."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[..., Any], arg: Any, done: Callable[[BaseException | None], None]) -> None:
        """Run ``fn(arg)`` on the thread, then ``done(None)``, or ``done(exc)`` with what
        it raised, on the running loop."""
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
            self._thread.start()
        self._jobs.put((fn, arg, done, loop))

    def close(self) -> None:
        """End the thread once the writes handed over are done."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    def _main(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, arg, done, loop = job
            try:
                fn(arg)
                outcome: BaseException | None = None
            except BaseException as exc:  # noqa: BLE001 - handed to the loop, judged there
                outcome = exc
            try:
                loop.call_soon_threadsafe(done, outcome)
            except RuntimeError:
                return  # the loop is closed: nobody waits any more


class Journal:
    """The shared append-only queue journal, with adaptive group commit.

    ``add`` buffers records and returns the :class:`Commit` that will hold them. Commits
    are driven by callbacks, as an asyncio ``Protocol``'s writes are: once ``run`` has
    bound the journal to its loop, the first record of a loop pass schedules a commit at
    the loop's next pass (so everything added in one pass shares it); one commit is in
    flight at a time, on the writer thread (write, fsync when ``durable``), and its end
    finishes it on the loop and starts the next with whatever arrived meanwhile. No task
    is woken per commit. Without ``run`` (the op logic's tests) nothing is written until
    :meth:`flush`. ``snapshot`` returns the live records used to compact the file when it
    grows past :data:`COMPACT_AFTER_BYTES`.

    A commit that cannot be written (a full disk, an I/O error) fails as a whole: its
    ``Commit.error`` is set and none of its records may count as stored. What a failed
    write left in the file (part of a record, or records whose fsync failed) is cut off
    again; when even that fails, the next commit writes the whole file anew from
    ``snapshot`` (the state in memory, which every record only repeats) instead of
    appending. ``healthy`` is False from a failed commit until one succeeds.
    """

    def __init__(
        self,
        path: Path,
        *,
        durable: bool = True,
        snapshot: Callable[[], Iterable[dict[str, Any]]] | None = None,
        compact_after: int = COMPACT_AFTER_BYTES,
    ) -> None:
        self.path = path
        self.durable = durable
        self.snapshot = snapshot
        self.compact_after = compact_after
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = os.fstat(self._fd).st_size
        #: What the file holds past ``_size`` is unknown (a failed write could not be cut
        #: off): the next commit rewrites the file (or, with no snapshot, cuts it first).
        self._rewrite = False
        self.healthy = True
        self.failures = 0
        if self._size and not _ends_with_newline(path):
            # A torn last record (crash mid-append): end it so the next one stands alone.
            try:
                self._size += os.write(self._fd, b"\n")
            except OSError as exc:
                log.warning("journal %s: cannot end its torn last record (%s); the next commit rewrites it", path, exc)
                self._rewrite = True
        self._writer = WriterThread("roost-journal")
        self._buffer: list[bytes] = []
        self._commit_next = Commit()
        #: The commit (or compaction) being written now; at most one at a time.
        self._in_flight: Commit | None = None
        #: The loop commits start on by themselves (set by ``run``), and whether one is due.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._start_due = False
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
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError:
            # Replaced, but our descriptor is still the old file's: no record may go there,
            # so the next commit rewrites the journal again before anything else.
            self._rewrite = True
            raise
        os.close(self._fd)
        self._fd = fd
        self._size = len(data)
        self._rewrite = False

    def failed_to_rewrite(self) -> None:
        """A rewrite outside a commit (the daemon's start) failed: the file as it is stays
        valid, but the disk refuses writes, so until a commit succeeds the journal counts
        as failing, and that commit rewrites the file."""
        self._rewrite = True
        self.healthy = False

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Bind the journal to the running loop, so commits start by themselves, until
        it is closed (or this task is cancelled)."""
        self._loop = asyncio.get_running_loop()
        self._ended = anyio.Event()
        task_status.started()
        if self._buffer:
            self._start_soon()
        try:
            await self._ended.wait()
        finally:
            self._loop = None

    def add(self, *records: dict[str, Any]) -> Commit:
        """Buffer ``records`` for the next commit and return that commit (see
        :class:`Commit`); it is written as soon as the one in flight is done."""
        if self._closed:
            raise JournalError("journal is closed")
        for record in records:
            self._buffer.append(encode_record(record))
        if self._in_flight is None and not self._start_due and self._loop is not None:
            self._start_soon()
        return self._commit_next

    def _start_soon(self) -> None:
        assert self._loop is not None
        self._start_due = True
        self._loop.call_soon(self._start_due_commit)

    def _start_due_commit(self) -> None:
        self._start_due = False
        if self._in_flight is None:
            self._start()

    def _start(self) -> None:
        """Begin the next commit with everything buffered (nothing in flight)."""
        if not self._buffer or self._closed:
            return
        lines, commit = self._buffer, self._commit_next
        self._buffer, self._commit_next = [], Commit()
        self._in_flight = commit
        # After a write that could not be undone the file is rewritten whole: the snapshot,
        # taken now, holds every record of this commit already, since each only repeats a
        # change made in memory before it.
        rewrite = self._rewrite and self.snapshot is not None
        data = self.snapshot_bytes() if rewrite else b"".join(lines)

        def done(exc: BaseException | None) -> None:
            self._committed(commit, len(lines), exc)

        if rewrite:
            self._writer.submit(self.replace_with, data, done)
        elif self.durable:
            self._writer.submit(self._write, data, done)
        else:
            # Without fsync a write is a copy into the page cache: cheaper here than the
            # hand-off to a thread and back.
            try:
                self._write(data)
            except BaseException as exc:  # noqa: BLE001 - judged as the thread's outcome is
                done(exc)
            else:
                done(None)

    def _committed(self, commit: Commit, count: int, exc: BaseException | None) -> None:
        """A commit's write is over (``exc``: what failed it): finish it, then compact or
        start the next."""
        self._in_flight = None
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
        self.commits += 1
        self.records += count
        commit.finish()
        if exc is None and self.snapshot is not None and self._size > self.compact_after and not self._closed:
            self._compact()
        elif self._loop is not None:
            self._start()

    def _compact(self) -> None:
        """Rewrite the file as the live snapshot (taken now, on the loop). Replay ignores
        duplicates, so records buffered meanwhile may repeat what the snapshot holds; a
        compaction that fails loses nothing (every commit is on disk already), and the
        next one tries again."""
        marker = Commit()
        self._in_flight = marker

        def done(exc: BaseException | None) -> None:
            if exc is not None:
                log.warning("journal %s: compaction failed (%s); it stays as it is", self.path, exc)
            self._in_flight = None
            marker.finish()
            if self._loop is not None:
                self._start()

        self._writer.submit(self.replace_with, self.snapshot_bytes(), done)

    def _write(self, data: bytes) -> None:
        """Append ``data`` (and fsync it); on failure cut the file back to where it was."""
        try:
            if self._rewrite:
                self._cut()  # no snapshot to rewrite from: the leftovers go first
            view = memoryview(data)
            if faults.armed("io.journal.write"):
                # The fault point stands mid-write, so an injected failure leaves a torn
                # record behind, as a disk that fills up during the write does.
                write_all(self._fd, view[: len(view) // 2])
                view = view[len(view) // 2:]
                faults.io("io.journal.write")
            write_all(self._fd, view)
            if self.durable:
                faults.io("io.journal.fsync")
                os.fsync(self._fd)
        except OSError:
            try:
                self._cut()
            except OSError:
                self._rewrite = True
            raise
        self._size += len(data)

    def _cut(self) -> None:
        """Cut what a failed write left past ``_size`` (and make the cut durable)."""
        os.ftruncate(self._fd, self._size)
        if self.durable:
            os.fsync(self._fd)
        self._rewrite = False

    async def append(self, *records: dict[str, Any]) -> None:
        """Write ``records`` and return once they are on disk (raises :class:`JournalError`
        when they could not be written)."""
        commit = self.add(*records)
        if self._loop is None:
            await self.flush()
        await commit.done.wait()
        if commit.error is not None:
            raise commit.error

    async def flush(self) -> None:
        """Write what is buffered now, and return once it is written (or failed); the
        commits it finishes answer their waiters first."""
        target = self._commit_next if self._buffer else self._in_flight
        while target is not None and not target.done.is_set():
            if self._in_flight is None:
                self._start()
            waiting = self._in_flight or target
            await waiting.done.wait()

    async def aclose(self) -> None:
        """Write everything buffered (after the commit in flight), then close."""
        while self._buffer or self._in_flight is not None:
            await self.flush()
        self._closed = True
        self._writer.close()
        os.close(self._fd)
        if self._ended is not None:
            self._ended.set()


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


class Commit:
    """One group commit of the journal: the records buffered until its write began.

    ``done`` is set, and every ``when_done`` callback called in the order they were
    added, once the write is over: on disk, or failed with ``error`` set. Callbacks let a
    request whose answer waits for its record be answered without a task of its own."""

    __slots__ = ("done", "error", "_callbacks")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.error: Exception | None = None
        self._callbacks: list[Callable[[Commit], None]] = []

    def when_done(self, callback: Callable[[Commit], None]) -> None:
        if self.done.is_set():
            callback(self)
        else:
            self._callbacks.append(callback)

    def finish(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # noqa: BLE001 - one waiter's bug must not strand the others
                log.exception("journal commit callback failed")
        self.done.set()
