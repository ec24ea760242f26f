"""The core's side of every policy hook: call the hook, and fall back to the neutral, safe
answer when no plugin answers (a plugin blocked, or none installed).

The daemon and workers call these functions, never ``pm.hook`` directly, so each fallback
is written once.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from roost_core import envelope_rules, is_pure
from roost_core.plugins import default_framer
from roost_core.records import (
    SETTLED_STATES,
    DeliveryDecision,
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
)

if TYPE_CHECKING:
    import pluggy

    from roost_core.config import Config

#: The notice every framed agent item carries, whichever plugin frames it (the core checks
#: it is there: :mod:`roost_core.envelope_rules`).
NO_USER_AUTHORITY = envelope_rules.NO_USER_AUTHORITY

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_ .:@/-]")


def fallback_sanitize(name: str) -> str:
    """ASCII-only, so no unicode look-alike or control character survives."""
    cleaned = _UNSAFE_NAME.sub("_", unicodedata.normalize("NFKC", name)).strip()
    return cleaned[:64] or "agent"


def sanitize_name(pm: pluggy.PluginManager, name: str) -> str:
    answer = pm.hook.roost_sanitize_name(name=name)
    return answer if isinstance(answer, str) and answer else fallback_sanitize(name)


def decide_reach(
    pm: pluggy.PluginManager, sender: PeerInfo, target: PeerInfo, addressed_by: str, config: Config
) -> ReachDecision:
    """The reach plugins' decision, asked through pluggy's own call (the daemon asks the
    plugin set's :class:`CompiledHooks`, which answer the same)."""
    return _reach_answer(pm.hook.roost_decide_reach(sender=sender, target=target, addressed_by=addressed_by, config=config))


def _reach_answer(answer: object) -> ReachDecision:
    """A reach hook's answer, or not reachable when no plugin answered a decision."""
    return answer if isinstance(answer, ReachDecision) else NO_REACH


#: The answer when no reach plugin answers: not reachable.
NO_REACH = ReachDecision(allowed=False, relation="external", reason="no reach policy allows this peer")


def first_refusal(answers: list[object]) -> Refusal | None:
    """The first refusal a contribute hook's plugins gave, if any."""
    for answer in answers:
        if isinstance(answer, Refusal):
            return answer
    return None


def check_send(pm: pluggy.PluginManager, item: OutgoingItem, now: float, config: Config) -> Refusal | None:
    """The send limits' first refusal of ``item``, or None (pluggy's own call)."""
    return first_refusal(pm.hook.roost_check_send(item=item, now=now, config=config))


def note_sent(pm: pluggy.PluginManager, item: OutgoingItem, now: float) -> None:
    """``item`` was checked and taken: every plugin that counts sends counts it."""
    pm.hook.roost_note_sent(item=item, now=now)


def fallback_frame(item: OutgoingItem) -> str:
    # Every body line is quoted, so no line of the body can pass for the frame's own
    # "[agent ...]" / "[end of agent ...]" lines.
    body = "\n".join("| " + line for line in item.text.replace("<", "&lt;").split("\n"))
    ids = f", msg {fallback_sanitize(item.id)}" if item.id else ""
    if item.reply_to:
        ids += f", reply to {fallback_sanitize(item.reply_to)}"
    return (
        f"[agent {item.kind} from {fallback_sanitize(item.sender.name)} ({item.sender.id}), "
        f"relation {item.relation}{ids}]\n{body}\n[end of agent {item.kind}]\n{NO_USER_AUTHORITY}"
    )


def frame_item(pm: pluggy.PluginManager, item: OutgoingItem) -> str:
    """The framing plugins' text for ``item``, checked against the envelope's rules
    (refused ``plugin_error`` when it breaks them), or the core's own frame when none
    answers."""
    hook = pm.hook.roost_frame_item
    return envelope_rules.frame_or_refuse(lambda item: hook(item=item), item, fallback_frame, hook)


def render_entry(pm: pluggy.PluginManager, entry: TranscriptEntry) -> str:
    answer = pm.hook.roost_render_entry(entry=entry)
    if isinstance(answer, str):
        return answer
    if entry.type in ("session", "custom"):
        return ""  # the header and extension data are not part of the conversation
    label = entry.role or entry.custom_type or entry.type
    return f"{label}: {entry.text}"


def tool_definitions(pm: pluggy.PluginManager, config: Config, hosts: Sequence[str] = ()) -> list[ToolDef]:
    """Every tool the plugins contribute, the first of each name; ``hosts`` are the names
    of the registered hosts (``roost_spawn``'s ``host`` choices come from them)."""
    tools: list[ToolDef] = []
    seen: set[str] = set()
    for contributed in pm.hook.roost_tool_definitions(config=config, hosts=tuple(hosts)):
        for tool in contributed or ():
            if isinstance(tool, ToolDef) and tool.name not in seen:
                seen.add(tool.name)
                tools.append(tool)
    return tools


def format_tool_result(pm: pluggy.PluginManager, result: ToolResult) -> str:
    answer = pm.hook.roost_format_tool_result(result=result)
    if isinstance(answer, str):
        return answer
    if not result.ok:
        return f"error ({result.code}): {result.message}"
    return json.dumps(result.data, ensure_ascii=False, separators=(",", ":"))


def check_spawn(pm: pluggy.PluginManager, request: SpawnRequest, now: float, config: Config) -> Refusal | None:
    return first_refusal(pm.hook.roost_check_spawn(request=request, now=now, config=config))


def note_spawned(pm: pluggy.PluginManager, request: SpawnRequest, now: float) -> None:
    pm.hook.roost_note_spawned(request=request, now=now)


def classify_settle(pm: pluggy.PluginManager, run: RunRecord, host: str) -> Settlement:
    """The settle plugin's classification; the host's own state when there is none (or
    when a plugin answers a state that is not a settled state)."""
    answer = pm.hook.roost_classify_settle(run=run, host=host)
    if isinstance(answer, Settlement) and answer.state in SETTLED_STATES:
        return answer
    return Settlement(run.state, run.question, run.error, "the host's own state")


def decide_report(pm: pluggy.PluginManager, child: PeerInfo, run: RunRecord, streak: int) -> ReportDecision:
    answer = pm.hook.roost_decide_report(child=child, run=run, streak=streak)
    return answer if isinstance(answer, ReportDecision) else ReportDecision(False, streak, "no hand-back policy")


def format_report(pm: pluggy.PluginManager, report: Report) -> str:
    answer = pm.hook.roost_format_report(report=report)
    if isinstance(answer, str) and answer:
        return answer
    return f"state: {report.state}\n{report.result}".rstrip()


def route_report(pm: pluggy.PluginManager, report: Report, candidates: ReportCandidates) -> ReportRoute:
    answer = pm.hook.roost_route_report(report=report, candidates=candidates)
    return answer if isinstance(answer, ReportRoute) else ReportRoute("keep")


def report_on_end(pm: pluggy.PluginManager, child: PeerInfo, reason: str) -> Report | None:
    answer = pm.hook.roost_report_on_end(child=child, reason=reason)
    return answer if isinstance(answer, Report) else None


def plan_broadcast(pm: pluggy.PluginManager, request: ScopeRequest, config: Config) -> ScopePlan:
    """The broadcast plugin's plan, with every receiver checked to be one the core
    offered (so no plugin can reach outside the tree); no plugin refuses every scope."""
    answer = pm.hook.roost_plan_broadcast(request=request, config=config)
    if not isinstance(answer, ScopePlan):
        return ScopePlan(refusal=Refusal("unreachable", "no broadcast policy is installed; send to one peer at a time"))
    offered = {(reachable.peer.id, reachable.relation) for reachable in request.reachable}
    if answer.refusal is None and any((r.peer.id, r.relation) not in offered for r in answer.receivers):
        return ScopePlan(refusal=Refusal("unreachable", "the broadcast policy named a receiver outside your reach"))
    return answer


def decide_delivery(pm: pluggy.PluginManager, item: OutgoingItem, config: Config) -> str:
    """``steer`` or ``followUp``; steer when no plugin answers (or answers nonsense)."""
    return _delivery_mode(pm.hook.roost_decide_delivery(item=item, config=config))


def _delivery_mode(answer: object) -> str:
    if isinstance(answer, DeliveryDecision) and answer.mode in ("steer", "followUp"):
        return answer.mode
    return "steer"


def decide_watch(pm: pluggy.PluginManager, request: WatchRequest, config: Config) -> WatchDecision:
    answer = pm.hook.roost_decide_watch(request=request, config=config)
    if isinstance(answer, WatchDecision):
        return answer
    return WatchDecision(False, Refusal("unreachable", "no watch policy is installed"))


def check_budget(pm: pluggy.PluginManager, usage: TreeUsage, config: Config) -> Refusal | None:
    return first_refusal(pm.hook.roost_check_budget(usage=usage, config=config))


# --------------------------------------------------------------------------- compiled


def compile_hook(hook: pluggy.HookCaller) -> Callable[..., Any]:
    """``hook``'s call as a function of the spec's arguments, given in the spec's order,
    that answers exactly what ``hook(**kwargs)`` answers, made from pluggy's public API.

    With one plain implementation (no wrapper), that is the implementation itself, given
    the arguments it names in its own order (the per-send hooks have one implementation
    each by default, and pluggy's general dispatch cost more than their own work); with
    none, the empty answer; otherwise (several implementations, a wrapper) pluggy's own
    call. So what a plugin looks like never changes the answer, only the cost."""
    names, firstresult = _spec_of(hook)
    direct = _plain(hook, names)
    if direct is not None:
        if firstresult:
            return direct
        return lambda *args: _as_list(direct(*args))
    if not hook.get_hookimpls():
        return (lambda *args: None) if firstresult else (lambda *args: [])
    return lambda *args: hook(**dict(zip(names, args, strict=True)))


def _spec_of(hook: pluggy.HookCaller) -> tuple[tuple[str, ...], bool]:
    """The spec's argument names, in order, and whether it is firstresult."""
    spec = hook.spec
    if spec is None:
        raise ValueError(f"hook {hook.name} has no spec")
    return tuple(spec.argnames), bool(spec.opts.get("firstresult"))


def _as_list(answer: object) -> list[object]:
    return [] if answer is None else [answer]


def _plain(hook: pluggy.HookCaller, names: tuple[str, ...]) -> Callable[..., Any] | None:
    """``hook``'s one implementation as a function of the spec's arguments in order (the
    arguments it names picked out, as pluggy would), when it has exactly one and that is
    not a wrapper; else None."""
    impls = hook.get_hookimpls()
    if len(impls) != 1 or impls[0].wrapper or impls[0].hookwrapper:
        return None
    function, wanted = impls[0].function, tuple(impls[0].argnames)
    if wanted == names:
        return function
    places = tuple(names.index(name) for name in wanted)
    return lambda *args: function(*[args[place] for place in places])


def hook_is_pure(hook: pluggy.HookCaller) -> bool:
    """Whether roost may keep ``hook``'s answers: every implementation (wrappers included)
    is marked :func:`roost_core.pure`. With none, the core's own answer is constant."""
    return all(is_pure(impl.function) for impl in hook.get_hookimpls())


class CompiledHooks:
    """The hooks the daemon asks on every send and every listing, for one plugin set:
    each a function of the spec's arguments in order, made once by :func:`compile_hook`
    with the core's fallback folded in, so a send costs a few calls.

    ``reach_pure`` says whether reach decisions may be kept (every ``roost_decide_reach``
    implementation is marked :func:`roost_core.pure`); ``note_sent`` is None when no
    plugin counts sends. ``generation`` is the plugin set's
    (:attr:`~roost_core.plugins.RoostPluginManager.generation`) when they were made."""

    __slots__ = ("check_send", "decide_delivery", "decide_reach", "frame_item", "generation", "note_sent", "reach_pure")

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.generation: int | None = getattr(pm, "generation", None)
        hook = pm.hook
        self.reach_pure = hook_is_pure(hook.roost_decide_reach)
        self.decide_reach = _reaching(hook.roost_decide_reach)
        self.check_send = _checking(hook.roost_check_send)
        self.note_sent = _noting(hook.roost_note_sent)
        self.frame_item = _framing(hook.roost_frame_item)
        self.decide_delivery = _delivering(hook.roost_decide_delivery)


# Each of these wraps a compiled hook with the core's fallback, the usual answer's check
# written out (one call per hook on a send, not two).


def _reaching(hook: pluggy.HookCaller) -> Callable[[PeerInfo, PeerInfo, str, Config], ReachDecision]:
    decide = compile_hook(hook)

    def reach(sender: PeerInfo, target: PeerInfo, addressed_by: str, config: Config) -> ReachDecision:
        answer: object = decide(sender, target, addressed_by, config)
        return answer if type(answer) is ReachDecision else _reach_answer(answer)

    return reach


def _framing(hook: pluggy.HookCaller) -> Callable[[OutgoingItem], str]:
    """:func:`frame_item` with the hook compiled (the send path's)."""
    framer = compile_hook(hook)
    if framer is default_framer():
        # roost's own framer alone: its texts keep the rules for every item (proven by
        # tests/plugins/test_envelope_rules.py), and it always answers one, so it is
        # called as it is. The check frames each item twice (with a probe body) and would
        # add about a fifth to the daemon's work per send; any other framer, or this one
        # beside another, is checked.
        return cast(Callable[[OutgoingItem], str], framer)

    def frame(item: OutgoingItem) -> str:
        return envelope_rules.frame_or_refuse(framer, item, fallback_frame, hook)

    return frame


def _delivering(hook: pluggy.HookCaller) -> Callable[[OutgoingItem, Config], str]:
    decide = compile_hook(hook)

    def delivery(item: OutgoingItem, config: Config) -> str:
        answer: object = decide(item, config)
        if type(answer) is DeliveryDecision and answer.mode in ("steer", "followUp"):
            return answer.mode
        return _delivery_mode(answer)

    return delivery


def _checking(hook: pluggy.HookCaller) -> Callable[[OutgoingItem, float, Config], Refusal | None]:
    """``roost_check_send`` as one call: the first refusal, or None."""
    names, _ = _spec_of(hook)
    direct = _plain(hook, names)
    if direct is None:
        every = compile_hook(hook)
        return lambda item, now, config: first_refusal(every(item, now, config))

    def check(item: OutgoingItem, now: float, config: Config) -> Refusal | None:
        answer: object = direct(item, now, config)
        return None if answer is None else answer if isinstance(answer, Refusal) else None

    return check


def _noting(hook: pluggy.HookCaller) -> Callable[[OutgoingItem, float], object] | None:
    """``roost_note_sent`` as one call (its answers are ignored: no list is made), or
    None when no plugin implements it."""
    if not hook.get_hookimpls():
        return None
    names, _ = _spec_of(hook)
    return _plain(hook, names) or compile_hook(hook)


class PluginHooks:
    """The one cache of a plugin set's :class:`CompiledHooks`: made when the set is set
    up, and :meth:`current` makes them again whenever the manager's plugins changed since
    (:attr:`~roost_core.plugins.RoostPluginManager.generation` moved; a manager that does
    not count its changes gets them made anew each time). Kept by the daemon's peer tables
    and shared with its send desk; never stored on the manager."""

    __slots__ = ("_compiled", "_counted", "pm")

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm: Any = pm
        self._counted = isinstance(getattr(pm, "generation", None), int)
        self._compiled = CompiledHooks(pm)

    def current(self) -> CompiledHooks:
        """The compiled hooks of the manager's plugins as they are now (asked twice per
        send: kept to a comparison)."""
        compiled = self._compiled
        if self._counted and compiled.generation == self.pm.generation:
            return compiled
        compiled = self._compiled = CompiledHooks(self.pm)
        return compiled
