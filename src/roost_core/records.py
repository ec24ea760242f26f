"""The records that cross hook boundaries and the daemon's API: attrs classes, and a
msgspec struct for the one made per message.

Hooks take and return these records, never bare dicts or tuples, so a plugin author can
read every field's meaning here.
"""

from __future__ import annotations

from typing import Any

import attrs
import msgspec

#: Kinds of queued item. ``reply`` is user input (the task, CLI replies); the others
#: come from agents (``notice``: a watch that fired, or the daemon telling a tree that its
#: budget is spent).
ITEM_KINDS = ("reply", "message", "report", "notice")
AGENT_KINDS = ("message", "report", "notice")
#: The custom message type of an agent item in a session file (pi's ``customType``).
AGENT_MESSAGE_TYPE = "pi-roost-agent-message"

#: How an agent item reaches a busy receiver: ``steer`` (before its next model call) or
#: ``followUp`` (once its current run has ended).
DELIVERY_MODES = ("steer", "followUp")

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
    #: The name as an envelope frames it (``roost_sanitize_name``), when it differs from
    #: ``name`` (kept as typed): a target is found by either.
    framed_name: str | None = None


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


# A msgspec struct, not an attrs class: one is made per send, and a struct is built in C
# (an attrs class runs a Python __init__). Frozen and compared by its fields all the same;
# no cycle can pass through it, so the garbage collector need not track it.
class OutgoingItem(msgspec.Struct, frozen=True, gc=False):
    """An agent item about to be queued: who sends it, to whom, what it says.

    ``relation`` is the sender as the receiver sees it (what the envelope says);
    ``hops`` counts the agent steps since the user or CLI input that began the chain.
    ``id`` is the message id (one per ``send`` call: every receiver of a broadcast gets
    the same), ``reply_to`` the id of the message it answers (already checked to be an
    id), ``scope`` the broadcast scope it is part of (None for one receiver),
    ``broadcast_chain`` whether its chain already holds a broadcast, ``urgent`` the
    sender's choice of delivery (None: not given).
    """

    sender: PeerInfo
    target: PeerInfo
    text: str
    kind: str  # "message" | "report" | "notice"
    relation: str
    hops: int = 0
    id: str | None = None
    reply_to: str | None = None
    scope: str | None = None
    broadcast_chain: bool = False
    urgent: bool | None = None


