"""What each session tree has spent, and whether its budget is spent: op logic with no I/O.

The core sums what each tree's jobs report they spent (their hosts' own usage records);
the budget plugin (``roost_check_budget``) says when a tree's budget is spent. Both are
asked before every send and spawn, and change only when a usage or the set of jobs does,
so both are kept until then (:meth:`Budgets.usage_changed`). What the daemon does once a
tree's budget is spent (refuse, stop waking, tell) is in :mod:`roost_core.daemon.budget`.
"""

from __future__ import annotations

import enum
from typing import Any

from roost_core import policy
from roost_core.config import Config
from roost_core.daemon.jobs import Job
from roost_core.protocol import ProtocolError
from roost_core.records import PeerInfo, Refusal, TreeUsage


#: Not asked yet (None is an answer: no refusal).
class _Unasked(enum.Enum):
    """A tree the budget plugin was not asked about yet (None is its "go on")."""

    UNASKED = enum.auto()


_UNASKED = _Unasked.UNASKED


def tree_of(peer: PeerInfo) -> str:
    """The tree a peer belongs to, named as ``Job.tree`` and ``spawn`` name it."""
    return peer.root_session or peer.session or f"peer:{peer.id}"


class Budgets:
    """Each tree's usage and budget answer, worked out from ``jobs`` (the daemon's own
    dict, read, never copied) and the budget plugins of ``pm``."""

    def __init__(self, jobs: dict[str, Job], pm: Any, config: Config) -> None:
        self.jobs = jobs
        self.pm = pm
        self.config = config
        self._usage: dict[str, TreeUsage] | None = None
        #: Each tree's budget answer, kept until a usage or the set of jobs changes.
        self._refusals: dict[str, Refusal | None] = {}

    def usage_changed(self) -> None:
        """A job's usage, or the set of jobs, changed: sums are made again when asked."""
        self._usage = None
        self._refusals = {}

    def usage(self, tree: str) -> TreeUsage:
        """What ``tree``'s jobs have spent, summed (kept until a usage changes)."""
        if self._usage is None:
            sums: dict[str, list[Any]] = {}
            for job in self.jobs.values():
                row = sums.setdefault(job.tree, [0, 0.0, 0])
                usage = job.usage or {}
                row[0] += int(usage.get("tokens") or 0)
                row[1] += float(usage.get("cost") or 0.0)
                row[2] += 1
            self._usage = {key: TreeUsage(tree=key, tokens=t, cost=c, jobs=n) for key, (t, c, n) in sums.items()}
        return self._usage.get(tree) or TreeUsage(tree=tree)

    def refusal(self, tree: str) -> Refusal | None:
        """The budget plugin's refusal for ``tree``, or None while it may go on."""
        refusal = self._refusals.get(tree, _UNASKED)
        if refusal is _UNASKED:
            refusal = self._refusals[tree] = policy.check_budget(self.pm, self.usage(tree), self.config)
        return refusal

    def spent(self, tree: str) -> bool:
        return self.refusal(tree) is not None

    def check(self, sender: PeerInfo) -> None:
        """Refuse a send or spawn from a tree whose budget is spent."""
        refusal = self.refusal(tree_of(sender))
        if refusal is not None:
            raise ProtocolError(refusal.code, refusal.message)
