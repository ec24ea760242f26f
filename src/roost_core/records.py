"""The attrs records that cross hook boundaries and the daemon's API.

Hooks take and return these records, never bare dicts or tuples, so a plugin author can
read every field's meaning here.
"""

from __future__ import annotations

from typing import Any

import attrs

#: Kinds of queued item. ``reply`` is user input (the task, CLI replies); the other two
#: come from agents.
ITEM_KINDS = ("reply", "message", "report")
AGENT_KINDS = ("message", "report")

#: Relations between two peers, as the reach plugin names them.
RELATIONS = ("parent", "child", "sibling", "tree", "external")

#: Job states.
JOB_STATES = ("running", "idle", "needs_input", "done", "failed", "stopped")


@attrs.frozen
class PeerInfo:
    """One peer as policy sees it: a background job or a connected foreground session.

    ``session`` is the routing key (the session file path, absolute) or None for a
    no-session foreground peer. ``root_session``/``parent_session`` link the tree.
    """

    id: str
    name: str
    kind: str  # "job" | "foreground"
    state: str
    session: str | None = None
    cwd: str | None = None
    host: str | None = None
    parent_session: str | None = None
    parent_peer: str | None = None
    root_session: str | None = None
    live: bool = False
    accepts_messages: bool = True
    status: str | None = None
    summary: str | None = None
    question: str | None = None


@attrs.frozen
class ReachDecision:
    """The answer of ``roost_decide_reach``.

    ``allowed`` False refuses the send (``reason`` says why, shown to the sender).
    ``relation`` is one of :data:`RELATIONS` and is framed into the envelope.
    """

    allowed: bool
    relation: str
    reason: str | None = None


@attrs.frozen
class Refusal:
    """A limit that refuses an action: a stable snake_case ``code`` and a message."""

    code: str
    message: str


@attrs.frozen
class OutgoingItem:
    """An agent item about to be queued: who sends it, to whom, what it says.

    ``relation`` is the sender as the receiver sees it (what the envelope says);
    ``hops`` counts the agent steps since the user or CLI input that began the chain.
    """

    sender: PeerInfo
    target: PeerInfo
    text: str
    kind: str  # "message" | "report"
    relation: str
    hops: int = 0


@attrs.frozen
class ToolDef:
    """An agent tool: name, short description, JSON-schema ``parameters``."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@attrs.frozen
class ToolResult:
    """What an agent tool call returned, before it is turned into text for the model.

    ``tool`` is the tool's name, ``ok`` False for an error (``code`` then says which),
    ``data`` the op's result fields.
    """

    tool: str
    ok: bool
    data: dict[str, Any] = attrs.field(factory=dict)
    code: str | None = None
    message: str | None = None


@attrs.frozen
class TranscriptEntry:
    """One line of a session file, as the render hook sees it.

    ``type`` is the entry type (``message``, ``custom_message``, ``session``...),
    ``role`` the message role where there is one, ``text`` its plain text,
    ``custom_type``/``details`` for custom messages, ``raw`` the whole parsed line.
    """

    type: str
    role: str | None = None
    text: str = ""
    custom_type: str | None = None
    details: dict[str, Any] = attrs.field(factory=dict)
    raw: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class HostSpec:
    """An agent host a plugin contributes: ``name`` (``--host NAME``) and a factory.

    ``factory`` is called in the worker process as ``factory(job, services)`` and returns
    an object implementing :class:`roost_core.hosts.base.AgentHost`. ``takes_messages``
    False means agents cannot message jobs on this host (as for ``shell``).
    """

    name: str
    factory: Any
    takes_messages: bool = True


# --------------------------------------------------------------------------- spawn and hand-back


@attrs.frozen
class SpawnRequest:
    """A spawn about to happen, with the counts the caps need.

    ``depth`` is the new child's depth (a root session's child has depth 1);
    ``live_children`` the parent's live children, ``live_in_tree`` the live sessions of the
    tree, ``live_spawned`` live spawned sessions overall (all before this spawn);
    ``tree`` names the tree (its root session, or ``peer:<id>``); ``hops`` is the chain
    length of the task item.
    """

    parent: PeerInfo
    depth: int
    live_children: int
    live_in_tree: int
    live_spawned: int
    tree: str
    hops: int = 0


@attrs.frozen
class RunCause:
    """One item written into a run: ``joined`` is True for an item steered in mid-run."""

    seq: int
    kind: str
    sender: str | None = None
    joined: bool = False


@attrs.frozen
class RunRecord:
    """A settled run of a job, as its worker tells it (aborted runs are never told)."""

    causes: tuple[RunCause, ...]
    state: str
    result: str = ""
    question: str | None = None
    error: str | None = None


#: The states a settled run can have (``roost_classify_settle`` answers one of them).
SETTLED_STATES = ("done", "idle", "needs_input", "failed")


@attrs.frozen
class Settlement:
    """How a settled run is classified (the answer of ``roost_classify_settle``).

    ``state`` is one of :data:`SETTLED_STATES`: ``done`` (a run that user input started
    or joined finished), ``idle`` (a run only agent items started finished),
    ``needs_input`` (the run ends waiting for an answer: ``question`` says what it asks)
    or ``failed`` (``error`` says why). ``reason`` says why, for logs and tests.
    """

    state: str
    question: str | None = None
    error: str | None = None
    reason: str | None = None


@attrs.frozen
class ReportDecision:
    """Whether a settled run reports to the parent; ``streak`` is the new count of
    parent-message runs in a row (kept on the job)."""

    report: bool
    streak: int = 0
    reason: str | None = None


@attrs.frozen
class Report:
    """A report from a spawned child to its parent. ``synthetic`` reports (state
    ``ended``) are made by the daemon when a child is stopped, removed or gives up."""

    child: PeerInfo
    state: str
    result: str = ""
    question: str | None = None
    error: str | None = None
    synthetic: bool = False
    reason: str | None = None


@attrs.frozen
class ReportCandidates:
    """Where a report could go: the live peer holding the parent session (or the
    no-session parent's connection), and the newest job record of that session."""

    parent_session: str | None
    parent_peer: str | None
    live_holder: PeerInfo | None = None
    session_job: PeerInfo | None = None


@attrs.frozen
class ReportRoute:
    """A routing decision. ``action``: ``deliver`` (to ``target``, now), ``queue`` (into
    the job ``target``'s queue; ``wake`` starts it if reaped or done), ``keep`` (on the
    child as ``undeliveredReport``, retried later) or ``drop``."""

    action: str
    target: str | None = None
    wake: bool = True
