"""A pytest plugin for roost plugin authors (entry point ``pytest11: roost``).

Installed with roost, so a team's plugin test needs no conftest and no import for the
fixture. A test is three lines::

    from roost_core.testing import make_config, make_peer

    def test_our_reach_wins(roost_plugin_manager):
        pm = roost_plugin_manager(OurReach(), defaults=True)
        decision = pm.hook.roost_decide_reach(
            sender=make_peer(), target=make_peer(id="b2"), addressed_by="name",
            config=make_config())
        assert decision.allowed

Each manager is fresh: the specs and only the plugins given (``defaults=True`` adds
roost's default plugins, to test that yours wins over them). Call hooks with keywords,
as pluggy requires. The ``make_*`` helpers build every record a hook takes, with test
defaults that a keyword overrides; :func:`load_plugin` loads your installed entry point,
to test your packaging too; :func:`daemon_hooks` asks the hooks as the daemon does on
every send and listing, and says whether it may keep your reach decisions::

    hooks = daemon_hooks(roost_plugin_manager(OurReach(), defaults=True))
    assert hooks.decide_reach(make_peer(), make_peer(id="b2"), "name", make_config()).allowed
    assert not hooks.reach_pure  # OurReach reads a file: not marked roost_core.pure

A host plugin runs roost's host conformance suite (:mod:`roost_core.conformance`) on its
host through a :class:`HostDriver` its test kit implements: how to make the fake model
server for it, which arguments start a job on it, how to read what the model received
(as :class:`ModelInput` pieces). See :mod:`roost_core.conformance` for the fixture.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from roost_core.config import Config
from roost_core.conformance import HostDriver, HostUnderTest, ModelInput, RoostDaemon
from roost_core.records import (
    OutgoingItem,
    PeerInfo,
    ReachablePeer,
    Report,
    ReportCandidates,
    RunCause,
    RunRecord,
    ScopeRequest,
    SpawnRequest,
    ToolResult,
    TranscriptEntry,
    TreeUsage,
    WatchRequest,
    Workspace,
    WorkspaceRequest,
)

if TYPE_CHECKING:
    import pluggy

    from roost_core.policy import CompiledHooks

__all__ = [
    "HostDriver",
    "HostUnderTest",
    "ModelInput",
    "RoostDaemon",
    "daemon_hooks",
    "load_plugin",
    "make_candidates",
    "make_cause",
    "make_child",
    "make_config",
    "make_entry",
    "make_item",
    "make_manager",
    "make_peer",
    "make_report",
    "make_run",
    "make_scope_request",
    "make_spawn_request",
    "make_tool_result",
    "make_tree_usage",
    "make_watch_request",
    "make_workspace",
    "make_workspace_request",
    "roost_plugin_manager",
]


def make_manager(*plugins: object, defaults: bool = False, disabled: Iterable[str] = ()) -> pluggy.PluginManager:
    """A fresh manager holding the specs and only ``plugins`` (modules or instances).

    A module exposing ``plugin`` registers that instance, as the real manager does. A
    ``(name, plugin)`` pair registers under that name (the block name). With
    ``defaults=True`` roost's default plugins are registered first (minus ``disabled``),
    so you can check that your plugin wins over them whatever the order; a stateful
    default gets a fresh instance. No entry point is ever loaded: what else is installed
    cannot change the test.
    """
    from roost_core.plugins import DEFAULT_PLUGINS, new_manager, plugin_object

    pm = new_manager()
    for name in disabled:
        pm.set_blocked(name)
    if defaults:
        for name, module_name in DEFAULT_PLUGINS.items():
            if pm.is_blocked(name):
                continue
            module = importlib.import_module(module_name)
            # A stateful default (limits' rate counters) gets a fresh instance, so tests
            # never share counters through the module's one shared instance.
            shared = getattr(module, "plugin", None)
            pm.register(type(shared)() if shared is not None else module, name=name)
    for plugin in plugins:
        given_name: str | None = None
        if isinstance(plugin, tuple) and len(plugin) == 2 and isinstance(plugin[0], str):
            given_name, plugin = plugin
        pm.register(plugin_object(plugin) if isinstance(plugin, ModuleType) else plugin, name=given_name)
    pm.check_pending()
    return pm


@pytest.fixture
def roost_plugin_manager() -> Callable[..., pluggy.PluginManager]:
    """A factory ``make(*plugins, defaults=False, disabled=())`` returning a fresh manager
    with only those plugins (see :func:`make_manager`)."""
    return make_manager


def daemon_hooks(pm: pluggy.PluginManager) -> CompiledHooks:
    """The hooks the daemon asks on every send and every listing, compiled from ``pm`` as
    the daemon compiles them (:class:`~roost_core.policy.CompiledHooks`): each called with
    the spec's arguments in order, the core's fallback included,
    ``decide_reach(sender, target, addressed_by, config)``, ``check_send(item, now,
    config)``, ``note_sent(item, now)`` (None when no plugin counts sends),
    ``frame_item(item)``, ``decide_delivery(item, config)``; and ``reach_pure``, whether
    the daemon may keep reach decisions (every ``roost_decide_reach`` implementation is
    marked :func:`roost_core.pure`) or asks at every send and listing."""
    from roost_core.policy import CompiledHooks

    return CompiledHooks(pm)


def load_plugin(name: str) -> object:
    """The plugin object of the installed entry point ``name`` (group ``roost``), as the
    daemon would register it; :class:`LookupError` if no distribution provides it."""
    from importlib import metadata

    from roost_core.plugins import PROJECT, plugin_object

    for ep in metadata.entry_points(group=PROJECT, name=name):
        return plugin_object(ep.load())
    raise LookupError(f"no installed entry point {name!r} in group {PROJECT!r}")


# --------------------------------------------------------------------------- records


def make_peer(
    id: str = "a1b2c3d4", name: str = "peer", kind: str = "job", state: str = "idle", **fields: Any
) -> PeerInfo:
    """A :class:`PeerInfo` with test defaults; ``fields`` set anything else (``session``,
    ``cwd``, ``parent_session``, ``root_session``, ``live``...)."""
    return PeerInfo(id=id, name=name, kind=kind, state=state, **fields)


def make_item(
    sender: PeerInfo | None = None,
    target: PeerInfo | None = None,
    text: str = "hi",
    kind: str = "message",
    relation: str = "child",
    hops: int = 0,
    **fields: Any,
) -> OutgoingItem:
    """An :class:`OutgoingItem` from ``sender`` to ``target`` (two distinct test peers
    when omitted). ``relation`` is the sender as the receiver sees it; ``fields`` set
    ``id``, ``reply_to``, ``scope``, ``broadcast_chain``, ``urgent``."""
    sender = sender if sender is not None else make_peer(id="a1b2c3d4", name="sender")
    target = target if target is not None else make_peer(id="b1b2c3d4", name="target")
    return OutgoingItem(sender=sender, target=target, text=text, kind=kind, relation=relation, hops=hops, **fields)


def make_config(mapping: Mapping[str, Any] | None = None, /, **fields: Any) -> Config:
    """A :class:`Config` with the spec's defaults.

    ``mapping`` is a user config as written in ``roost.json`` (camelCase keys, checked
    as the daemon checks them; keys roost does not know stay in ``config.raw``, where
    plugins read their own settings); ``fields`` then override attributes by their
    Python names, e.g. ``make_config({"repoReachAllow": ["ci"]}, agent_max_depth=1)``.
    """
    config = Config.from_mapping(dict(mapping)) if mapping is not None else Config()
    return attrs.evolve(config, **fields) if fields else config


def make_spawn_request(
    parent: PeerInfo | None = None,
    *,
    depth: int = 1,
    live_children: int = 0,
    live_in_tree: int = 1,
    live_spawned: int = 0,
    tree: str | None = None,
    hops: int = 1,
    host: str | None = None,
) -> SpawnRequest:
    """A :class:`SpawnRequest` for a first child of ``parent`` (a root foreground peer
    when omitted); ``tree`` defaults to the parent's root session, session or peer id."""
    parent = parent if parent is not None else make_peer(id="f1234567", name="lead", kind="foreground", session="/s/lead.jsonl", live=True)
    if tree is None:
        tree = parent.root_session or parent.session or f"peer:{parent.id}"
    return SpawnRequest(
        parent=parent,
        depth=depth,
        live_children=live_children,
        live_in_tree=live_in_tree,
        live_spawned=live_spawned,
        tree=tree,
        hops=hops,
        host=host,
    )


