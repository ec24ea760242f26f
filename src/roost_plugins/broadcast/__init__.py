"""Default broadcast policy: ``*children``, ``*siblings`` and ``*tree`` reach every peer of
that relation inside the sender's tree that a message reaches, one item each, and a chain
holds at most one broadcast.

The chain rule: a run that took in anything from a chain that already holds a broadcast
(the broadcast itself, or a message, report or task further down that chain) cannot
broadcast; it may still answer with single messages, which the rate and hop limits bound.
A new user input starts a new chain. So a broadcast can never start a chain of
broadcasts: the fan-out of one user input is one broadcast wide.

Who receives it is who a message to one peer would reach: a job that takes messages and
is not stopped, with a worker or without one (hibernated, reaped, or crashed: the item
wakes it as a direct send does), and a connected foreground session. A stopped job (which
a message never wakes), a removed one (no longer a peer) and a foreground session that is
not connected (a message to it is dropped) never receive one: a broadcast reaches the
same children ``roost_agents`` shows as reachable, asleep or not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roost_core import hookimpl
from roost_core.records import Refusal, ScopePlan

if TYPE_CHECKING:
    from roost_core.config import Config
    from roost_core.records import PeerInfo, ScopeRequest

#: Each scope and the relations (as the sender sees them) it reaches.
SCOPE_RELATIONS = {
    "children": frozenset({"child"}),
    "siblings": frozenset({"sibling"}),
    "tree": frozenset({"parent", "child", "sibling", "tree"}),
}


@hookimpl(trylast=True)
def roost_plan_broadcast(request: ScopeRequest, config: Config) -> ScopePlan:
    """The reachable peers of the scope's relations (:func:`receives`); refused in a chain
    that holds a broadcast."""
    relations = SCOPE_RELATIONS.get(request.scope)
    if relations is None:
        return ScopePlan(refusal=Refusal("unknown_scope", f"no scope *{request.scope}; use *children, *siblings or *tree"))
    if request.broadcast_chain:
        return ScopePlan(
            refusal=Refusal(
                "broadcast_chain",
                "this run follows a broadcast, and a broadcast cannot start another; send to one peer at a time",
            )
        )
    receivers = tuple(reachable for reachable in request.reachable if reachable.relation in relations and receives(reachable.peer))
    if not receivers:
        return ScopePlan(refusal=Refusal("empty_scope", f"no {request.scope} a message reaches (none, or all stopped)"))
    return ScopePlan(receivers=receivers)


def receives(peer: PeerInfo) -> bool:
    """Whether a message reaches ``peer`` now or wakes it: a job that takes messages and is
    not stopped (live or asleep), or a connected foreground session."""
    if peer.kind == "foreground":
        return peer.live
    return peer.accepts_messages and peer.state != "stopped"