@attrs.frozen
class ToolDef:
    """An agent tool, declared once: its name, short description and JSON-schema
    ``parameters`` (what every host shows the model), and ``run``, the code the daemon runs
    for a call of it: ``run(call)`` with a :class:`ToolCall` returns the result's data (a
    JSON object), or an awaitable of it, or raises ``ProtocolError`` for a refusal. The
    text the model reads is made from that data (``roost_format_tool_result``). A tool with
    no ``run`` is not offered (the daemon logs it once)."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Any = attrs.field(default=None, eq=False, repr=False)
    #: Why a field the model may know of is not offered now (left out of ``parameters``,
    #: e.g. ``roost_spawn``'s ``host`` when no host may be chosen), by field name: a call
    #: that gives it is refused with this reason rather than a bare "unknown field".
    absent: dict[str, str] = attrs.field(factory=dict, eq=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@attrs.frozen
class ToolCall:
    """One call of an agent tool, as its ``run`` gets it.

    ``caller`` is the calling session as policy sees it (authenticated by its connection,
    never an argument); ``args`` the arguments, checked against the tool's ``parameters``
    (types, required, no unknown ones, enums); ``roost`` what the tool may ask of the
    daemon on the caller's behalf, with the caller's reach and limits
    (:class:`ToolServices`)."""

    caller: PeerInfo
    args: dict[str, Any]
    roost: ToolServices


class ToolServices:
    """What a tool's ``run`` may ask of the daemon, as the calling session (the daemon
    gives each call its own). Every method is a coroutine and answers as the op of the
    same name does (the result's fields; ``ProtocolError`` for a refusal), with that op's
    checks: reach, limits, envelope, the op's own argument limits."""

    async def peers(self, watch: str | None = None) -> dict[str, Any]:
        """The peers the caller may reach (op ``peers``): ``{self, peers, sent, watch}``."""
        raise NotImplementedError

    async def send(self, to: str, message: str, reply_to: str | None = None, urgent: bool | None = None) -> dict[str, Any]:
        """Send an agent message from the caller (op ``send``)."""
        raise NotImplementedError

    async def spawn(self, task: str, **fields: Any) -> dict[str, Any]:
        """Start a child of the caller (op ``spawn``; ``name``, ``cwd``, ``model``,
        ``thinking``, ``host``: the host is the agent's choice, checked by the limits)."""
        raise NotImplementedError

    async def transcript(self, peer: str, last: int = 20) -> list[TranscriptEntry]:
        """The last ``last`` entries of a peer's transcript, if the caller may reach it
        (``unreachable`` otherwise): what a tool may show of a peer's work."""
        raise NotImplementedError


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
class HostCommand:
    """A host's own command line, ``roost NAME ACTION ...`` (NAME is the host's name): its
    install command, for one.

    ``help`` is its line in ``roost --help``. ``add_arguments(parser)`` adds its arguments
    to the :class:`argparse.ArgumentParser` the CLI made for ``roost NAME``. ``run(args)``
    runs it with the parsed arguments and returns the exit status: 0 done, 1 an error
    (one ``roost: CODE: message`` line on stderr), 2 a usage error.
    """

    help: str
    add_arguments: Any
    run: Any


@attrs.frozen
class HostSpec:
    """An agent host a plugin contributes: ``name`` (``--host NAME``) and a factory.

    Every host, roost's own (``scripted``, ``shell``, ``pi``, ``claude``) and a team's, is
    one of these, contributed through ``roost_register_hosts``; the core names none.

    ``factory`` is called in the worker process as ``factory(job, services)`` and returns
    an object implementing :class:`roost_core.hosts.base.AgentHost`. ``takes_messages``
    False means agents cannot message jobs on this host (as for ``shell``).
    ``session_file``, when set, is called in the daemon as ``session_file(cwd)`` for a new
    job's session path, for an agent that decides where its transcript lives (Claude
    Code); without it the job's session is a file in roost's own sessions folder.
    ``unavailable``, when set, is called in the daemon as ``unavailable()`` before a job
    is made on the host: None when it can run here, else a sentence saying why not (its
    program is not installed); the ``start`` or ``spawn`` is then refused ``no_host``.

    How its transcript reads, for a host that writes its own format (without them, the
    session file is read as roost's own, pi's v3 JSONL, :mod:`roost_core.transcript`):
    ``transcript_entries(raw)`` turns one parsed line (a JSON object) into the
    :class:`TranscriptEntry` records ``roost log``, ``roost view`` and the tools' peer
    transcripts render (none for a line that shows nothing); ``transcript_seqs(path)`` is
    the queue seqs a session file holds (what the daemon reads of a worker that died with
    it). ``transcript_lines(path)``, for a host whose session is not the one JSONL file
    ``path`` (an agent that starts another file when it resumes, or keeps a database), is
    every parsed line of the session, in order, as ``transcript_entries`` reads them
    (``roost log``, the view and peer transcripts read the session through it).
    ``command`` is the host's ``roost NAME ...`` command (:class:`HostCommand`).

    ``scenario``, for a host that plays a script instead of asking a model (``scripted``),
    is called in the daemon as ``scenario(given, cwd, parent)`` at every ``start``
    (``parent`` None) and ``spawn`` (``parent``: the spawning job's scenario and the
    child's model, a pair), before the job is made: it returns the scenario the job runs
    (``given``, or a child's own when none was given) or raises ``ValueError`` saying why
    it cannot be played (the request is refused ``bad_args``, so no worker dies at start
    again and again). Without it, a ``scenario`` argument is kept as it is.

    How the daemon picks a host no one named (the core names none): ``default_agent``
    True offers the host to a ``start`` that names none when no ``defaultHost`` is set
    (the first such host that can run here is taken; roost's ``pi``); ``stand_in`` True
    makes it the host of a spawn from a session that has no host of its own (the Python
    foreground API) when no ``defaultHost`` is set, and the one a refused ``start`` names
    to run without a model (roost's ``scripted``). ``warm_pool`` True lets the daemon keep
    warm workers of the host whose process adopts a job's session when one is taken
    (``piPool*`` settings; roost's ``pi``, through pi's ``switch_session``).

    How ``roost attach`` opens a job's session in the host's own interactive interface
    (:mod:`roost_core.attach`): ``attach``, when set, is called in the ``roost attach``
    process as ``attach(job)`` (a :class:`~roost_core.hosts.base.JobInfo`) and returns an
    :class:`AttachPlan`, the command run in the user's terminal; without it the host has no
    interactive interface and ``attach`` is refused ``not_attachable``.
    ``attach_interrupts`` True means the host's worker can interrupt a run the way the
    CLI's own interrupt does (``roost attach --now``; the host's ``interrupt()``).
    """

    name: str
    factory: Any
    takes_messages: bool = True
    session_file: Any = None
    unavailable: Any = None
    transcript_entries: Any = None
    transcript_seqs: Any = None
    transcript_lines: Any = None
    command: HostCommand | None = None
    scenario: Any = None
    default_agent: bool = False
    stand_in: bool = False
    warm_pool: bool = False
    attach: Any = None
    attach_interrupts: bool = False


@attrs.frozen
class AttachPlan:
    """What ``roost attach`` runs in the user's terminal for a job (a host's ``attach``):
    ``argv``, with ``env`` added to its environment, in the job's cwd. The roost side of
    the interactive session (pi's extension, ``roost mcp``) reads ``ROOST_ATTACH_JOB`` and
    ``ROOST_ATTACH_TOKEN`` (set by ``roost attach``) and registers as the job itself."""

    argv: list[str]
    env: dict[str, str] = attrs.field(factory=dict)


# --------------------------------------------------------------------------- spawn and hand-back


@attrs.frozen
class SpawnRequest:
    """A spawn about to happen, with the counts the caps need.

    ``depth`` is the new child's depth (a root session's child has depth 1);
    ``live_children`` the parent's live children, ``live_in_tree`` the live sessions of the
    tree, ``live_spawned`` live spawned sessions overall (all before this spawn);
    ``tree`` names the tree (its root session, or ``peer:<id>``); ``hops`` is the chain
    length of the task item. ``host`` is the host the agent chose for the child with the
    tool's ``host`` parameter, None when it chose none (the child runs its parent's host).
    """

    parent: PeerInfo
    depth: int
    live_children: int
    live_in_tree: int
    live_spawned: int
    tree: str
    hops: int = 0
    host: str | None = None


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


def workspace_state(value: WorkspaceState | dict[str, Any] | None) -> WorkspaceState | None:
    """A :class:`WorkspaceState`, or None, from itself or from its JSON (a report kept on
    its child is stored as JSON and made again from it)."""
    if value is None or isinstance(value, WorkspaceState):
        return value
    return WorkspaceState.from_json(value)


@attrs.frozen
class Report:
    """A report from a spawned child to its parent. ``synthetic`` reports are made by the
    daemon, not by a settled run: state ``ended`` when the child is stopped or removed,
    state ``failed`` when its worker crashed during a run.

    ``reason`` says what happened and so what the child does next (a report must never
    tell a parent a child is gone when a message would start it again):

    - ``stopped``: stopped by the user; it runs again only if the user replies to it
      (an agent's message does not wake it).
    - ``removed``: removed by the user; it is gone.
    - ``crashed``: its worker died during a run and nothing else waits for it; it is not
      running, and a message starts it again.
    - ``gave_up``: its worker crashed ``crashes`` times in a row with items waiting, and
      roost stopped restarting it; a message starts it again.
    - ``restarted`` (a settled-run report of state ``failed``, not synthetic): its worker
      died during the run and was started again for the items waiting for it.
    """

    child: PeerInfo
    state: str
    result: str = ""
    question: str | None = None
    error: str | None = None
    synthetic: bool = False
    reason: str | None = None
    #: The report's message id, made once: a report routed again (kept on the child, put
    #: back from a parent that left before acking it) keeps it, so the parent's side can
    #: tell a second copy of one it holds.
    id: str | None = None
    #: How many times in a row its worker crashed (``crashed``, ``gave_up``).
    crashes: int = 0
    #: The child's own workspace as the run left it (its branch, commits and diffstat
    #: against the base), for a child spawned with ``workspace: "worktree"``; None else.
    workspace: WorkspaceState | None = attrs.field(default=None, converter=workspace_state)


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


# --------------------------------------------------------------- broadcast, delivery, watch, budget


@attrs.frozen
class ReachablePeer:
    """A peer the sender may reach, with its relation as the sender sees it."""

    peer: PeerInfo
    relation: str


@attrs.frozen
class ScopeRequest:
    """A broadcast about to be planned.

    ``scope`` is what followed the ``*`` in ``to`` (not checked yet); ``reachable`` every
    peer reach allows *inside the sender's tree* (external peers are never offered);
    ``broadcast_chain`` is True when the sender's run took in anything from a chain that
    already holds a broadcast; ``hops`` is the sender's chain length.
    """

    sender: PeerInfo
    scope: str
    reachable: tuple[ReachablePeer, ...]
    broadcast_chain: bool = False
    hops: int = 0


@attrs.frozen
class ScopePlan:
    """The answer of ``roost_plan_broadcast``: the receivers (each one of the offered
    peers), or a refusal of the whole broadcast."""

    receivers: tuple[ReachablePeer, ...] = ()
    refusal: Refusal | None = None


@attrs.frozen
class DeliveryDecision:
    """How an agent item reaches a busy receiver: ``mode`` is one of :data:`DELIVERY_MODES`."""

    mode: str


@attrs.frozen
class WatchRequest:
    """A session asks to be told once when ``target`` settles, asks or ends.

    ``relation`` is the target as the watcher sees it; ``active`` how many watches the
    watcher holds already; ``hops`` the watcher's chain length.
    """

    watcher: PeerInfo
    target: PeerInfo
    relation: str
    active: int = 0
    hops: int = 0


@attrs.frozen
class WatchDecision:
    """The answer of ``roost_decide_watch``: ``allowed``, or the ``refusal`` that says why not."""

    allowed: bool
    refusal: Refusal | None = None


@attrs.frozen
class TreeUsage:
    """What one session tree has spent: the sum of its jobs' usage as their hosts
    report it (tokens: input + output, cache included; cost in the host's currency, 0
    when it reports none).

    ``tree`` names the tree (its root session, or ``peer:<id>``); ``jobs`` counts the
    jobs summed.
    """

    tree: str
    tokens: int = 0
    cost: float = 0.0
    jobs: int = 0


# --------------------------------------------------------------------------- workspaces


#: Where a child works: ``shared`` (the spawner's folder, as it is) or ``worktree`` (a new
#: workspace of the spawner's repository, on a branch of its own: ``roost_make_workspace``).
WORKSPACE_KINDS = ("shared", "worktree")
#: What a new workspace starts from: ``head`` (the spawner's last commit) or ``carry``
#: (that commit plus the spawner's uncommitted changes, which stay in the spawner's checkout).
WORKSPACE_BASES = ("head", "carry")


@attrs.frozen
class WorkspaceRequest:
    """A workspace to make for a new job (``roost_spawn`` or ``start`` with
    ``workspace: "worktree"``).

    ``cwd`` is the folder the job would have worked in (the spawner's; ``start``'s
    ``cwd``): the repository is the one it is in. ``name`` is the job's name (as typed;
    a plugin makes its branch name from it), ``base`` one of :data:`WORKSPACE_BASES`,
    ``state_dir`` roost's state folder (where a plugin may keep workspaces).
    """

    cwd: str
    name: str
    base: str = "head"
    state_dir: str = ""


@attrs.frozen
class Workspace:
    """A job's own workspace, as its plugin made it and as the job record keeps it.

    ``path`` is the workspace's root (a git worktree's top folder), ``cwd`` the folder the
    job works in (the same subfolder of ``path`` as the spawner's cwd was of its
    repository), ``branch`` the branch the job's commits go on, ``base`` the commit it
    started from (a full id), ``repo`` the repository's own top folder (the spawner's
    checkout), ``vcs`` which plugin made it (``git``: a plugin answers only for its own),
    ``carried`` whether the spawner's uncommitted changes were carried in, ``notes``
    what the spawner should know of it (its own uncommitted changes left behind, a
    submodule not checked out).
    """

    path: str
    cwd: str
    branch: str
    base: str
    repo: str
    vcs: str = "git"
    carried: bool = False
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Workspace:
        return cls(**{**data, "notes": tuple(data.get("notes") or ())})


@attrs.frozen
class WorkspaceMade:
    """The answer of ``roost_make_workspace``: the workspace, or the refusal that says why
    none could be made (its ``code`` is the error the spawn is refused with)."""

    workspace: Workspace | None = None
    refusal: Refusal | None = None


@attrs.frozen
class WorkspaceCommit:
    """One commit of a workspace's branch: its short id and its subject line."""

    id: str
    subject: str


@attrs.frozen
class WorkspaceState:
    """What a workspace holds now (``roost_describe_workspace``): what a report tells the
    parent and what ``remove`` checks before it deletes anything.

    ``exists`` False: the workspace's folder is gone (the other fields then say what the
    branch still holds). ``head`` is the branch's last commit, ``commits`` its commits
    since the base (newest first, at most a few; ``commit_count`` counts them all),
    ``unmerged`` how many of them no other branch holds (work only this branch keeps),
    ``diffstat`` the base-to-branch diffstat (``git diff --stat``: a line per file, the
    summary last), ``uncommitted`` the changes not committed in the workspace (one short
    status line each, ``M notes.txt``).
    """

    workspace: Workspace
    exists: bool = True
    head: str | None = None
    commits: tuple[WorkspaceCommit, ...] = ()
    commit_count: int = 0
    unmerged: int = 0
    diffstat: str = ""
    uncommitted: tuple[str, ...] = ()

    @property
    def holds_work(self) -> bool:
        """Whether removing it would lose something: commits no other branch holds, or
        changes never committed."""
        return self.unmerged > 0 or bool(self.uncommitted)

    def to_json(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace.to_json(),
            "exists": self.exists,
            "head": self.head,
            "commits": [{"id": commit.id, "subject": commit.subject} for commit in self.commits],
            "commitCount": self.commit_count,
            "unmerged": self.unmerged,
            "diffstat": self.diffstat,
            "uncommitted": list(self.uncommitted),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkspaceState:
        return cls(
            workspace=Workspace.from_json(data["workspace"]),
            exists=bool(data.get("exists", True)),
            head=data.get("head"),
            commits=tuple(WorkspaceCommit(str(c["id"]), str(c["subject"])) for c in data.get("commits") or ()),
            commit_count=int(data.get("commitCount", 0)),
            unmerged=int(data.get("unmerged", 0)),
            diffstat=str(data.get("diffstat", "")),
            uncommitted=tuple(data.get("uncommitted") or ()),
        )


@attrs.frozen
class WorkspaceRemoval:
    """The answer of ``roost_remove_workspace``: what was removed and what was kept.

    ``removed`` the workspace's folder is gone, ``branch_deleted`` its branch is gone
    (``tip`` was its last commit: ``git branch BRANCH TIP`` brings it back while git keeps
    the commit), ``kept`` why something was left (work found that is not merged, a
    folder git would not remove), None when nothing was.
    """

    removed: bool
    branch_deleted: bool = False
    tip: str | None = None
    kept: str | None = None