def make_cause(seq: int = 1, kind: str = "reply", sender: str | None = None, joined: bool = False) -> RunCause:
    """A :class:`RunCause`: the item ``seq`` of ``kind`` (``reply``, ``message``,
    ``report``) from ``sender`` (a peer id; None for user input)."""
    return RunCause(seq=seq, kind=kind, sender=sender, joined=joined)


def make_run(
    *causes: RunCause | str,
    state: str = "done",
    result: str = "finished",
    question: str | None = None,
    error: str | None = None,
) -> RunRecord:
    """A settled :class:`RunRecord`. ``causes`` are :class:`RunCause` records or bare
    kinds (``make_run("reply")``); none means one user reply started the run."""
    built = tuple(
        cause if isinstance(cause, RunCause) else make_cause(seq=n, kind=cause) for n, cause in enumerate(causes or ("reply",), start=1)
    )
    return RunRecord(causes=built, state=state, result=result, question=question, error=error)


def make_report(
    child: PeerInfo | None = None,
    state: str = "done",
    result: str = "finished",
    **fields: Any,
) -> Report:
    """A :class:`Report` from ``child`` (a spawned job of a test parent when omitted);
    ``fields``: ``question``, ``error``, ``synthetic``, ``reason``, ``crashes``."""
    child = child if child is not None else make_child()
    return Report(child=child, state=state, result=result, **fields)


