"""Every roost hook spec, and nothing else.

Two kinds of hook: *decide* hooks (``firstresult=True``; they return a record or None and
the first non-None answer wins) and *contribute* hooks (every plugin adds something; the
core combines the list). Default implementations of decide hooks are registered with
``trylast=True`` so an installed team plugin wins. With a plugin blocked, the core does the
neutral, safe thing described on each spec.

One hook per decision: the daemon compiles the hooks it asks on every send once per
plugin set (``roost_core.policy.CompiledHooks``), so no decision needs a second, faster
shape. What each decision may depend on, and so whether the core may keep its answer,
is on its spec (``roost_core.pure`` marks a decision that follows from its arguments).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from roost_core.config import Config
    from roost_core.records import (
        DeliveryDecision,
        HostSpec,
        OutgoingItem,
        PeerInfo,
        ReachDecision,
        Refusal,
        Report,
        ReportCandidates,
        ReportDecision,
        ReportRoute,
        RunRecord,
        ScopePlan,
        ScopeRequest,
        Settlement,
        SpawnRequest,
        ToolDef,
        ToolResult,
        TranscriptEntry,
        TreeUsage,
        WatchDecision,
        WatchRequest,
        Workspace,
        WorkspaceMade,
        WorkspaceRemoval,
        WorkspaceRequest,
        WorkspaceState,
    )

hookspec = pluggy.HookspecMarker("roost")


# --------------------------------------------------------------------------- hosts


@hookspec
def roost_register_hosts() -> list[HostSpec]:
    """Contribute agent hosts (``roost start --host NAME``, ``roost_spawn``'s ``host``).

    Called in the daemon when it starts (the hosts jobs can run on), in each worker (to
    build the host that runs its job) and in the CLI (``--host``'s choices, ``roost log``
    and ``roost view`` reading a transcript, a host's own ``roost NAME ...`` command).
    Every host is registered here, roost's own too (``scripted``, ``shell``, ``pi`` and
    ``claude`` are default plugins of those names); the core names none.

    :return: a list of :class:`~roost_core.records.HostSpec`: how to run a job, how its
        transcript reads, its command. A name already registered by an earlier plugin
        (roost's defaults come first) is logged and ignored: block that plugin to put
        another host under its name.
    """


# --------------------------------------------------------------------------- reach


@hookspec(firstresult=True)
def roost_decide_reach(
    sender: PeerInfo, target: PeerInfo, addressed_by: str, config: Config
) -> ReachDecision | None:
    """Decide whether ``sender`` may reach ``target``, and what their relation is.

    Called for every ``send`` (for each candidate while a name is resolved, then for the
    target), for every peer a ``peers`` listing might show, and for every candidate of a
    broadcast. The answer may depend on anything (a file, the clock, a directory): the
    core asks again at every send and every listing, so a grant or a revocation counts
    from the next one. Only when *every* implementation is marked
    :func:`roost_core.pure` (its answer follows from the two records, ``addressed_by``
    and the config alone, as the default ``reach`` plugin's does) does the core keep the
    decisions, routes and listings made from them until any record of the peer table
    changes.

    :param sender: the peer bound to the calling connection.
    :param target: the candidate receiver.
    :param addressed_by: ``"id"`` (exact id), ``"name"`` (exact unique name), ``"list"``
        (building the ``peers`` answer) or ``"scope"`` (a broadcast's candidates).
    :param config: the user-level config (project config never reaches this hook).
    :return: a :class:`~roost_core.records.ReachDecision`, or None when this plugin has
        no opinion. Stops at the first non-None result. With no answer at all the core
        treats the target as not reachable.
    """


# --------------------------------------------------------------------------- limits


@hookspec
def roost_check_send(item: OutgoingItem, now: float, config: Config) -> Refusal | None:
    """Check an agent message before it is queued; count nothing here.

    Called on every plugin that implements it, for every ``send`` (and every receiver of a
    broadcast) that reach allowed, before anything is stored. Asked every time, never
    kept, so it may depend on anything: the clock, a file, the plugin's own counters.

    :param item: sender, target, text, kind and relation of the message.
    :param now: the daemon's clock: *monotonic* seconds, good for rate windows (and
        frozen in tests), not a time of day. A wall-clock policy (quiet hours) reads
        ``time.time()`` or ``datetime.datetime.now()`` (local time) itself.
    :param config: the user-level config.
    :return: a :class:`~roost_core.records.Refusal` to refuse the message, or None. The
        core refuses on the first refusal in the list; with no limits plugin, only the
        wire's frame limit applies.
    """


@hookspec
def roost_note_sent(item: OutgoingItem, now: float) -> None:
    """Count an agent message that was accepted (queued or delivered).

    Called on every plugin that implements it, once per ``send`` (and per receiver of a
    broadcast) that every ``roost_check_send`` passed and the receiver took: after that
    check with no other send checked in between, and before the item is durable, so a
    send pipelined right behind it on the same connection is already checked against it.
    A send refused (by any plugin, or a full queue) is never noted, so there is nothing
    to take back.

    :param item: the accepted item.
    :param now: the daemon's clock (monotonic seconds), the ``now`` its check was given.
    :return: ignored.
    """


@hookspec
def roost_check_spawn(request: SpawnRequest, now: float, config: Config) -> Refusal | None:
    """Check a spawn against the tree caps before the child exists.

    Called for every ``spawn`` (the tool or the op), with counts taken just before it.

    :param request: the parent, the child's depth and the live counts of its tree.
    :param now: the daemon's clock (monotonic seconds), so rate windows are testable.
    :param config: the user-level config (caps are never read from project config).
    :return: a :class:`~roost_core.records.Refusal` naming the cap, or None. The core
        refuses on the first refusal; with no limits plugin there are no caps.
    """


@hookspec
def roost_note_spawned(request: SpawnRequest, now: float) -> None:
    """Observe a spawn that happened (to count spawns per tree per minute).

    :param request: the request that was accepted.
    :param now: the daemon's clock.
    :return: ignored.
    """


# --------------------------------------------------------------------------- envelope


@hookspec(firstresult=True)
def roost_sanitize_name(name: str) -> str | None:
    """Make a peer name safe to put inside an envelope attribute: its framed form.

    Called when a foreground peer registers (its name is kept framed), when a job is
    named or loaded (a job keeps its name as typed; the framed form is what lookups and
    the name rule take as well), and when an envelope is framed.

    :param name: the name as given by a user or an agent.
    :return: the sanitised name, or None for no opinion. Stops at the first non-None
        result. The core's fallback keeps only ``[A-Za-z0-9_ .:@/-]``.
    """


@hookspec(firstresult=True)
def roost_frame_item(item: OutgoingItem) -> str | None:
    """Frame an agent item as the text the receiving agent will see.

    Called once when a message, report or notice is accepted, before it takes a seq; the
    framed text is what is stored and delivered (the receiver never re-frames it). The
    core checks it against the envelope's rules (:mod:`roost_core.envelope_rules`: the
    notice ends it, the body can neither close the frame nor forge a sender, no control
    or bidi character in the sender line), calling the hook a second time with a probe
    body to tell the frame from the body; a text that breaks them refuses the item with
    ``plugin_error`` and a log line.

    :param item: the item; ``item.sender.name`` is a job's name as typed (a foreground
        peer's is sanitised): sanitise it before writing it.
    :return: the framed text, or None for no opinion. Stops at the first non-None result.
        The core's fallback is a plain frame that neutralises ``<`` and still carries the
        no-user-authority notice.
    """


# --------------------------------------------------------------------------- settle


@hookspec(firstresult=True)
def roost_classify_settle(run: RunRecord, host: str) -> Settlement | None:
    """Classify a run that settled: done, idle, needs input (with its question) or failed.

    Called in the worker once per settled run (never for an aborted one), before the
    daemon hears of it, so the job's state, its question, the parent's report and every
    view tell the same story.

    :param run: the run as its host settled it: ``state`` is the host's own (``done`` or
        ``idle`` for a run that ended normally, ``needs_input`` when the host knows it
        asks, as the scripted host's ``ask`` step does, ``failed`` with ``error``),
        ``result`` the run's whole final assistant text, ``causes`` what started and
        joined it.
    :param host: the job's agent host (``pi``, ``scripted``...).
    :return: a :class:`~roost_core.records.Settlement`, or None for no opinion. Stops at
        the first non-None result. With no answer (or one whose state is not a settled
        state) the host's own state, question and error stand.
    """


# --------------------------------------------------------------------------- hand-back


@hookspec(firstresult=True)
def roost_decide_report(child: PeerInfo, run: RunRecord, streak: int) -> ReportDecision | None:
    """Decide whether a settled run of a spawned child reports to its parent.

    Called once per settled run (the worker tells every settle except aborted ones),
    only for jobs that have a parent.

    :param child: the child job.
    :param run: what started and joined the run (``causes``), and how it settled.
    :param streak: how many runs in a row were started by the parent's messages.
    :return: a :class:`~roost_core.records.ReportDecision`, or None for no opinion.
        Stops at the first non-None result. With no answer there is no report.
    """


@hookspec(firstresult=True)
def roost_format_report(report: Report) -> str | None:
    """The body of a report, before the envelope frames it.

    :param report: the child, its settled state, final text, question or error.
    :return: the text, or None for no opinion. Stops at the first non-None result. The
        core's fallback is ``state: STATE`` followed by the result.
    """


@hookspec(firstresult=True)
def roost_route_report(report: Report, candidates: ReportCandidates) -> ReportRoute | None:
    """Choose where a report goes.

    Called when a report is made, and again for a kept report when a peer registers for
    the parent session or a job for it starts.

    :param report: the report.
    :param candidates: the live holder of the parent session and its newest job record.
    :return: a :class:`~roost_core.records.ReportRoute`, or None for no opinion. Stops at
        the first non-None result. With no answer the report is kept on the child.
    """


@hookspec(firstresult=True)
def roost_report_on_end(child: PeerInfo, reason: str) -> Report | None:
    """The synthetic report for a spawned child whose run did not settle.

    Called when a spawned child is stopped or removed, when its worker dies during a run
    and nothing else waits for it, and when roost gives up restarting it after crashes.

    :param child: the child job.
    :param reason: ``stopped``, ``removed``, ``crashed`` (not running now; a message starts
        it again) or ``gave_up`` (crashed again and again with items waiting; a message
        starts it again): see :class:`~roost_core.records.Report`.
    :return: a :class:`~roost_core.records.Report` (state ``ended`` for a stop or a
        removal, ``failed`` for a crash) to route, or None. The core fills in the crash
        facts (``error``, ``crashes``). Stops at the first non-None result. With no answer
        no report is sent.
    """


# --------------------------------------------------------------------------- rendering


@hookspec(firstresult=True)
def roost_render_entry(entry: TranscriptEntry) -> str | None:
    """Render one transcript entry for a person (``roost log``, the view).

    :param entry: the parsed session-file line.
    :return: the text to show, ``""`` to hide the entry, or None for no opinion. Stops at
        the first non-None result. The core's fallback prints ``role: text``.
    """


# --------------------------------------------------------------------------- tools


@hookspec
def roost_tool_definitions(config: Config, hosts: Sequence[str]) -> list[ToolDef]:
    """Contribute the agent tools every session gets (``roost_agents``, ``roost_send``...).

    Called when a worker or a foreground bridge asks the daemon for its tools (op
    ``tools``), so a change here reaches every host with no change to the host.

    :param config: the user-level config (``agentTools: false`` turns the tools off).
    :param hosts: the names of the hosts a job can run on here (every host the plugins
        register, ``roost_register_hosts``), for a tool that lets the agent choose one
        (``roost_spawn``'s ``host``). An implementation may leave the parameter out.
    :return: a list of :class:`~roost_core.records.ToolDef`; an empty list (or no
        tools plugin) means the agent gets no roost tools.
    """


@hookspec(firstresult=True)
def roost_format_tool_result(result: ToolResult) -> str | None:
    """Turn a tool's outcome into the text the model reads.

    :param result: the tool name, ok flag and the op's result or error.
    :return: the text, or None for no opinion. Stops at the first non-None result. The
        core's fallback is the result as compact JSON.
    """


# --------------------------------------------------------------------------- broadcast


@hookspec(firstresult=True)
def roost_plan_broadcast(request: ScopeRequest, config: Config) -> ScopePlan | None:
    """Choose the receivers of a broadcast (``roost_send`` to ``*children``,
    ``*siblings`` or ``*tree``), or refuse it.

    Called once per broadcast, before anything is queued. The core offers only peers that
    reach allows inside the sender's tree (never an external one); each receiver then gets
    its own item, checked by ``roost_check_send`` (rate, hops) like any message.

    :param request: the sender, the scope named, the peers it may reach in its tree with
        their relations, and whether its run is in a chain that already holds a broadcast.
    :param config: the user-level config.
    :return: a :class:`~roost_core.records.ScopePlan` (receivers taken from
        ``request.reachable``, or a refusal), or None for no opinion. Stops at the first
        non-None result. With no answer the core refuses every broadcast (``unreachable``).
    """


# --------------------------------------------------------------------------- delivery


@hookspec(firstresult=True)
def roost_decide_delivery(item: OutgoingItem, config: Config) -> DeliveryDecision | None:
    """Decide how an agent item reaches a receiver that is in the middle of a run.

    Called once per accepted item (message, report, notice) before it is queued.
    ``steer`` puts it in before the receiver's next model call; ``followUp`` holds it
    until the receiver's current run has ended, then starts the next run with it. An idle
    receiver starts a run with it either way.

    :param item: the item; ``item.urgent`` is the sender's ``urgent`` flag (None: not given).
    :param config: the user-level config (``agentDelivery``).
    :return: a :class:`~roost_core.records.DeliveryDecision`, or None for no opinion.
        Stops at the first non-None result. With no answer the core steers (the spec's
        delivery).
    """


# --------------------------------------------------------------------------- watch


@hookspec(firstresult=True)
def roost_decide_watch(request: WatchRequest, config: Config) -> WatchDecision | None:
    """Decide whether a session may watch a peer: be told once, by a ``notice``, when
    that peer settles a run, asks a question or ends.

    Called for ``roost_agents`` with ``watch`` (op ``peers``), after the target is
    resolved and before the watch is kept. A watch fires once and ends with the watcher.

    :param request: the watcher, the target with its relation, how many watches the
        watcher holds, its chain length.
    :param config: the user-level config.
    :return: a :class:`~roost_core.records.WatchDecision`, or None for no opinion. Stops
        at the first non-None result. With no answer the core keeps no watch
        (``unreachable``).
    """


# --------------------------------------------------------------------------- budget


@hookspec
def roost_check_budget(usage: TreeUsage, config: Config) -> Refusal | None:
    """Check what a session tree has spent against its budget.

    Called before every ``send`` and ``spawn`` from a session in the tree, and each time a
    job of the tree reports more usage (the first refusal then tells the tree's running
    sessions and its root, once).

    :param usage: the tree's tokens and cost, summed from its jobs' usage records.
    :param config: the user-level config (budgets are never read from project config).
    :return: a :class:`~roost_core.records.Refusal` when the budget is spent, or None.
        The core refuses on the first refusal; with no budget plugin there is no budget.
        The answer must follow from ``usage`` and ``config``: the daemon keeps each
        tree's answer until a job's usage or the set of jobs changes.
    """


# --------------------------------------------------------------------------- workspaces


@hookspec(firstresult=True)
def roost_make_workspace(request: WorkspaceRequest) -> WorkspaceMade | None:
    """Make a new job's own workspace: a checkout of the spawner's repository on a branch
    of its own, from its last commit (a git worktree with roost's default ``workspace``
    plugin; a team on another version control answers with its own).

    Called in the daemon, off its event loop, once per ``spawn`` or ``start`` asked for
    ``workspace: "worktree"``, after the spawn's checks and before the job exists (one
    call at a time). It may change the repository (a new branch, a new worktree) but must
    never change the spawner's checkout: its files, index and stash.

    :param request: the folder the job would have worked in, the job's name, the base
        (``head`` or ``carry``) and roost's state folder.
    :return: a :class:`~roost_core.records.WorkspaceMade`: the workspace made, or a
        refusal whose code refuses the spawn (``not_a_repo``, ``workspace_taken``...);
        None for no opinion. Stops at the first non-None result. With no answer the spawn
        is refused ``not_a_repo``.
    """


@hookspec(firstresult=True)
def roost_describe_workspace(workspace: Workspace) -> WorkspaceState | None:
    """Say what a job's workspace holds now: its branch's commits since the base, which
    of them no other branch holds, the diffstat against the base, uncommitted changes.

    Called in the daemon, off its event loop, when a job with a workspace hands back a
    run (the report carries the answer), ends without one (stopped, crashed), and before
    ``remove`` deletes anything (work not merged refuses the removal ``unmerged_work``).

    :param workspace: the workspace as its plugin made it (answer only for your own
        ``vcs``).
    :return: a :class:`~roost_core.records.WorkspaceState`, or None for no opinion. Stops
        at the first non-None result. With no answer a report says nothing of the
        workspace, and ``remove`` keeps it (nothing is deleted that no plugin vouched for).
    """


@hookspec(firstresult=True)
def roost_remove_workspace(workspace: Workspace, force: bool) -> WorkspaceRemoval | None:
    """Remove a job's workspace with its job (``roost rm``).

    Called in the daemon, off its event loop, once the job's worker is gone, unless the
    user kept the workspace (``keepWorkspace``). Without ``force`` nothing that holds
    work may go: a workspace with uncommitted changes is kept, a branch with a commit no
    other branch holds is kept (say why in ``kept``); a branch that holds nothing new is
    deleted with its workspace.

    :param workspace: the workspace (answer only for your own ``vcs``).
    :param force: the user said to drop the work too (``roost rm --force``): remove the
        workspace and its branch whatever they hold.
    :return: a :class:`~roost_core.records.WorkspaceRemoval`, or None for no opinion.
        Stops at the first non-None result. With no answer the workspace is kept.
    """
