"""Default budget: a session tree may spend at most ``agentTreeTokens`` tokens and
``agentTreeCost`` of cost (in the host's currency), each unset by default (no cap).

Usage comes from the agent hosts' own records (pi's per-message ``usage``), summed over
the tree's jobs by the core. Once a cap is reached, spawns and messages from the tree are
refused with ``budget_spent``; the core tells the tree's running sessions and its root.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roost_core import hookimpl
from roost_core.records import Refusal

if TYPE_CHECKING:
    from roost_core.config import Config
    from roost_core.records import TreeUsage


@hookimpl
def roost_check_budget(usage: TreeUsage, config: Config) -> Refusal | None:
    """Refuse once the tree's tokens or cost reach the configured cap."""
    if config.agent_tree_tokens is not None and usage.tokens >= config.agent_tree_tokens:
        return Refusal(
            "budget_spent", f"this session tree has used {usage.tokens:,} tokens; its budget is {config.agent_tree_tokens:,} (agentTreeTokens)"
        )
    if config.agent_tree_cost is not None and usage.cost >= config.agent_tree_cost:
        return Refusal(
            "budget_spent", f"this session tree has spent {usage.cost:.4g}; its budget is {config.agent_tree_cost:.4g} (agentTreeCost)"
        )
    return None
