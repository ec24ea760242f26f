"""The plugin-author kit (``roost_core.testing``): fresh managers, the fixture, and record
helpers that build every argument of every hook."""

from __future__ import annotations

import inspect

import pytest

from roost_core import hookimpl, hookspecs
from roost_core.plugins import DEFAULT_PLUGINS
from roost_core.records import (
    DeliveryDecision,
    HostSpec,
    ReachDecision,
    Refusal,
    Report,
    ReportDecision,
    ReportRoute,
    ScopePlan,
    Settlement,
    ToolDef,
    WatchDecision,
    WorkspaceMade,
    WorkspaceRemoval,
    WorkspaceState,
)
from roost_core.testing import (
    daemon_hooks,
    load_plugin,
    make_candidates,
    make_cause,
    make_child,
    make_config,
    make_entry,
    make_item,
    make_manager,
    make_peer,
    make_report,
    make_run,
    make_scope_request,
    make_spawn_request,
    make_tool_result,
    make_tree_usage,
    make_watch_request,
    make_workspace,
    make_workspace_request,
)
from roost_plugins import limits, reach


class Everything:
    """A stand-in team plugin that answers every decide hook."""

    @hookimpl
    def roost_decide_reach(self, sender, target, addressed_by, config):
        return ReachDecision(True, "external")


def spec_names() -> set[str]:
    return {name for name, fn in vars(hookspecs).items() if name.startswith("roost_") and inspect.isfunction(fn)}


