"""The agent table every view shows (``agents``, ``watch``): one row per peer, collapsed by
session, with its tree links and its tree's spending. No I/O."""

from __future__ import annotations

from typing import Any

from roost_core import peerstate
from roost_core.daemon.budgets import Budgets, tree_of
from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.tables import PeerTables, activity_of


class AgentRows:
    """The rows of the agent table, from the peer tables and the records they are built
    from (``jobs`` and ``foreground``: the daemon's own dicts)."""

    def __init__(self, tables: PeerTables, budgets: Budgets, jobs: dict[str, Job], foreground: dict[str, ForegroundPeer]) -> None:
        self.tables = tables
        self.budgets = budgets
        self.jobs = jobs
        self.foreground = foreground

    def rows(self) -> list[dict[str, Any]]:
        """Every peer (collapsed by session) with its tree links and its tree's spending."""
        table = self.tables.peer_table()
        names = {peer.id: peer.name for peer in table.holders.values()}
        trees: dict[str, dict[str, Any]] = {}
        rows = []
        for peer in table.holders.values():
            job = self.jobs.get(peer.id) if peer.kind == "job" else None
            fg = self.foreground.get(peer.id) if peer.kind == "foreground" else None
            parent = self.tables.parent_holder(peer, table)
            tree = tree_of(peer)
            if tree not in trees:
                usage = self.budgets.usage(tree)
                refusal = self.budgets.refusal(tree)
                trees[tree] = {"tokens": usage.tokens, "cost": usage.cost, "spent": refusal is not None, "reason": refusal.message if refusal else None}
            activity = activity_of(peer, job)
            rows.append(
                {
                    "id": peer.id,
                    "name": peer.name,
                    "framedName": peer.framed_name or peer.name,
                    "kind": peer.kind,
                    # A foreground session says which agent it runs (pi, claude), for display.
                    "host": (fg.host if fg is not None and fg.host else peer.host),
                    "state": peer.state,
                    # Attached: its session runs in a terminal (roost attach), not a worker.
                    "live": peer.live or bool(job and job.attach),
                    "attached": job.attach.shown() if job and job.attach else None,
                    "cwd": peer.cwd,
                    "session": peer.session,
                    "status": peer.status,
                    "summary": peer.summary,
                    "question": peer.question,
                    # Why a failed job failed (or one stopped after it had): what
                    # `roost jobs` shows, so every view shows it.
                    "error": job.error if job else None,
                    "stoppedFrom": job.stopped_from if job else None,
                    "dialog": bool(job and job.dialog),
                    "dialogOptions": job.dialog_options if job and job.dialog else None,
                    "background": job.background if job else 0,
                    "backgroundShown": job.background_shown if job else [],
                    "activity": activity,
                    "onMessage": peerstate.ON_MESSAGE[activity],
                    "parentSession": peer.parent_session,
                    "rootSession": peer.root_session,
                    "parent": parent.id if parent is not None else None,
                    "parentName": names.get(parent.id) if parent is not None else None,
                    "pending": len(job.queue.items) if job else len(fg.in_flight) if fg else 0,
                    "lastMessage": (job.last_message if job else fg.last_message if fg else None),
                    "created": job.created if job else fg.registered if fg else None,
                    "usage": job.usage if job else None,
                    "progress": job.progress if job else None,
                    "treeUsage": trees[tree],
                }
            )
        rows.sort(key=lambda row: (row["created"] or 0, row["id"]))
        return rows

