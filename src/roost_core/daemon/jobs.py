"""The daemon's job record: what a background session is, where its transcript lives,
and the runtime links (worker process, connection) that are never persisted."""

from __future__ import annotations

import time
from typing import Any

import attrs

from roost_core.daemon.changes import changed
from roost_core.queue import JobQueue
from roost_core.records import PeerInfo

PERSISTED = (
    "id", "name", "host", "cwd", "session", "token", "task", "scenario", "model", "thinking",
    "state", "status", "summary", "question", "error", "created", "updated",
    "parent_session", "parent_peer", "root_session", "depth", "spawned",
    "worker_pid", "worker_create_time", "crashes", "undelivered_report", "dialog",
    "run_trace", "run_hops", "parent_streak", "ended_reported", "handback_run", "run_causes",
    "run_broadcast_chain", "usage", "budget_told", "watchers",
)


@attrs.define(eq=False)
class Job:
    """One background session. Fields that peer listings show (``peer_info``, ``dialog``)
    note every change (:mod:`~roost_core.daemon.changes`), so the daemon's peer table is
    built again after any of them moves."""

    id: str
    name: str = attrs.field(on_setattr=changed)
    host: str = attrs.field(on_setattr=changed)
    cwd: str = attrs.field(on_setattr=changed)
    session: str = attrs.field(on_setattr=changed)
    token: str
    task: str
    scenario: Any = None
    model: str | None = None
    thinking: str | None = None
    state: str = attrs.field(default="idle", on_setattr=changed)
    status: str | None = attrs.field(default=None, on_setattr=changed)
    summary: str | None = attrs.field(default=None, on_setattr=changed)
    question: str | None = attrs.field(default=None, on_setattr=changed)
    error: str | None = None
    created: float = attrs.field(factory=time.time)
    updated: float = attrs.field(factory=time.time)
    parent_session: str | None = attrs.field(default=None, on_setattr=changed)
    parent_peer: str | None = attrs.field(default=None, on_setattr=changed)
    root_session: str | None = attrs.field(default=None, on_setattr=changed)
    depth: int = 0
    spawned: bool = False
    worker_pid: int | None = attrs.field(default=None, on_setattr=changed)
    worker_create_time: float | None = None
    crashes: int = 0
    undelivered_report: dict[str, Any] | None = None
    dialog: bool = attrs.field(default=False, on_setattr=changed)
    run_trace: str | None = None
    run_hops: int = 0
    parent_streak: int = 0
    ended_reported: bool = False
    handback_run: int = 0
    run_causes: list = attrs.field(factory=list)
    #: The current run took in an item of a chain that already holds a broadcast.
    run_broadcast_chain: bool = False
    #: The session's spending as its host last reported it: ``{"tokens", "cost"}``.
    usage: dict[str, Any] | None = None
    #: This job's tree was told its budget is spent.
    budget_told: bool = False
    #: Who waits to be told when this job settles, asks or ends (see daemon.watches).
    watchers: list = attrs.field(factory=list)
    # Runtime only.
    queue: JobQueue = attrs.field(factory=JobQueue)
    conn: Any = None
    process: Any = None
    reaping: bool = False
    idle_since: float = attrs.field(factory=time.monotonic)
    sent: int = 0  # items pushed to the current worker connection (seq watermark)
    last_message: float | None = None

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in PERSISTED}
        data["replySeq"] = self.queue.reply_seq
        data["acked"] = self.queue.acked
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        fields = {name: data[name] for name in PERSISTED if name in data}
        job = cls(**fields)
        job.queue = JobQueue(reply_seq=int(data.get("replySeq", 0)), acked=int(data.get("acked", 0)))
        return job

    @property
    def worker_connected(self) -> bool:
        return self.conn is not None

    @property
    def has_worker(self) -> bool:
        return self.worker_pid is not None

    @property
    def tree(self) -> str:
        """The tree this job belongs to: its root session (or ``peer:<id>``), else itself."""
        return self.root_session or self.session

    def peer_info(self, *, accepts_messages: bool = True) -> PeerInfo:
        return PeerInfo(
            id=self.id,
            name=self.name,
            kind="job",
            state=self.state,
            session=self.session,
            cwd=self.cwd,
            host=self.host,
            parent_session=self.parent_session,
            parent_peer=self.parent_peer,
            root_session=self.root_session,
            live=self.has_worker,
            accepts_messages=accepts_messages,
            status=self.status,
            summary=self.summary,
            question=self.question,
        )

    def row(self) -> dict[str, Any]:
        """The JobRow of ``jobs``: never the token."""
        return {
            "id": self.id,
            "name": self.name,
            "host": self.host,
            "state": self.state,
            "status": self.status,
            "summary": self.summary,
            "question": self.question,
            "error": self.error,
            "cwd": self.cwd,
            "session": self.session,
            "live": self.has_worker,
            "connected": self.worker_connected,
            "dialog": self.dialog,
            "pending": len(self.queue.items),
            "parentSession": self.parent_session,
            "parentPeer": self.parent_peer,
            "rootSession": self.root_session,
            "depth": self.depth,
            "spawned": self.spawned,
            "undeliveredReport": self.undelivered_report is not None,
            "usage": self.usage,
            "created": self.created,
            "updated": self.updated,
        }
