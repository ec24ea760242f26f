"""Default send limits: no message to oneself, no empty or oversized message, and at most
``agentMessagesPerMinute`` accepted messages per sender in any 60 s.

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
    from roost_core.records import OutgoingItem

#: Length of the sliding rate window, in seconds of the daemon's clock.
RATE_WINDOW_SECONDS = 60.0


class LimitsPlugin:
    """Send checks plus per-sender timestamps of accepted messages."""

    def __init__(self) -> None:
        self._sent: dict[str, deque[float]] = {}

    def _recent(self, sender_id: str, now: float) -> int:
        stamps = self._sent.get(sender_id)
        if stamps is None:
            return 0
        while stamps and now - stamps[0] >= RATE_WINDOW_SECONDS:
            stamps.popleft()
        if not stamps:
            # Peers come and go; an idle sender should not keep a slot forever.
            del self._sent[sender_id]
            return 0
        return len(stamps)

    @hookimpl
    def roost_check_send(self, item: OutgoingItem, now: float, config: Config) -> Refusal | None:
        """Refuse self-sends always; empty, oversized and over-rate messages (not reports)."""
        sender, target = item.sender, item.target
        if sender.id == target.id or (sender.session is not None and sender.session == target.session):
            return Refusal("self_send", "cannot send a message to yourself")
        if item.kind != "message":
            # Reports are cut to size where they are made and are one per run, so neither
            # the size nor the rate limit applies.
            return None
        if not item.text.strip():
            return Refusal("empty_message", "the message is empty")
        limit = config.max_message_chars
        if len(item.text) > limit:
            return Refusal("message_too_long", f"message is {len(item.text)} characters; the limit is {limit}")
        per_minute = config.messages_per_minute
        if self._recent(sender.id, now) >= per_minute:
            return Refusal(
                "rate_limited", f"more than {per_minute} messages a minute; wait before sending again"
            )
        return None

    @hookimpl
    def roost_note_sent(self, item: OutgoingItem, now: float) -> None:
        """Count an accepted message towards its sender's rate window."""
        if item.kind != "message":
            return
        self._recent(item.sender.id, now)
        self._sent.setdefault(item.sender.id, deque()).append(now)


plugin = LimitsPlugin()
