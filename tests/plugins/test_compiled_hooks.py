"""``policy.compile_hook`` and ``policy.CompiledHooks``: the hooks the daemon asks on
every send and listing, compiled once per plugin set through pluggy's public API, answer
exactly what pluggy's own call answers, whatever the plugins look like (parameters in
another order or fewer of them, a wrapper new or old style, several plugins, none); and
reach decisions may be kept only when every reach implementation is marked pure."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pluggy
import pytest

from roost_core import hookimpl, hookspecs, is_pure, policy, pure
from roost_core.records import DeliveryDecision, ReachDecision, Refusal
from roost_core.testing import make_config, make_item, make_manager, make_peer
from roost_plugins import reach as default_reach


class Framer:
    """A framer that keeps the envelope's rules (the core refuses any other)."""

    @hookimpl
    def roost_frame_item(self, item):
        return f"[framed]\n{item.text}\n[end]\n{policy.NO_USER_AUTHORITY}"


class Silent:
    """Implements the hooks and has no opinion (None)."""

    @hookimpl
    def roost_frame_item(self, item):
        return None

    @hookimpl
    def roost_check_send(self, item, now, config):
        return None


class Refuser:
    @hookimpl
    def roost_check_send(self, config, item):  # its own order, and not every argument
        return Refusal("nope", f"no {item.text} ({config.agent_max_hops})")


class FollowUp:
    @hookimpl
    def roost_decide_delivery(self, config, item):
        return DeliveryDecision("followUp")


class Wrapper:
    """A new-style wrapper: pluggy runs it around the others."""

    @hookimpl(wrapper=True)
    def roost_frame_item(self, item):
        answer = yield
        return None if answer is None else f"wrapped {answer}"


class OldWrapper:
    """An old-style hook wrapper: it replaces the others' refusals."""

    @hookimpl(hookwrapper=True)
    def roost_check_send(self, item) -> Generator[None, Any, None]:
        outcome = yield
        if outcome.get_result():
            outcome.force_result([Refusal("wrapped", "wrapped")])


class ReachByTarget:
    """A reach decision on the target's name only (one argument of four)."""

    @hookimpl
    def roost_decide_reach(self, target):
        return ReachDecision(allowed=True, relation="external") if target.name == "oncall" else None


CASES: list[tuple[str, tuple[Any, ...], str]] = [
    ("one framer", (Framer(),), "roost_frame_item"),
    ("no opinion, firstresult", (Silent(),), "roost_frame_item"),
    ("no opinion, every answer", (Silent(),), "roost_check_send"),
    ("one refusal, arguments in its own order", (Refuser(),), "roost_check_send"),
    ("two answers", (Refuser(), Silent()), "roost_check_send"),
    ("a new-style wrapper", (Framer(), Wrapper()), "roost_frame_item"),
    ("a wrapper alone", (Wrapper(),), "roost_frame_item"),
    ("an old-style wrapper", (Refuser(), OldWrapper()), "roost_check_send"),
    ("nobody, firstresult", (), "roost_frame_item"),
    ("nobody, every answer", (), "roost_check_send"),
    ("delivery, arguments in its own order", (FollowUp(),), "roost_decide_delivery"),
    ("reach on one argument", (ReachByTarget(),), "roost_decide_reach"),
    ("reach, a team's before the default", (ReachByTarget(), default_reach), "roost_decide_reach"),
]

ARGS = {
    "item": make_item(text="hello"),
    "now": 1.0,
    "config": make_config(),
    "sender": make_peer(id="a0000001", name="alice"),
    "target": make_peer(id="b0000001", name="oncall"),
    "addressed_by": "name",
}