def make_child(parent: PeerInfo | None = None, id: str = "c1b2c3d4", name: str = "child", **fields: Any) -> PeerInfo:
    """A spawned job of ``parent`` (a root foreground peer when omitted), linked into its tree."""
    parent = parent if parent is not None else make_peer(id="f1234567", name="lead", kind="foreground", session="/s/lead.jsonl", live=True)
    fields.setdefault("session", f"/s/{id}.jsonl")
    return make_peer(
        id=id,
        name=name,
        parent_session=parent.session,
        parent_peer=parent.id,
        root_session=parent.root_session or parent.session,
        **fields,
    )


def make_candidates(
    report: Report | None = None,
    *,
    live_holder: PeerInfo | None = None,
    session_job: PeerInfo | None = None,
    parent_session: str | None = None,
    parent_peer: str | None = None,
) -> ReportCandidates:
    """:class:`ReportCandidates` for ``report``'s parent (taken from its child's links);
    nothing live and no job record unless given."""
    child = report.child if report is not None else None
    return ReportCandidates(
        parent_session=parent_session if parent_session is not None else (child.parent_session if child else None),
        parent_peer=parent_peer if parent_peer is not None else (child.parent_peer if child else None),
        live_holder=live_holder,
        session_job=session_job,
    )


def make_tool_result(tool: str = "roost_send", ok: bool = True, data: dict[str, Any] | None = None, **fields: Any) -> ToolResult:
    """A :class:`ToolResult`; for an error pass ``ok=False, code=..., message=...``."""
    return ToolResult(tool=tool, ok=ok, data=data or {}, **fields)


def make_entry(type: str = "message", text: str = "", **fields: Any) -> TranscriptEntry:
    """A :class:`TranscriptEntry` (``role``, ``custom_type``, ``details``, ``raw``)."""
    return TranscriptEntry(type=type, text=text, **fields)


def make_scope_request(
    sender: PeerInfo | None = None,
    scope: str = "children",
    *peers: tuple[PeerInfo, str] | ReachablePeer,
    broadcast_chain: bool = False,
    hops: int = 0,
) -> ScopeRequest:
    """A :class:`ScopeRequest` from ``sender`` (a root foreground peer when omitted);
    ``peers`` are ``(peer, relation)`` pairs it may reach. None given: two live children
    and a live sibling-less tree member."""
    sender = sender if sender is not None else make_peer(id="f1234567", name="lead", kind="foreground", session="/s/lead.jsonl", live=True)
    if not peers:
        peers = (
            (make_child(sender, id="c0000001", name="kid-a", live=True), "child"),
            (make_child(sender, id="c0000002", name="kid-b", live=True), "child"),
        )
    reachable = tuple(p if isinstance(p, ReachablePeer) else ReachablePeer(peer=p[0], relation=p[1]) for p in peers)
    return ScopeRequest(sender=sender, scope=scope, reachable=reachable, broadcast_chain=broadcast_chain, hops=hops)


def make_watch_request(
    watcher: PeerInfo | None = None,
    target: PeerInfo | None = None,
    relation: str = "child",
    *,
    active: int = 0,
    hops: int = 1,
) -> WatchRequest:
    """A :class:`WatchRequest`: ``watcher`` (a root foreground peer when omitted) watches
    ``target`` (its running child when omitted)."""
    watcher = watcher if watcher is not None else make_peer(id="f1234567", name="lead", kind="foreground", session="/s/lead.jsonl", live=True)
    target = target if target is not None else make_child(watcher, state="running", live=True)
    return WatchRequest(watcher=watcher, target=target, relation=relation, active=active, hops=hops)


def make_tree_usage(tokens: int = 0, cost: float = 0.0, *, tree: str = "/s/lead.jsonl", jobs: int = 1) -> TreeUsage:
    """A :class:`TreeUsage`: what the tree ``tree`` has spent."""
    return TreeUsage(tree=tree, tokens=tokens, cost=cost, jobs=jobs)


def make_workspace_request(cwd: str = "/nonexistent", name: str = "child", base: str = "head", state_dir: str = "") -> WorkspaceRequest:
    """A :class:`WorkspaceRequest`: a workspace for the job ``name`` from the repository
    ``cwd`` is in (none, by default: roost's git plugin then refuses ``not_a_repo``)."""
    return WorkspaceRequest(cwd=cwd, name=name, base=base, state_dir=state_dir)


def make_workspace(path: str = "/nonexistent/child", *, branch: str = "roost/child", base: str = "0" * 40, repo: str = "/nonexistent", **fields: Any) -> Workspace:
    """A :class:`Workspace` as a plugin made it (``vcs`` git, a worktree that is gone, by
    default); ``fields`` set ``cwd``, ``vcs``, ``carried``, ``notes``."""
    fields.setdefault("cwd", path)
    return Workspace(path=path, branch=branch, base=base, repo=repo, **fields)
