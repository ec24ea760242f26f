"""Budgets per session tree: the core sums what each tree's jobs report they spent (their
hosts' own usage records), the budget plugin (``roost_check_budget``) says when a tree's
budget is spent, and the core then refuses the tree's spawns and sends, stops waking its
jobs for agent items, tells its running sessions and its root, once."""

from __future__ import annotations

from typing import Any

from roost_core import policy
from roost_core.daemon.base import DaemonBase
from roost_core.daemon.jobs import Job
from roost_core.protocol import ProtocolError
from roost_core.records import OutgoingItem, PeerInfo, Refusal, TreeUsage

#: The sender of what the daemon itself tells agents (budget notices).
DAEMON_PEER = PeerInfo(id="roost", name="roost", kind="daemon", state="connected", live=True)
#: The relation a daemon notice is framed with (it is no peer's).
DAEMON_RELATION = "system"


def tree_of(peer: PeerInfo) -> str:
    """The tree a peer belongs to, named as ``Job.tree`` and ``spawn`` name it."""
    return peer.root_session or peer.session or f"peer:{peer.id}"


class BudgetOps(DaemonBase):
    _usage_cache: dict[str, TreeUsage] | None = None
    #: Each tree's budget answer, kept until a usage or the set of jobs changes (asked
    #: before every send: the answer follows from the usage and the config).
    _refusals: dict[str, Refusal | None] | None = None

    def usage_changed(self) -> None:
        """A job's usage, or the set of jobs, changed: sums are made again when asked."""
        self._usage_cache = None
        self._refusals = None

    def tree_usage(self, tree: str) -> TreeUsage:
        """What ``tree``'s jobs have spent, summed (kept until a usage changes)."""
        if self._usage_cache is None:
            sums: dict[str, list[Any]] = {}
            for job in self.jobs.values():
                row = sums.setdefault(job.tree, [0, 0.0, 0])
                usage = job.usage or {}
                row[0] += int(usage.get("tokens") or 0)
                row[1] += float(usage.get("cost") or 0.0)
                row[2] += 1
            self._usage_cache = {key: TreeUsage(tree=key, tokens=t, cost=c, jobs=n) for key, (t, c, n) in sums.items()}
        return self._usage_cache.get(tree) or TreeUsage(tree=tree)

    def budget_refusal(self, tree: str) -> Refusal | None:
        refusals = self._refusals
        if refusals is None:
            refusals = self._refusals = {}
        elif tree in refusals:
            return refusals[tree]
        refusal = refusals[tree] = policy.check_budget(self.pm, self.tree_usage(tree), self.config)
        return refusal

    def budget_spent(self, tree: str) -> bool:
        return self.budget_refusal(tree) is not None

    def check_budget_of(self, sender: PeerInfo) -> None:
        """Refuse a send or spawn from a tree whose budget is spent."""
        refusal = self.budget_refusal(tree_of(sender))
        if refusal is not None:
            raise ProtocolError(refusal.code, refusal.message)

    def note_usage(self, job: Job, usage: Any) -> None:
        """The worker reported its session's total spending (idempotent: a total, not a
        delta). The first time the tree is over its budget, it is told."""
        if not isinstance(usage, dict):
            return
        tokens, cost = usage.get("tokens"), usage.get("cost", 0)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in (tokens, cost)):
            return
        clean = {"tokens": int(tokens), "cost": float(cost)}
        if clean == job.usage:
            return
        job.usage = clean
        self.usage_changed()
        tree = job.tree
        refusal = self.budget_refusal(tree)
        members = [j for j in self.jobs.values() if j.tree == tree]
        if refusal is None or any(j.budget_told for j in members):
            return
        for member in members:
            member.budget_told = True
            if member is not job:
                self.save(member)
        self.soon(self.tell_budget_spent, tree, refusal)

    async def tell_budget_spent(self, tree: str, refusal: Refusal) -> None:
        """Each job of the tree that is in a run gets a notice; the root gets a report."""
        table = self.peer_table()
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
            told.append(f"{holder.name} ({holder.id})")
        if root is not None:
            lines = [f"budget spent: {refusal.message}.", "Spawns and messages from this tree are refused; agent messages no longer wake its jobs."]
            lines.append(f"Told the running sessions: {', '.join(told)}." if told else "No other session of the tree was running.")
            await self.tell(root, "\n".join(lines), kind="report")

    async def tell(self, target: PeerInfo, text: str, *, kind: str) -> dict[str, Any] | None:
        """An item from the daemon itself to ``target`` (never wakes a job of a spent tree)."""
        item = OutgoingItem(sender=DAEMON_PEER, target=target, text=text, kind=kind, relation=DAEMON_RELATION)
        try:
            return await self.deliver_to(target, item, policy.frame_item(self.pm, item))
        except ProtocolError:
            return None  # a full queue: the tree's views still show it spent
