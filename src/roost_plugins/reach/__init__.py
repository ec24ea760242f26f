"""Default reach policy: free messaging inside one session tree, external peers by exact id
only and only when ``agentExternalMessages`` is on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from roost_core import hookimpl, pure
from roost_core.records import RELATIONS, ReachDecision

if TYPE_CHECKING:
    from roost_core.config import Config
    from roost_core.records import PeerInfo

EXTERNAL_OFF_REASON = "outside your session tree; external messages are off (agentExternalMessages)"
EXTERNAL_BY_NAME_REASON = "outside your session tree; external peers are reachable by exact id only"

# Decisions are frozen records: one of each is enough (a listing makes thousands).
ALLOWED = {relation: ReachDecision(allowed=True, relation=relation) for relation in RELATIONS}
EXTERNAL_OFF = ReachDecision(allowed=False, relation="external", reason=EXTERNAL_OFF_REASON)
EXTERNAL_BY_NAME = ReachDecision(allowed=False, relation="external", reason=EXTERNAL_BY_NAME_REASON)


def tree_key(peer: PeerInfo) -> str:
    """The key every session of one tree shares: the root's session, or its peer id."""
    if peer.root_session:
        return peer.root_session
    # A child of a --no-session root has no session to point at, only the root's peer id.
    if peer.parent_peer and not peer.parent_session:
        return "peer:" + peer.parent_peer
    if peer.session:
        return peer.session
    return "peer:" + peer.id


def relation_between(sender: PeerInfo, target: PeerInfo, sender_tree: str | None = None) -> str:
    """The relation of ``target`` as seen from ``sender`` (one of ``RELATIONS``);
    ``sender_tree`` is ``tree_key(sender)`` when the caller has it already."""
    if (target.parent_session is not None and target.parent_session == sender.session) or (
        target.parent_peer is not None and target.parent_peer == sender.id
    ):
        return "child"
    if (sender.parent_session is not None and sender.parent_session == target.session) or (
        sender.parent_peer is not None and sender.parent_peer == target.id
    ):
        return "parent"
    if (sender.parent_session is not None and sender.parent_session == target.parent_session) or (
        sender.parent_peer is not None and sender.parent_peer == target.parent_peer
    ):
        return "sibling"
    if (sender_tree if sender_tree is not None else tree_key(sender)) == tree_key(target):
        return "tree"
    return "external"


@hookimpl(trylast=True)
@pure
def roost_decide_reach(sender: PeerInfo, target: PeerInfo, addressed_by: str, config: Config) -> ReachDecision:
    """Allow the tree; allow an external peer only by id (or in a listing) with the option on.

    Pure (``roost_core.pure``): the answer follows from the two records and the config, so
    the daemon keeps it until the peer table changes."""
    return decide(sender, tree_key(sender), target, addressed_by, config)


def decide(sender: PeerInfo, sender_tree: str, target: PeerInfo, addressed_by: str, config: Config) -> ReachDecision:
    relation = relation_between(sender, target, sender_tree)
    if relation != "external":
        return ALLOWED[relation]
    if not config.agent_external_messages:
        return EXTERNAL_OFF
    if addressed_by in ("id", "list"):
        return ALLOWED[relation]
    # A name is only unique among what the sender may reach; guessing names across trees
    # would let an agent probe sessions it was never told about.
    return EXTERNAL_BY_NAME
