"""Default broadcast policy: ``*children``, ``*siblings`` and ``*tree`` reach the *live*
peers of that relation inside the sender's tree, one item each, and a chain holds at most
one broadcast.

The chain rule: a run that took in anything from a chain that already holds a broadcast
(the broadcast itself, or a message, report or task further down that chain) cannot
broadcast; it may still answer with single messages, which the rate and hop limits bound.
A new user input starts a new chain. So a broadcast can never start a chain of
broadcasts: the fan-out of one user input is one broadcast wide.

Only live peers (a job with a worker, a connected foreground session) receive a
broadcast: a broadcast to a tree must not wake every finished job in it. A peer that is
not live is reached by a message to its id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roost_core import hookimpl
from roost_core.records import Refusal, ScopePlan

if TYPE_CHECKING:
    from roost_core.config import Config
    from roost_core.records import ScopeRequest

#: Each scope and the relations (as the sender sees them) it reaches.
SCOPE_RELATIONS = {
    "children": frozenset({"child"}),
    "siblings": frozenset({"sibling"}),
    "tree": frozenset({"parent", "child", "sibling", "tree"}),
}


@hookimpl(trylast=True)
def roost_plan_broadcast(request: ScopeRequest, config: Config) -> ScopePlan:
    """Live peers of the scope's relations; refused in a chain that holds a broadcast."""
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
    receivers = tuple(
        reachable
        for reachable in request.reachable
        if reachable.relation in relations and reachable.peer.live and reachable.peer.accepts_messages and reachable.peer.state != "stopped"
    )
    if not receivers:
        return ScopePlan(refusal=Refusal("empty_scope", f"no live {request.scope} to reach"))
    return ScopePlan(receivers=receivers)