@pytest.mark.parametrize(("plugins", "hook"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_a_compiled_hook_answers_as_pluggy_does(plugins, hook):
    pm = make_manager(*plugins)
    caller = getattr(pm.hook, hook)
    names = caller.spec.argnames
    assert policy.compile_hook(caller)(*[ARGS[name] for name in names]) == caller(**{name: ARGS[name] for name in names})


@pytest.mark.parametrize(("plugins", "hook"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_the_compiled_hooks_answer_as_the_policy_functions_do(plugins, hook):
    """What every send asks gives the answer the policy functions give through pluggy's
    own call, the core's fallback included."""
    pm = make_manager(*plugins)
    compiled = policy.CompiledHooks(pm)
    item, config = ARGS["item"], ARGS["config"]
    assert compiled.frame_item(item) == policy.frame_item(pm, item)
    assert compiled.check_send(item, 1.0, config) == policy.check_send(pm, item, 1.0, config)
    assert compiled.decide_delivery(item, config) == policy.decide_delivery(pm, item, config)
    sender, target = ARGS["sender"], ARGS["target"]
    for addressed_by in ("id", "name", "list"):
        assert compiled.decide_reach(sender, target, addressed_by, config) == policy.decide_reach(pm, sender, target, addressed_by, config)


def test_the_core_fallbacks_stand_when_no_plugin_answers():
    compiled = policy.CompiledHooks(make_manager(Silent()))
    item = make_item(text="a <b>")
    assert compiled.frame_item(item) == policy.fallback_frame(item)
    assert compiled.check_send(item, 1.0, make_config()) is None
    assert compiled.note_sent is None  # nobody counts sends: nothing to call
    assert compiled.decide_delivery(item, make_config()) == "steer"
    assert compiled.decide_reach(ARGS["sender"], ARGS["target"], "id", make_config()) == policy.NO_REACH


class Nonsense:
    """Answers what no hook's spec allows: the core's fallbacks stand."""

    @hookimpl
    def roost_frame_item(self, item):
        return 42

    @hookimpl
    def roost_decide_delivery(self, item):
        return DeliveryDecision("later")

    @hookimpl
    def roost_decide_reach(self, target):
        return "yes"

    @hookimpl
    def roost_check_send(self, item):
        return "no"


def test_an_answer_of_the_wrong_kind_is_no_answer():
    compiled = policy.CompiledHooks(make_manager(Nonsense()))
    item, config = make_item(text="x"), make_config()
    assert compiled.frame_item(item) == policy.fallback_frame(item)
    assert compiled.decide_delivery(item, config) == "steer"
    assert compiled.decide_reach(ARGS["sender"], ARGS["target"], "id", config) == policy.NO_REACH
    assert compiled.check_send(item, 1.0, config) is None


# ---------------------------------------------------------------------------- purity


class PureTeamReach:
    @hookimpl
    @pure
    def roost_decide_reach(self, sender, target):
        return ReachDecision(allowed=True, relation="external") if target.name == "oncall" else None


@hookimpl(wrapper=True)
@pure
def roost_decide_reach(sender, target, addressed_by, config):
    """A pure wrapper (a module-level function, marked on either side of hookimpl)."""
    answer = yield
    return answer


class PureWrapper:
    roost_decide_reach = staticmethod(roost_decide_reach)


class UnmarkedWrapper:
    @hookimpl(wrapper=True)
    def roost_decide_reach(self, target):
        answer = yield
        return answer


@pytest.mark.parametrize(
    ("plugins", "kept"),
    [
        ((default_reach,), True),
        ((), True),  # no plugin: the core's constant answer
        ((ReachByTarget(), default_reach), False),
        ((PureTeamReach(), default_reach), True),
        ((PureWrapper(), default_reach), True),
        ((UnmarkedWrapper(), default_reach), False),
        ((ReachByTarget(),), False),
    ],
    ids=["default", "none", "unmarked team plugin", "marked team plugin", "marked wrapper", "unmarked wrapper", "unmarked alone"],
)
def test_reach_decisions_may_be_kept_only_when_every_implementation_is_pure(plugins, kept):
    pm = make_manager(*plugins)
    assert policy.hook_is_pure(pm.hook.roost_decide_reach) is kept
    assert policy.CompiledHooks(pm).reach_pure is kept


def test_the_mark_is_read_through_pluggys_public_api():
    """``HookImpl.function`` of a method is the bound method, which reads the mark its
    function carries; the default reach plugin is marked, its module's helpers are not."""
    pm = make_manager(PureTeamReach(), default_reach)
    impls = pm.hook.roost_decide_reach.get_hookimpls()
    assert [impl.plugin_name for impl in impls if is_pure(impl.function)] == [impl.plugin_name for impl in impls]
    assert not is_pure(default_reach.decide)


# ---------------------------------------------------------------------------- one cache


def test_the_compiled_hooks_are_made_once_per_plugin_set():
    pm = make_manager(Silent())
    hooks = policy.PluginHooks(pm)
    first = hooks.current()
    assert hooks.current() is first  # unchanged: the same
    item, config = make_item(text="hello"), make_config()
    assert first.check_send(item, 1.0, config) is None
    pm.register(Refuser(), name="refuser")
    second = hooks.current()
    assert second is not first and second.check_send(item, 1.0, config).code == "nope"
    pm.set_blocked("refuser")
    assert hooks.current().check_send(item, 1.0, config) is None
    pm.register(Framer(), name="framer")
    assert hooks.current().frame_item(item) == f"[framed]\nhello\n[end]\n{policy.NO_USER_AUTHORITY}"


def test_a_manager_that_does_not_count_its_changes_gets_them_made_each_time():
    pm = pluggy.PluginManager("roost")
    pm.add_hookspecs(hookspecs)
    hooks = policy.PluginHooks(pm)
    assert hooks.current() is not hooks.current()
    pm.register(Refuser())
    assert hooks.current().check_send(make_item(), 1.0, make_config()).code == "nope"


def test_nothing_is_stored_on_the_manager():
    pm = make_manager(Silent(), default_reach)
    before = set(vars(pm))
    policy.PluginHooks(pm).current()
    assert set(vars(pm)) == before
