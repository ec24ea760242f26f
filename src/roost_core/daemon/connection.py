"""One client connection: batched reads, one gathered write per wake-up, its own error
boundary. What it is bound to (a job's worker, a foreground peer, or nothing) decides
which ops it may call and who it speaks as."""

from __future__ import annotations

import os
import socket
import struct
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import SocketAttribute

from roost_core.protocol import encode

if TYPE_CHECKING:
    from roost_core.daemon.jobs import Job
    from roost_core.daemon.peers import ForegroundPeer

#: A connection whose unread output passes this is too slow to keep; it is dropped.
MAX_OUTBOX_BYTES = 64 * 1024 * 1024
READ_SIZE = 256 * 1024


def peer_credentials(stream: Any) -> tuple[int, int]:
    """(pid, uid) of the process at the other end, as the kernel saw it at connect."""
    try:
        raw = stream.extra(SocketAttribute.raw_socket)
        creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", creds)
        return pid, uid
    except (OSError, anyio.TypedAttributeLookupError):
        return 0, -1


class Connection:
    def __init__(self, stream: Any, number: int) -> None:
        self.stream = stream
        self.number = number
        self.pid, self.uid = peer_credentials(stream)
        self.job: Job | None = None
        self.peer: ForegroundPeer | None = None
        self.watching = False
        self._outbox: list[bytes] = []
        self._outbox_bytes = 0
        self._wake = anyio.Event()
        self.closed = False
        self.flushed = anyio.Event()

    @property
    def same_user(self) -> bool:
        return self.uid == os.getuid()

    @property
    def bound(self) -> bool:
        return self.job is not None or self.peer is not None

    def send(self, frame: dict[str, Any]) -> None:
        """Queue a frame; the writer task sends everything queued in one write."""
        if self.closed:
            return
        data = encode(frame)
        self._outbox.append(data)
        self._outbox_bytes += len(data)
        if self._outbox_bytes > MAX_OUTBOX_BYTES:
            self.closed = True
        self._wake.set()

    async def writer(self) -> None:
        try:
            await self._write_loop()
        finally:
            self.flushed.set()

    async def _write_loop(self) -> None:
        while not self.closed or self._outbox:
            await self._wake.wait()
            self._wake = anyio.Event()
            if not self._outbox:
                continue
            data = b"".join(self._outbox)
            self._outbox.clear()
            self._outbox_bytes = 0
            await self.stream.send(data)
            if self.closed:
                break

    def close(self) -> None:
        self.closed = True
        self._wake.set()
