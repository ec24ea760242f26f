"""The session file as routing key: one session can have several records over time (an
ended job, a live foreground peer, a new job), and every list and every target lookup
collapses them into the one peer that holds the session now.

Preference: connected foreground peer > live job > ended job > disconnected foreground.
Targets are an exact id (any record of the session) or an exact name that is unique among
the peers the sender may reach. Never partial.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from roost_core.protocol import AMBIGUOUS, NOT_FOUND, ProtocolError
from roost_core.records import PeerInfo


def session_key(peer: PeerInfo) -> str:
    return peer.session or f"peer:{peer.id}"


def rank(peer: PeerInfo) -> int:
    if peer.kind == "foreground":
        return 0 if peer.live else 3
    return 1 if peer.live else 2


@attrs.frozen
class PeerTable:
    """Collapsed peers: ``holders`` by session key, ``aliases`` from every record id to
    the key of the session it belongs to."""

    holders: dict[str, PeerInfo]
    aliases: dict[str, str]

    def holder_of(self, peer_id: str) -> PeerInfo | None:
        key = self.aliases.get(peer_id)
        return self.holders.get(key) if key is not None else None


def collapse(peers: Iterable[PeerInfo]) -> PeerTable:
    holders: dict[str, PeerInfo] = {}
    aliases: dict[str, str] = {}
    for peer in peers:
        key = session_key(peer)
        aliases[peer.id] = key
        current = holders.get(key)
        if current is None or rank(peer) < rank(current):
            holders[key] = peer
    return PeerTable(holders=holders, aliases=aliases)


def resolve_target(
    to: str, table: PeerTable, reachable_by_name: Callable[[PeerInfo], bool]
) -> tuple[PeerInfo, str]:
    """The peer ``to`` names, and how (``"id"`` or ``"name"``).

    An id wins over a name. A name must match exactly one peer among those
    ``reachable_by_name`` accepts; peers the sender cannot reach are not even counted, so
    a name elsewhere never makes a reachable one ambiguous.
    """
    holder = table.holder_of(to)
    if holder is not None:
        return holder, "id"
    matches = [peer for peer in table.holders.values() if peer.name == to and reachable_by_name(peer)]
    if not matches:
        raise ProtocolError(NOT_FOUND, f"no reachable peer with id or exact name {to!r}")
    if len(matches) > 1:
        ids = ", ".join(sorted(peer.id for peer in matches))
        raise ProtocolError(AMBIGUOUS, f"name {to!r} matches several peers ({ids}); use an id")
    return matches[0], "name"
