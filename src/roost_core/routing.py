"""The session file as routing key: one session can have several records over time (an
ended job, a live foreground peer, a new job), and every list and every target lookup
collapses them into the one peer that holds the session now.

Preference: connected foreground peer > live job > ended job > disconnected foreground.
Targets are an exact id (any record of the session) or an exact name that is unique among
the peers the sender may reach. Never partial.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import attrs

from roost_core.protocol import AMBIGUOUS, NOT_FOUND, ProtocolError
from roost_core.records import PeerInfo

T = TypeVar("T")


def resolve_ref(
    ref: str,
    records: Iterable[T],
    *,
    id_of: Callable[[T], str],
    name_of: Callable[[T], str],
    framed_of: Callable[[T], str | None] | None = None,
    what: str = "job",
) -> T:
    """The record ``ref`` names, for every command that takes a job (or agent) by id or name:
    the record whose id is ``ref``, else the only one whose name is exactly ``ref``, as
    typed or as framed (``framed_of``: the name an envelope shows, sanitised; see
    :mod:`roost_core.names`). Never partial. The daemon's ops and the CLI's own lookups
    (``roost wait``, ``roost view --select``) all go through here, so a name means the
    same thing to every command.

    Raises ``not_found`` when nothing matches and ``ambiguous`` (naming the ids) when
    several records have that name.
    """
    named = []
    for record in records:
        if id_of(record) == ref:
            return record
        if name_of(record) == ref or (framed_of is not None and framed_of(record) == ref):
            named.append(record)
    if len(named) == 1:
        return named[0]
    if named:
        ids = ", ".join(sorted(id_of(record) for record in named))
        raise ProtocolError(AMBIGUOUS, f"several {what}s are named {ref!r} ({ids}); use an id")
    raise ProtocolError(NOT_FOUND, f"no {what} with id or exact name {ref!r}")


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
    a name elsewhere never makes a reachable one ambiguous. A name that only one peer
    has, which reach refuses, is that peer all the same: the caller's reach decision
    then refuses it with the plugin's reason (``unreachable``), as it does by id.
    """
    holder = table.holder_of(to)
    if holder is not None:
        return holder, "id"
    named = [peer for peer in table.holders.values() if peer.name == to or peer.framed_name == to]
    matches = [peer for peer in named if reachable_by_name(peer)]
    if not matches and len(named) == 1:
        return named[0], "name"
    if not matches:
        raise ProtocolError(NOT_FOUND, f"no reachable peer with id or exact name {to!r}")
    if len(matches) > 1:
        ids = ", ".join(sorted(peer.id for peer in matches))
        raise ProtocolError(AMBIGUOUS, f"name {to!r} matches several peers ({ids}); use an id")
    return matches[0], "name"
