"""Budgets per session tree: once a tree's budget is spent (:mod:`~roost_core.daemon.budgets`
sums its usage and asks the budget plugin), the core refuses the tree's spawns and sends,
stops waking its jobs for agent items, tells its running sessions and its root, once."""

from __future__ import annotations

from typing import Any

from roost_core import policy
from roost_core.daemon.budgets import Budgets, tree_of
from roost_core.daemon.jobs import Job
from roost_core.daemon.registry import Registry
from roost_core.daemon.sending import SendDesk, deliver_to
from roost_core.daemon.tables import PeerTables
from roost_core.daemon.tasks import Tasks
from roost_core.names import shown
from roost_core.protocol import ProtocolError
from roost_core.records import OutgoingItem, PeerInfo, Refusal

#: The sender of what the daemon itself tells agents (budget notices).
DAEMON_PEER = PeerInfo(id="roost", name="roost", kind="daemon", state="connected", live=True)
#: The relation a daemon notice is framed with (it is no peer's).
DAEMON_RELATION = "system"


class BudgetNotices:
    """The daemon's side of budgets: what it does once a tree's budget is spent. The
    sums and the plugin's answers are ``budgets`` (:class:`Budgets`, no I/O)."""

    def __init__(self, pm: Any, registry: Registry, budgets: Budgets, tables: PeerTables, desk: SendDesk, tasks: Tasks) -> None:
        self.pm = pm
        self.registry = registry
        self.jobs = registry.jobs
        self.budgets = budgets
        self.tables = tables
        self.desk = desk
        self.tasks = tasks

    def note_usage(self, job: Job, usage: Any) -> None:
        """The worker reported its session's total spending (idempotent: a total, not a
        delta). The first time the tree is over its budget, it is told."""
        if not isinstance(usage, dict):
            return
        # What a worker reported, not checked yet.
        tokens: Any = usage.get("tokens")
        cost: Any = usage.get("cost", 0)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in (tokens, cost)):
            return
        clean = {"tokens": int(tokens), "cost": float(cost)}
        if clean == job.usage:
            return
        job.usage = clean
        self.budgets.usage_changed()
        tree = job.tree
        refusal = self.budgets.refusal(tree)
        members = [j for j in self.jobs.values() if j.tree == tree]
        if refusal is None or any(j.budget_told for j in members):
            return
        for member in members:
            member.budget_told = True
            if member is not job:
                self.registry.save(member)
        self.tasks.soon(self.tell_budget_spent, tree, refusal)

    async def tell_budget_spent(self, tree: str, refusal: Refusal) -> None:
        """Each job of the tree that is in a run gets a notice; the root gets a report."""
        table = self.tables.peer_table()
        root = table.holders.get(tree) if not tree.startswith("peer:") else table.holder_of(tree[len("peer:"):])
        told: list[str] = []
        for holder in list(table.holders.values()):
            # Only sessions in a run are told: a notice to an idle one would start a run,
            # which is spending.
            if holder is root or holder.kind != "job" or not holder.live or holder.state != "running":
                continue
            if tree_of(holder) != tree:
                continue
            text = f"budget spent: {refusal.message}. Spawns and messages from this tree are refused now; finish the step you are on and stop."
            await self.tell(holder, text, kind="notice")
            told.append(f"{shown(holder.name)} ({holder.id})")
        if root is not None:
            lines = [f"budget spent: {refusal.message}.", "Spawns and messages from this tree are refused; agent messages no longer wake its jobs."]
            lines.append(f"Told the running sessions: {', '.join(told)}." if told else "No other session of the tree was running.")
            await self.tell(root, "\n".join(lines), kind="report")

    async def tell(self, target: PeerInfo, text: str, *, kind: str) -> dict[str, Any] | None:
        """An item from the daemon itself to ``target`` (never wakes a job of a spent tree)."""
        item = OutgoingItem(sender=DAEMON_PEER, target=target, text=text, kind=kind, relation=DAEMON_RELATION)
        try:
            return await deliver_to(self.desk, target, item, policy.frame_item(self.pm, item))
        except ProtocolError:
            return None  # a full queue: the tree's views still show it spent
