"""Who a connection speaks as: the session it is bound to, as policy sees it, the name
its keyed requests are kept under, and the chain its run is in. Functions of the
connection and the peer tables alone, for every service that does an op for a caller."""

from __future__ import annotations

from roost_core.daemon.connection import Connection
from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.sending import chain_of
from roost_core.daemon.tables import PeerTables
from roost_core.protocol import UNAUTHORIZED, ProtocolError
from roost_core.records import PeerInfo


def caller_of(conn: Connection) -> str:
    """Whom a keyed request's answer is kept for: the session the connection speaks
    as, or ``user`` for an unbound one (the CLI: every connection of the daemon's user)."""
    if conn.job is not None:
        return conn.job.id
    if conn.peer is not None:
        return conn.peer.id
    return "user"


def sender_info(tables: PeerTables, conn: Connection) -> PeerInfo:
    """The calling session as policy sees it: its own record in the peer tables."""
    record: Job | ForegroundPeer | None = conn.job if conn.job is not None else conn.peer
    if record is not None:
        return tables.info_of(record)
    raise ProtocolError(UNAUTHORIZED, "this connection is not bound to a session (peer_register or worker hello first)")


def chain_of_caller(conn: Connection) -> tuple[str | None, int]:
    """The chain the calling session is in: (trace, hops) of what started its run
    (:func:`sending.chain_of`)."""
    trace, hops, _broadcast = chain_of(conn.job)
    return trace, hops