def test_a_fresh_manager_holds_only_what_it_is_given(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(reach)
    assert pm.get_plugins() == {reach}
    assert spec_names() <= {name for name in vars(pm.hook) if name.startswith("roost_")}
    assert roost_plugin_manager().get_plugins() == set()


def test_named_plugins_and_defaults(roost_plugin_manager) -> None:
    team = Everything()
    pm = roost_plugin_manager(("team-reach", team), defaults=True, disabled=["render"])
    assert [name for name, plugin in pm.list_name_plugin() if plugin is not None] == [n for n in DEFAULT_PLUGINS if n != "render"] + ["team-reach"]
    assert pm.get_plugin("team-reach") is team
    # The team plugin wins over the trylast default.
    assert pm.hook.roost_decide_reach(sender=make_peer(), target=make_peer(id="b"), addressed_by="name", config=make_config()).allowed


def test_defaults_get_a_fresh_limits_instance_each_time() -> None:
    first, second = make_manager(defaults=True), make_manager(defaults=True)
    assert first.get_plugin("limits") is not second.get_plugin("limits")
    assert first.get_plugin("limits") is not limits.plugin
    for n in range(30):
        first.hook.roost_note_sent(item=make_item(), now=float(n))
    assert [r.code for r in first.hook.roost_check_send(item=make_item(), now=30.0, config=make_config()) if r] == ["rate_limited"]
    assert not any(second.hook.roost_check_send(item=make_item(), now=30.0, config=make_config()))


def test_unknown_hooks_fail_loudly() -> None:
    class Typo:
        @hookimpl
        def roost_decide_reech(self, sender):
            return None

    with pytest.raises(Exception, match="unknown hook"):
        make_manager(Typo())


def test_make_config_reads_a_user_config_and_overrides() -> None:
    config = make_config({"agentExternalMessages": True, "repoReachAllow": ["ci"]}, agent_max_depth=1)
    assert config.agent_external_messages is True and config.agent_max_depth == 1
    assert config.raw["repoReachAllow"] == ["ci"]
    assert make_config().agent_max_depth == 3
    with pytest.raises(ValueError):
        make_config({"agentTools": "yes"})


def test_record_helpers_link_a_tree() -> None:
    lead = make_peer(id="f0000001", name="lead", kind="foreground", session="/s/lead.jsonl")
    kid = make_child(lead, id="c0000001")
    assert (kid.parent_session, kid.parent_peer, kid.root_session) == ("/s/lead.jsonl", "f0000001", "/s/lead.jsonl")
    grandkid = make_child(kid, id="c0000002")
    assert grandkid.root_session == "/s/lead.jsonl" and grandkid.parent_session == kid.session
    request = make_spawn_request(kid, depth=2)
    assert request.tree == "/s/lead.jsonl" and request.parent is kid
    report = make_report(kid, state="needs_input", question="which branch?")
    candidates = make_candidates(report, live_holder=lead)
    assert (candidates.parent_session, candidates.parent_peer, candidates.live_holder) == ("/s/lead.jsonl", "f0000001", lead)
    run = make_run(make_cause(1, "message", sender="f0000001"), "report")
    assert [(c.seq, c.kind, c.sender) for c in run.causes] == [(1, "message", "f0000001"), (2, "report", None)]
    assert make_run().causes[0].kind == "reply"
    assert make_tool_result("roost_send", ok=False, code="unreachable", message="no").code == "unreachable"
    assert make_entry("message", "hi", role="user").role == "user"


def test_the_default_plugins_accept_what_the_helpers_build() -> None:
    pm = make_manager(defaults=True)
    kid = make_child()
    decision = pm.hook.roost_decide_report(child=kid, run=make_run("reply"), streak=0)
    assert decision == ReportDecision(True, 0, "user input")
    report = make_report(kid)
    route = pm.hook.roost_route_report(report=report, candidates=make_candidates(report, live_holder=make_peer(id="f1234567")))
    assert route == ReportRoute("deliver", "f1234567")
    assert pm.hook.roost_route_report(report=report, candidates=make_candidates(report)) == ReportRoute("keep")
    refusals = pm.hook.roost_check_spawn(request=make_spawn_request(depth=4), now=0.0, config=make_config())
    assert [r.code for r in refusals if r] == ["depth_limit"]


def test_daemon_hooks_ask_as_the_daemon_does_and_say_whether_reach_is_kept(roost_plugin_manager) -> None:
    """Everything's reach is not marked pure: the daemon would ask it at every send."""
    hooks = daemon_hooks(roost_plugin_manager(Everything(), defaults=True))
    assert hooks.decide_reach(make_peer(), make_peer(id="b"), "name", make_config()) == ReachDecision(True, "external")
    assert hooks.reach_pure is False
    assert daemon_hooks(roost_plugin_manager(defaults=True)).reach_pure is True
    refusal = hooks.check_send(make_item(make_peer(), make_peer()), 0.0, make_config())
    assert refusal is not None and refusal.code == "self_send"
    assert "hi" in hooks.frame_item(make_item()) and hooks.decide_delivery(make_item(), make_config()) == "steer"


def test_load_plugin_finds_installed_entry_points() -> None:
    # roost's own defaults are entry points too; a module's ``plugin`` is unwrapped.
    assert load_plugin("reach") is reach
    assert load_plugin("limits") is limits.plugin
    with pytest.raises(LookupError):
        load_plugin("no-such-plugin")


# One call per hook, with arguments the kit builds, so a new hook needs a helper (and a
# line here) before this passes: the kit stays complete.
HOOK_CALLS = {
    "roost_register_hosts": lambda: {},
    "roost_decide_reach": lambda: {"sender": make_peer(), "target": make_peer(id="b"), "addressed_by": "id", "config": make_config()},
    "roost_check_send": lambda: {"item": make_item(), "now": 0.0, "config": make_config()},
    "roost_note_sent": lambda: {"item": make_item(), "now": 0.0},
    "roost_check_spawn": lambda: {"request": make_spawn_request(), "now": 0.0, "config": make_config()},
    "roost_note_spawned": lambda: {"request": make_spawn_request(), "now": 0.0},
    "roost_sanitize_name": lambda: {"name": "a<b>"},
    "roost_frame_item": lambda: {"item": make_item()},
    "roost_classify_settle": lambda: {"run": make_run(result="Which branch?"), "host": "pi"},
    "roost_decide_report": lambda: {"child": make_child(), "run": make_run(), "streak": 0},
    "roost_format_report": lambda: {"report": make_report()},
    "roost_route_report": lambda: {"report": make_report(), "candidates": make_candidates(make_report())},
    "roost_report_on_end": lambda: {"child": make_child(), "reason": "stopped"},
    "roost_render_entry": lambda: {"entry": make_entry("message", "hi", role="user")},
    "roost_tool_definitions": lambda: {"config": make_config(), "hosts": ("scripted", "pi")},
    "roost_format_tool_result": lambda: {"result": make_tool_result(data={"to": "b", "result": "delivered"})},
    "roost_plan_broadcast": lambda: {"request": make_scope_request(), "config": make_config()},
    "roost_decide_delivery": lambda: {"item": make_item(urgent=False), "config": make_config()},
    "roost_decide_watch": lambda: {"request": make_watch_request(), "config": make_config()},
    "roost_check_budget": lambda: {"usage": make_tree_usage(100), "config": make_config(agent_tree_tokens=50)},
    "roost_make_workspace": lambda: {"request": make_workspace_request()},
    "roost_describe_workspace": lambda: {"workspace": make_workspace()},
    "roost_remove_workspace": lambda: {"workspace": make_workspace(), "force": False},
}

EXPECTED = {
    "roost_register_hosts": list,
    "roost_decide_reach": ReachDecision,
    "roost_check_send": list,
    "roost_note_sent": list,
    "roost_check_spawn": list,
    "roost_note_spawned": list,
    "roost_sanitize_name": str,
    "roost_frame_item": str,
    "roost_classify_settle": Settlement,
    "roost_decide_report": ReportDecision,
    "roost_format_report": str,
    "roost_route_report": ReportRoute,
    "roost_report_on_end": Report,
    "roost_render_entry": str,
    "roost_tool_definitions": list,
    "roost_format_tool_result": str,
    "roost_plan_broadcast": ScopePlan,
    "roost_decide_delivery": DeliveryDecision,
    "roost_decide_watch": WatchDecision,
    "roost_check_budget": list,
    "roost_make_workspace": WorkspaceMade,
    "roost_describe_workspace": WorkspaceState,
    "roost_remove_workspace": WorkspaceRemoval,
}


def test_every_hook_has_a_kit_call() -> None:
    assert set(HOOK_CALLS) == spec_names() == set(EXPECTED)


@pytest.mark.parametrize("hook", sorted(HOOK_CALLS))
def test_every_hook_can_be_called_with_kit_records(hook: str) -> None:
    kwargs = HOOK_CALLS[hook]()
    spec = getattr(hookspecs, hook)
    assert list(kwargs) == list(inspect.signature(spec).parameters)
    result = getattr(make_manager(defaults=True).hook, hook)(**kwargs)
    assert isinstance(result, EXPECTED[hook])
    if spec.roost_spec["firstresult"] and isinstance(result, list):
        assert all(isinstance(element, ReachDecision) for element in result)
    elif isinstance(result, list):
        for contributed in result:
            assert contributed is None or isinstance(contributed, (Refusal, list))
            for element in contributed if isinstance(contributed, list) else ():
                assert isinstance(element, (ToolDef, HostSpec))
