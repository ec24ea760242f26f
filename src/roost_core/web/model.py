"""What the page shows, kept from the daemon's ``watch`` stream (with receipts): the
agent table, the kept receipts by their number, each agent's and each tree's spending
over time. No I/O: the server feeds it the daemon's answers and events, and sends the
page the events it makes (JSON, which the page draws with ``textContent`` only).

A transcript is rendered here too, as ``roost log`` renders it (the host's reader, the
render plugin), each entry marked with whose it is: roost's items (an agent's message,
a report, a notice; the user's words roost delivered) apart from the agent's own.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from roost_core.records import AGENT_MESSAGE_TYPE, TranscriptEntry
from roost_core.view import tree_key

#: Points of spending kept per agent and per tree (the newest).
COST_POINTS = 500
#: Receipts the page is given at most (the newest); the daemon keeps 100 per sender.
MAX_RECEIPTS = 20_000


def spending(usage: Any) -> tuple[int, float] | None:
    """``(tokens, cost)`` of a row's ``usage``/``treeUsage``, or None."""
    if not isinstance(usage, dict):
        return None
    tokens, cost = usage.get("tokens"), usage.get("cost")
    return (int(tokens) if isinstance(tokens, (int, float)) else 0, float(cost) if isinstance(cost, (int, float)) else 0.0)


class PageModel:
    """The page's state. ``budgets``: the tree budgets in force (``agentTreeTokens``,
    ``agentTreeCost`` of the user config; None when there is none)."""

    def __init__(self, budgets: dict[str, Any] | None = None) -> None:
        self.budgets = budgets or {"tokens": None, "cost": None}
        self.agents: list[dict[str, Any]] = []
        self.receipts: dict[int, dict[str, Any]] = {}
        self.receipts_left_out = 0
        self.costs: dict[str, deque[list[float]]] = {}
        self.daemon_up = False

    # ------------------------------------------------------------ from the daemon

    def watched(self, result: dict[str, Any], now: float | None = None) -> dict[str, Any]:
        """``watch``'s answer (a connection made anew): the page's whole ``snapshot``."""
        self.daemon_up = True
        self.receipts = {}
        self.receipts_left_out = int(result.get("receiptsLeftOut") or 0)
        self.take_receipts(result.get("receipts") or [])
        self.take_agents(result.get("agents") or [], now)
        return self.snapshot()

    def take_agents(self, rows: list[dict[str, Any]], now: float | None = None) -> dict[str, Any]:
        """An ``agents`` event: the page's ``agents`` event, with the spending points it added."""
        self.agents = rows
        points = self._note_costs(rows, time.time() if now is None else now)
        return {"agents": rows, "costPoints": points}

    def take_receipts(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """A ``receipts`` event: the page's ``receipts`` event (the same rows)."""
        for row in rows:
            number = row.get("number")
            if isinstance(number, int):
                self.receipts[number] = row
        if len(self.receipts) > MAX_RECEIPTS:
            for number in sorted(self.receipts)[: len(self.receipts) - MAX_RECEIPTS]:
                del self.receipts[number]
        return {"receipts": rows}

    def lost(self) -> dict[str, Any]:
        """The daemon's connection is gone: the page's ``daemon`` event."""
        self.daemon_up = False
        return {"up": False}

    # ------------------------------------------------------------ to the page

    def snapshot(self) -> dict[str, Any]:
        return {
            "agents": self.agents,
            "receipts": [self.receipts[n] for n in sorted(self.receipts)],
            "receiptsLeftOut": self.receipts_left_out,
            "costs": {key: list(points) for key, points in self.costs.items()},
            "budgets": self.budgets,
            "daemonUp": self.daemon_up,
        }

    def _note_costs(self, rows: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """Append a point for each agent and tree whose spending moved."""
        added: list[dict[str, Any]] = []
        seen_trees: set[str] = set()
        for row in rows:
            mine = spending(row.get("usage"))
            if mine is not None:
                added += self._point(f"agent:{row['id']}", mine, now)
            key = tree_key(row)
            if key not in seen_trees:
                seen_trees.add(key)
                tree = spending(row.get("treeUsage"))
                if tree is not None:
                    added += self._point(f"tree:{key}", tree, now)
        return added

    def _point(self, key: str, value: tuple[int, float], now: float) -> list[dict[str, Any]]:
        points = self.costs.get(key)
        if points is None:
            points = self.costs[key] = deque(maxlen=COST_POINTS)
        if points and (points[-1][1], points[-1][2]) == value:
            return []
        point = [round(now, 3), value[0], value[1]]
        points.append(point)
        return [{"key": key, "point": point}]


def entry_of(entry: TranscriptEntry, text: str, receipts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One rendered transcript entry for the page: its text, whose it is (``roost``: an
    item roost delivered from an agent; ``you``: the user's words; ``agent``; ``tool``)
    and, for an agent item, its receipt."""
    out: dict[str, Any] = {"text": text, "who": "agent"}
    if entry.type == "custom_message" and entry.custom_type == AGENT_MESSAGE_TYPE:
        details = entry.details
        out.update(who="roost", kind=details.get("kind"), fromName=details.get("fromName"), id=details.get("id"), replyTo=details.get("replyTo"))
        seq = details.get("seq")
        if isinstance(seq, int) and seq in receipts:
            out["receipt"] = receipts[seq]
    elif entry.role == "user":
        out["who"] = "you"
    elif entry.role == "toolResult":
        out["who"] = "tool"
    return out
