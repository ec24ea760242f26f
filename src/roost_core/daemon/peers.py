"""Foreground peers: connected sessions (a pi TUI, a Python client) that are not jobs.

Liveness is the connection. There is no mailbox: a message to a foreground peer that is
not connected answers ``not running``. Items pushed to a connected peer wait in
``in_flight`` (as the lines pushed) until it acks them, and are pushed again if it
re-registers.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import attrs

from roost_core.daemon.changes import NotesChanges
from roost_core.records import PeerInfo


@attrs.define(eq=False)
class ForegroundPeer(NotesChanges):
    # What a peer listing shows notes every change (see roost_core.daemon.changes).
    shown: ClassVar[frozenset[str]] = frozenset({"name", "session", "cwd", "conn"})

    id: str
    name: str
    session: str | None
    cwd: str | None
    pid: int
    conn: Any = None
    seq: int = 0
    registered: float = attrs.field(factory=time.time)
    in_flight: dict[int, bytes] = attrs.field(factory=dict)
    #: The reports among ``in_flight``: seq -> (the child's job id, the report as a child
    #: keeps it). A report not acked when the connection ends goes back to its child (kept
    #: in its record, so a daemon restart does not lose it) and is routed again.
    reports_in_flight: dict[int, tuple[str, dict[str, Any]]] = attrs.field(factory=dict)
    #: The items among ``in_flight`` whose push the answer ledger keeps on record (a keyed
    #: send's): seq -> its ledger slot, told when the peer acks it.
    recorded: dict[int, Any] = attrs.field(factory=dict)
    #: Seqs of ``in_flight`` not pushed yet on this connection, in order: a keyed send's
    #: waits for its answer's record (``held``), and every later item waits behind it, so
    #: the peer gets its items in seq order (cleared when a connection registers: it is
    #: pushed all of ``in_flight`` then).
    queued_pushes: list[int] = attrs.field(factory=list)
    held: set[int] = attrs.field(factory=set)
    last_message: float | None = None
    #: The agent host this foreground session runs (its children get it by default).
    host: str | None = None
    #: Who waits to be told when this session ends (see daemon.watches); not persisted,
    #: as nothing of a foreground peer is.
    watchers: list[dict[str, Any]] = attrs.field(factory=list)
    #: ``peer_info`` as last made, with the tree record's info it was made with;
    #: forgotten when a shown field moves (NotesChanges).
    kept_info: tuple[PeerInfo | None, PeerInfo] | None = attrs.field(default=None, init=False, repr=False)

    @property
    def connected(self) -> bool:
        return self.conn is not None

    def peer_info(self, tree: PeerInfo | None = None) -> PeerInfo:
        """As policy sees it; tree links come from a job record of the same session."""
        kept = self.kept_info
        if kept is not None and kept[0] is tree:
            return kept[1]
        info = self._make_peer_info(tree)
        self.kept_info = (tree, info)
        return info

    def _make_peer_info(self, tree: PeerInfo | None) -> PeerInfo:
        return PeerInfo(
            id=self.id,
            name=self.name,
            kind="foreground",
            state="connected" if self.connected else "not running",
            session=self.session,
            cwd=self.cwd,
            host="foreground",
            parent_session=tree.parent_session if tree else None,
            parent_peer=tree.parent_peer if tree else None,
            root_session=tree.root_session if tree else None,
            live=self.connected,
        )
