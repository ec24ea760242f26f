"""Default limits.

Sends: no message to oneself, no empty or oversized message, at most
``agentMessagesPerMinute`` accepted messages per sender in any 60 s, and no message past
``agentMaxHops`` steps from the user input that began its chain. Spawns: depth
``agentMaxDepth``, live children per parent, live sessions per tree, live spawned sessions
overall, and spawns per tree per minute.

Rate counters are state, so the hooks live on :class:`LimitsPlugin` and the module exposes
one instance as ``plugin`` (what ``roost_core.plugins`` registers). That instance is shared
by every manager built in one process; the daemon builds one manager per process, so this
is the counter it needs. Tests build a fresh ``LimitsPlugin()`` each.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from roost_core import hookimpl
from roost_core.records import Refusal

if TYPE_CHECKING:
    from roost_core.config import Config
    from roost_core.records import OutgoingItem, SpawnRequest

#: Length of the sliding rate window, in seconds of the daemon's clock.
RATE_WINDOW_SECONDS = 60.0


class LimitsPlugin:
    """Send checks plus per-sender timestamps of accepted messages: ``roost_check_send``
    counts nothing, ``roost_note_sent`` (called only for a send every check passed and
    the receiver took) stamps it in its sender's rate window."""

    def __init__(self) -> None:
        self._sent: dict[str, deque[float]] = {}
        self._spawned: dict[str, deque[float]] = {}

    def _recent(self, sender_id: str, now: float, table: dict[str, deque[float]] | None = None) -> int:
        table = self._sent if table is None else table
        stamps = table.get(sender_id)
        if stamps is None:
            return 0
        while stamps and now - stamps[0] >= RATE_WINDOW_SECONDS:
            stamps.popleft()
        if not stamps:
            # Peers come and go; an idle sender should not keep a slot forever.
            del table[sender_id]
            return 0
        return len(stamps)

    @staticmethod
    def _refusal(item: OutgoingItem, config: Config) -> Refusal | None:
        """The checks of a send that keep no count: self-sends always; empty, oversized
        and over-long-chain messages (not reports)."""
        sender, target = item.sender, item.target
        if sender.id == target.id or (sender.session is not None and sender.session == target.session):
            return Refusal("self_send", "cannot send a message to yourself")
        if item.kind != "message":
            # Reports are cut to size where they are made and are one per run, so neither
            # the size nor the rate limit applies.
            return None
        if not item.text or item.text.isspace():  # what strip() would leave empty, with no copy
            return Refusal("empty_message", "the message is empty")
        limit = config.max_message_chars
        if len(item.text) > limit:
            return Refusal("message_too_long", f"message is {len(item.text)} characters; the limit is {limit}")
        if item.hops > config.agent_max_hops:
            return Refusal(
                "hop_limit",
                f"this message would be step {item.hops} of a chain of agent messages; the limit is {config.agent_max_hops}",
            )
        return None

    @hookimpl
    def roost_check_send(self, item: OutgoingItem, now: float, config: Config) -> Refusal | None:
        """The checks, then the sender's rate window: at most ``agentMessagesPerMinute``
        accepted messages in any 60 s."""
        refusal = self._refusal(item, config)
        if refusal is not None or item.kind != "message":
            return refusal
        # _recent's work written out: this runs on every send.
        stamps = self._sent.get(item.sender.id)
        if stamps is not None:
            while stamps and now - stamps[0] >= RATE_WINDOW_SECONDS:
                stamps.popleft()
        if (len(stamps) if stamps is not None else 0) >= config.messages_per_minute:
            return _over_rate(config)
        return None

    @hookimpl
    def roost_note_sent(self, item: OutgoingItem, now: float) -> None:
        """Count an accepted message towards its sender's rate window (its check, just
        before, pruned the window already)."""
        if item.kind != "message":
            return
        stamps = self._sent.get(item.sender.id)
        if stamps is None:  # (not setdefault: that would make a deque per call)
            stamps = self._sent[item.sender.id] = deque()
        stamps.append(now)

    @hookimpl
    def roost_check_spawn(self, request: SpawnRequest, now: float, config: Config) -> Refusal | None:
        """The spec's caps, each refusal naming its cap and its config key; a host the
        agent chose must be one ``agentSpawnHosts`` allows."""
        if request.host is not None and request.host not in config.agent_spawn_hosts:
            allowed = ", ".join(config.agent_spawn_hosts) or "none"
            return Refusal("host_not_allowed", f"host {request.host!r} may not be chosen for a child; agentSpawnHosts allows: {allowed}")
        if request.depth > config.agent_max_depth:
            return Refusal("depth_limit", f"a child here would be at depth {request.depth}; agentMaxDepth is {config.agent_max_depth}")
        if request.live_children >= config.max_children_per_parent:
            return Refusal("children_limit", f"{request.live_children} live children already; the limit per parent is {config.max_children_per_parent}")
        if request.live_in_tree >= config.max_live_per_tree:
            return Refusal("tree_limit", f"{request.live_in_tree} live sessions in this tree already; the limit is {config.max_live_per_tree}")
        if request.live_spawned >= config.max_live_spawned:
            return Refusal("spawn_limit", f"{request.live_spawned} live spawned sessions already; the limit is {config.max_live_spawned}")
        per_minute = config.spawns_per_tree_per_minute
        if self._recent(request.tree, now, self._spawned) >= per_minute:
            return Refusal("spawn_rate_limited", f"{per_minute} spawns in this tree in the last minute; wait before spawning again")
        if request.hops > config.agent_max_hops:
            return Refusal("hop_limit", f"this spawn would be step {request.hops} of an agent chain; the limit is {config.agent_max_hops}")
        return None

    @hookimpl
    def roost_note_spawned(self, request: SpawnRequest, now: float) -> None:
        """Count a spawn towards its tree's rate window."""
        self._recent(request.tree, now, self._spawned)
        self._spawned.setdefault(request.tree, deque()).append(now)


def _over_rate(config: Config) -> Refusal:
    per_minute = config.messages_per_minute
    return Refusal("rate_limited", f"more than {per_minute} messages a minute; wait before sending again")


plugin = LimitsPlugin()
