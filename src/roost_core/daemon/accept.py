"""Accepting connections when the daemon is out of file descriptors.

At ``RLIMIT_NOFILE`` (or the system's file table full) ``accept`` fails with ``EMFILE``
and leaves the connection in the listen backlog, so the listening socket stays readable:
a loop that just tries again spins at full CPU, and one that gives up ends the daemon.
(Linux even fails ``accept`` with EMFILE when no connection waits at all: it takes the
descriptor first. So at the limit the loop must wait for the socket to be readable before
each ``accept``, not try and see.)
Instead the daemon keeps one spare descriptor (``/dev/null``): out of descriptors, it
closes the spare, accepts the waiting connection with it, answers one ``busy`` error frame
(``id`` null), closes it and opens the spare again. Each connection attempt then costs one
refusal and nothing waits in the backlog; the connections the daemon has are served as
before. Should even that fail (another thread took the freed slot), the next try waits,
5 ms doubling up to a second. This is the classic trick of libev, nginx and Tornado.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Any

import anyio
from anyio.abc import SocketAttribute

from roost_core.protocol import BUSY, ProtocolError, encode, error

log = logging.getLogger("roost.daemon")

#: ``accept`` errors that mean "no descriptor or buffer for a new connection right now".
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: ``accept`` errors about that one connection (it went away first): just go on.
CONNECTION_GONE = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EINTR, errno.EAGAIN})
BACKOFF_FIRST = 0.005
BACKOFF_MAX = 1.0

BUSY_FRAME = encode(
    error(None, ProtocolError(BUSY, "the roost daemon is out of file descriptors and refuses new connections for now; try again shortly"))
)


def _open_spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


class Refuser:
    """What the accept loop does when ``accept`` fails (see the module docstring)."""

    def __init__(self) -> None:
        self.spare = _open_spare()
        #: Connections refused for want of descriptors since the daemon started.
        self.refused = 0
        self._short = False
        self._backoff = 0.0

    async def failed(self, listener: Any, exc: OSError) -> None:
        """``accept`` raised ``exc``: refuse the waiting connection if the daemon is out
        of descriptors, go on if that one connection went away, raise anything else."""
        if exc.errno in CONNECTION_GONE:
            return
        if exc.errno not in OUT_OF_RESOURCES:
            raise exc
        if not self._short:
            self._short = True
            log.warning("out of file descriptors (%s): refusing new connections, serving the open ones", exc.strerror)
        if self.spare is not None:
            os.close(self.spare)
            self.spare = None
        raw = listener.extra(SocketAttribute.raw_socket)
        try:
            sock, _ = raw.accept()
        except BlockingIOError:
            # Nobody waits. Linux fails ``accept`` with EMFILE before it looks for a
            # connection, so trying again at once would spin: wait for one first.
            self.spare = _open_spare()
            await anyio.wait_readable(raw)
            return
        except OSError:
            # Even the spare's slot was taken: wait a little before the next try.
            self._backoff = min(max(BACKOFF_FIRST, self._backoff * 2), BACKOFF_MAX)
            self.spare = _open_spare()
            await anyio.sleep(self._backoff)
            return
        else:
            self._backoff = 0.0
            self.refused += 1
            try:
                sock.setblocking(False)
                sock.send(BUSY_FRAME)
            except OSError:
                pass
            finally:
                sock.close()
        self.spare = _open_spare()

    def accepted(self) -> None:
        """A connection was accepted: descriptors are back (if they were short)."""
        if self._short:
            self._short = False
            self._backoff = 0.0
            log.warning("accepting connections again (%d refused for want of file descriptors so far)", self.refused)
        if self.spare is None:
            self.spare = _open_spare()
