"""The daemon's job record: what a background session is, where its transcript lives,
and the runtime links (worker process, connection) that are never persisted."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import attrs

from roost_core.daemon.changes import NotesChanges
from roost_core.queue import JobQueue
from roost_core.records import PeerInfo

PERSISTED = (
    "id", "name", "host", "cwd", "session", "token", "task", "scenario", "model", "thinking",
    "state", "status", "summary", "question", "error", "created", "updated",
    "parent_session", "parent_peer", "root_session", "depth", "spawned",
    "worker_pid", "worker_create_time", "worker_mark", "host_pid", "crashes", "undelivered_report", "dialog",
    "dialog_options",
    "run_trace", "run_hops", "parent_streak", "ended_reported", "handback_run", "run_causes",
    "run_broadcast_chain", "usage", "budget_told", "watchers", "stopped_from", "request_key", "workspace",
)


@attrs.define(eq=False)
class Job(NotesChanges):
    """One background session. Fields that peer listings show (``peer_info``, ``dialog``)
    note every change (:mod:`~roost_core.daemon.changes`), so the daemon's peer table is
    built again after any of them moves."""

    shown: ClassVar[frozenset[str]] = frozenset({"name", "host", "cwd", "session", "state", "status", "summary", "question", "parent_session", "parent_peer", "root_session", "worker_pid", "dialog", "dialog_options", "crashes", "background"})

    id: str
    name: str
    host: str
    cwd: str
    session: str
    token: str
    task: str
    scenario: Any = None
    model: str | None = None
    thinking: str | None = None
    state: str = "idle"
    status: str | None = None
    summary: str | None = None
    question: str | None = None
    error: str | None = None
    created: float = attrs.field(factory=time.time)
    updated: float = attrs.field(factory=time.time)
    parent_session: str | None = None
    parent_peer: str | None = None
    root_session: str | None = None
    depth: int = 0
    spawned: bool = False
    worker_pid: int | None = None
    worker_create_time: float | None = None
    #: The mark in the environment of everything the current worker starts (see
    #: :mod:`roost_core.worker.proctree`): what to kill once that worker is dead.
    worker_mark: str | None = None
    #: The host's own process (pi, claude), as the worker reports it; for people, never trusted.
    host_pid: int | None = None
    crashes: int = 0
    undelivered_report: dict[str, Any] | None = None
    dialog: bool = False
    #: The open dialog's options when it is a choice (None: any text answers it).
    dialog_options: list[str] | None = None
    run_trace: str | None = None
    run_hops: int = 0
    parent_streak: int = 0
    ended_reported: bool = False
    handback_run: int = 0
    run_causes: list[dict[str, Any]] = attrs.field(factory=list)
    #: The current run took in an item of a chain that already holds a broadcast.
    run_broadcast_chain: bool = False
    #: The session's spending as its host last reported it: ``{"tokens", "cost"}``.
    usage: dict[str, Any] | None = None
    #: This job's tree was told its budget is spent.
    budget_told: bool = False
    #: Who waits to be told when this job settles, asks or ends (see daemon.watches).
    watchers: list[dict[str, Any]] = attrs.field(factory=list)
    #: The state the job was in when the user stopped it (``failed`` stays visible
    #: after a stop); None when it is not stopped.
    stopped_from: str | None = None
    #: The caller and key of the keyed ``start`` or ``spawn`` that made this job: asked
    #: again after a daemon died before answering, it finds this job, not a second one.
    request_key: str | None = None
    #: The job's own workspace (``Workspace.to_json``: a git worktree on a branch of its
    #: own), None when it works in the folder it was given (``daemon.workspaces``).
    workspace: dict[str, Any] | None = None
    # Runtime only.
    #: ``name`` as envelopes frame it (``roost_sanitize_name``), set by the daemon when it
    #: makes or loads the job; lookups take it as well as the name as typed.
    framed_name: str = ""
    queue: JobQueue = attrs.field(factory=JobQueue)
    conn: Any = None
    process: Any = None
    #: The warm slot this job was made from, until its worker is started from it.
    slot: Any = None
    reaping: bool = False
    #: How many processes the job keeps running on purpose, settled (its worker says:
    #: ``roost_core.worker.background``), and the first few as ``{pid, command}``; while
    #: any run, it is not hibernated.
    background: int = 0
    background_shown: list[dict[str, Any]] = attrs.field(factory=list)
    #: The run's last sign of work as its worker last told it (``{"at", "what", "steps"}``,
    #: ``roost_core.worker.progress``): kept in memory only, and never moves ``updated``.
    progress: dict[str, Any] | None = None
    idle_since: float = attrs.field(factory=time.monotonic)
    #: Its worker says its session file refuses writes (a full disk): what waits for it is
    #: held, and a send its full queue refuses is ``not_stored``, not ``queue_full``.
    write_failing: bool = False
    sent: int = 0  # items pushed to the current worker connection (seq watermark)
    #: Each item's stage (``daemon.itemlife``) by seq, from its acceptance until its ack
    #: is durable (the mailroom steps them).
    stages: dict[int, Any] = attrs.field(factory=dict)
    last_message: float | None = None
    #: ``peer_info`` as last made, with the ``accepts_messages`` it was made for;
    #: forgotten when a shown field moves (NotesChanges), so a peer table built again
    #: after another record's change makes no new entry for this one.
    kept_info: tuple[bool, PeerInfo] | None = attrs.field(default=None, init=False, repr=False)
    #: The ``roost attach`` holding this job (``daemon.attach.Attachment``), or None.
    attach: Any = None
    #: ``dialog`` as the tree's foreground sessions were last told it (daemon.dialognotices).
    dialog_told: bool = attrs.field(default=False, init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in PERSISTED}
        data["replySeq"] = self.queue.reply_seq
        data["acked"] = self.queue.acked
        return data

    @classmethod
    def from_json(cls, data: Any) -> Job:
        """A job from its record; ``ValueError`` saying what is wrong with a record that
        roost did not write (damaged, or edited by hand)."""
        check_record(data)
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
        kept = self.kept_info
        if kept is not None and kept[0] == accepts_messages:
            return kept[1]
        info = self._make_peer_info(accepts_messages)
        self.kept_info = (accepts_messages, info)
        return info

    def _make_peer_info(self, accepts_messages: bool) -> PeerInfo:
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
            framed_name=self.framed_name if self.framed_name and self.framed_name != self.name else None,
        )

    def row(self) -> dict[str, Any]:
        """The JobRow of ``jobs``: never the token."""
        return {
            "id": self.id,
            "name": self.name,
            "framedName": self.framed_name or self.name,
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
            "workerPid": self.worker_pid,
            "hostPid": self.host_pid,
            "background": self.background,
            "backgroundShown": self.background_shown,
            "dialog": self.dialog,
            "attached": self.attach.shown() if self.attach is not None else None,
            "dialogOptions": self.dialog_options if self.dialog else None,
            "pending": len(self.queue.items),
            "parentSession": self.parent_session,
            "parentPeer": self.parent_peer,
            "rootSession": self.root_session,
            "depth": self.depth,
            "spawned": self.spawned,
            "undeliveredReport": self.undelivered_report is not None,
            "stoppedFrom": self.stopped_from,
            "usage": self.usage,
            "progress": self.progress,
            "workspace": self.workspace,
            "created": self.created,
            "updated": self.updated,
        }


_STR = (str,)
_OPT_STR = (str, type(None))
_NUMBER = (int, float)
_OPT_NUMBER = (int, float, type(None))
#: The type of each field of a job record (``scenario`` is any JSON). Required: the ones
#: without a default in :class:`Job`.
RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "id": _STR, "name": _STR, "host": _STR, "cwd": _STR, "session": _STR, "token": _STR, "task": _STR,
    "model": _OPT_STR, "thinking": _OPT_STR, "state": _STR, "status": _OPT_STR, "summary": _OPT_STR,
    "question": _OPT_STR, "error": _OPT_STR, "created": _NUMBER, "updated": _NUMBER,
    "parent_session": _OPT_STR, "parent_peer": _OPT_STR, "root_session": _OPT_STR, "depth": (int,),
    "spawned": (bool,), "worker_pid": (int, type(None)), "worker_create_time": _OPT_NUMBER, "crashes": (int,),
    "undelivered_report": (dict, type(None)), "dialog": (bool,), "dialog_options": (list, type(None)), "run_trace": _OPT_STR, "run_hops": (int,),
    "parent_streak": (int,), "ended_reported": (bool,), "handback_run": (int,), "run_causes": (list,),
    "run_broadcast_chain": (bool,), "usage": (dict, type(None)), "budget_told": (bool,), "watchers": (list,),
    "stopped_from": _OPT_STR, "request_key": _OPT_STR, "workspace": (dict, type(None)),
    "replySeq": (int,), "acked": (int,),
}
REQUIRED = ("id", "name", "host", "cwd", "session", "token", "task")
STATES = ("running", "idle", "needs_input", "done", "failed", "stopped")


def check_record(data: Any) -> None:
    """Raise ``ValueError`` naming the first thing that makes ``data`` no job record."""
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    for name in REQUIRED:
        if name not in data:
            raise ValueError(f"no {name!r}")
    for name, types in RECORD_TYPES.items():
        if name not in data:
            continue
        value = data[name]
        # bool is an int to Python, never to a record: only the bool fields take it.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ValueError(f"{name!r} is {value!r}, not {' or '.join(t.__name__ for t in types)}")
    if not data["id"] or not data["session"] or not data["token"]:
        raise ValueError("an empty id, session or token")
    if data.get("state", "idle") not in STATES:
        raise ValueError(f"state {data['state']!r} is not a job state")
    for name in ("depth", "crashes", "run_hops", "parent_streak", "handback_run", "replySeq", "acked"):
        if data.get(name, 0) < 0:
            raise ValueError(f"{name!r} is negative")
