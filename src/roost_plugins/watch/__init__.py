"""Default watch policy: a session may watch peers of its own tree, at most
``agentMaxWatches`` at once, and not past ``agentMaxHops`` steps of an agent chain.

A watch is told once (a ``notice``) when its peer settles a run, asks a question or ends,
and ends with the watcher; a notice continues the chain of what the peer did, so watching
and messaging back and forth stops at the hop limit like any other chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roost_core import hookimpl
from roost_core.records import Refusal, WatchDecision

if TYPE_CHECKING:
    from roost_core.config import Config
    from roost_core.records import WatchRequest

ALLOWED = WatchDecision(True)


@hookimpl(trylast=True)
def roost_decide_watch(request: WatchRequest, config: Config) -> WatchDecision:
    """Inside the tree only, a bounded number at once, within the hop limit."""
    if request.relation == "external":
        return WatchDecision(False, Refusal("unreachable", "only sessions in your own tree can be watched"))
    if request.active >= config.agent_max_watches:
        return WatchDecision(
            False, Refusal("watch_limit", f"{request.active} watches already; the limit is {config.agent_max_watches} (agentMaxWatches)")
        )
    if request.hops > config.agent_max_hops:
        return WatchDecision(
            False, Refusal("hop_limit", f"this watch would be step {request.hops} of an agent chain; the limit is {config.agent_max_hops}")
        )
    return ALLOWED
