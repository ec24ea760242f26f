"""Durable state: job records by atomic replace, queue items in one shared journal.

Job records change rarely (state, worker pid), so each is written atomically: temp file,
fsync, rename, fsync dir. Queue items change per message, so they go to one append-only
journal with group commit: appends that arrive while an fsync is in flight join the next
one, which keeps the cost per item near the cost of ``write``. Replay is idempotent (an
item already held or acked is ignored), which lets compaction run between commits.
"""

from __future__ import annotations

import json
import logging
import os
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


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old or the new file, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    faults.point("store.during_atomic_write")
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


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
        for path in sorted(self.folder.glob("*.json")):
            data = read_json(path)
            if data and isinstance(data.get("id"), str):
                jobs[data["id"]] = data
        return jobs


def read_journal(path: Path) -> Iterator[dict[str, Any]]:
    """The journal's records; a torn last line (crash mid-append) is ignored."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            record = _loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


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


class Journal:
    """The shared append-only queue journal, with adaptive group commit.

    ``run`` is the one committer task. ``append`` returns once its records are on disk
    (fsynced when ``durable``). ``snapshot`` returns the live records used to compact the
    file when it grows past :data:`COMPACT_AFTER_BYTES`.
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
        if self._size and not _ends_with_newline(path):
            # A torn last record (crash mid-append): end it so the next one stands alone.
            self._size += os.write(self._fd, b"\n")
        self._commit_lock = anyio.Lock()
        self._buffer: list[bytes] = []
        self._commit_next = Commit()
        self._wakeup = anyio.Event()
        self._closed = False
        self.commits = 0
        self.records = 0

    def snapshot_bytes(self) -> bytes:
        """The live records, encoded; taken on the event loop so state does not move under it."""
        assert self.snapshot is not None
        return b"".join(encode_record(record) for record in self.snapshot())

    def replace_with(self, data: bytes) -> None:
        """Rewrite the journal as ``data`` (atomic replace) and append after it."""
        atomic_write(self.path, data, durable=self.durable)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = len(data)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while not self._closed:
            await self._wakeup.wait()
            self._wakeup = anyio.Event()
            await self._commit()

    async def _commit(self) -> None:
        async with self._commit_lock:
            await self._commit_locked()

    async def _commit_locked(self) -> None:
        if not self._buffer:
            return
        lines, commit = self._buffer, self._commit_next
        self._buffer, self._commit_next = [], Commit()
        try:
            if self.durable:
                await anyio.to_thread.run_sync(self._write, b"".join(lines))
            else:
                # Without fsync a write is a copy into the page cache: cheaper here than
                # the hand-off to a thread and back.
                self._write(b"".join(lines))
            if self.snapshot is not None and self._size > self.compact_after:
                # Replay ignores duplicates, so records still in the next buffer may
                # repeat what the snapshot holds.
                await anyio.to_thread.run_sync(self.replace_with, self.snapshot_bytes())
        except OSError as exc:
            commit.error = JournalError(str(exc))
        self.commits += 1
        self.records += len(lines)
        commit.finish()

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        if self.durable:
            os.fsync(self._fd)
        self._size += len(data)

    def add(self, *records: dict[str, Any]) -> Commit:
        """Buffer ``records`` for the next commit and return that commit (see
        :class:`Commit`); the committer task writes it as soon as the one in flight is done."""
        if self._closed:
            raise JournalError("journal is closed")
        self._buffer.extend(encode_record(record) for record in records)
        self._wakeup.set()
        return self._commit_next

    async def append(self, *records: dict[str, Any]) -> None:
        """Write ``records`` and return once they are on disk (raises :class:`JournalError`
        when they could not be written)."""
        commit = self.add(*records)
        await commit.done.wait()
        if commit.error is not None:
            raise commit.error

    async def aclose(self) -> None:
        await self._commit()  # waits for a commit in flight, then flushes the rest
        self._closed = True
        self._wakeup.set()
        os.close(self._fd)


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
