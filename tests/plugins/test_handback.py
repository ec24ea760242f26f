"""The default hand-back policy, on its own manager."""

from __future__ import annotations

import pytest

from roost_core.testing import (
    make_candidates,
    make_cause,
    make_child,
    make_peer,
    make_report,
    make_run,
)
from roost_plugins import handback


@pytest.fixture
def pm(roost_plugin_manager):
    return roost_plugin_manager(handback)


def decide(pm, run, streak=0, child=None):
    return pm.hook.roost_decide_report(child=child or make_child(), run=run, streak=streak)


def test_user_input_always_reports_and_resets_the_streak(pm):
    decision = decide(pm, make_run("reply"), streak=3)
    assert decision.report and decision.streak == 0


def test_a_user_reply_that_joined_a_run_reports(pm):
    child = make_child()
    run = make_run(make_cause(1, "message", sender="someone-else"), make_cause(2, "reply", joined=True))
    assert decide(pm, run, streak=3, child=child).report


def test_the_parents_messages_report_three_runs_in_a_row_then_stop(pm):
    child = make_child()
    run = make_run(make_cause(1, "message", sender=child.parent_peer))
    streak, reported = 0, []
    for _ in range(5):
        decision = decide(pm, run, streak, child)
        reported.append(decision.report)
        streak = decision.streak
    assert reported == [True, True, True, False, False]
    assert "3 runs in a row" in decision.reason


def test_other_agents_messages_never_report(pm):
    run = make_run(make_cause(1, "message", sender="a-sibling"))
    decision = decide(pm, run)
    assert not decision.report and "another agent" in decision.reason


def test_a_childs_report_reports_up_the_tree(pm):
    assert decide(pm, make_run(make_cause(1, "report", sender="grandchild"))).report


def test_a_job_without_a_parent_never_reports(pm):
    root = make_peer(id="a1b2c3d4")
    assert not decide(pm, make_run("reply"), child=root).report


def test_report_text(pm):
    text = pm.hook.roost_format_report(report=make_report(state="needs_input", result="Which DB?", question="Which DB?"))
    assert text == "state: needs_input\nquestion: Which DB?"
    text = pm.hook.roost_format_report(report=make_report(state="failed", result="partial work", error="boom"))
    assert text == (
        "state: failed\nerror: boom\n"
        "next: its run failed, the job stays; a message to it starts it again on the same session, and it reports again as usual\n\npartial work"
    )
    crashed = pm.hook.roost_format_report(report=make_report(state="failed", result="", synthetic=True, reason="crashed", error="worker died during a run (killed by SIGKILL)"))
    assert crashed == (
        "state: failed (its worker crashed during a run)\nerror: worker died during a run (killed by SIGKILL)\n"
        "next: not running now; a message to it starts it again, and it reports again as usual"
    )
    gave_up = pm.hook.roost_format_report(report=make_report(state="failed", result="", synthetic=True, reason="gave_up", crashes=4))
    assert gave_up.startswith("state: failed (its worker crashed 4 times in a row") and "a message to it starts it again" in gave_up
    stopped = pm.hook.roost_format_report(report=make_report(state="ended", result="", synthetic=True, reason="stopped"))
    assert stopped == "state: ended (stopped by the user)\nnext: it runs and reports again only if the user restarts it; a message does not wake it"
    removed = pm.hook.roost_format_report(report=make_report(state="ended", result="", synthetic=True, reason="removed"))
    assert removed.endswith("next: it is gone and will not report again")
    restarted = pm.hook.roost_format_report(report=make_report(state="failed", result="", error="worker died", reason="restarted"))
    assert restarted == "state: failed\nerror: worker died\nnext: its worker was started again for the messages waiting for it; it reports again as usual"
    assert "will not report again" not in crashed + gave_up + stopped


def test_routing_prefers_the_live_holder_then_the_sessions_job_then_keeps(pm):
    report = make_report()
    live = make_peer(id="f7654321", kind="foreground", live=True)
    route = pm.hook.roost_route_report(report=report, candidates=make_candidates(report, live_holder=live))
    assert (route.action, route.target) == ("deliver", "f7654321")
    ended_job = make_peer(id="b1b2b3b4", state="done")
    route = pm.hook.roost_route_report(report=report, candidates=make_candidates(report, session_job=ended_job))
    assert (route.action, route.target, route.wake) == ("queue", "b1b2b3b4", True)
    stopped_job = make_peer(id="b1b2b3b4", state="stopped")
    route = pm.hook.roost_route_report(report=report, candidates=make_candidates(report, session_job=stopped_job))
    assert (route.action, route.wake) == ("queue", False)
    route = pm.hook.roost_route_report(report=report, candidates=make_candidates(report))
    assert route.action == "keep"


def test_synthetic_ended_report_only_for_children(pm):
    report = pm.hook.roost_report_on_end(child=make_child(), reason="stopped")
    assert report.synthetic and report.state == "ended" and report.reason == "stopped"
    # A crashed child is failed (a message starts it again), not ended.
    assert pm.hook.roost_report_on_end(child=make_child(), reason="crashed").state == "failed"
    assert pm.hook.roost_report_on_end(child=make_child(), reason="gave_up").state == "failed"
    assert pm.hook.roost_report_on_end(child=make_peer(id="a1b2c3d4"), reason="stopped") is None


def test_decide_hooks_are_trylast_so_a_team_plugin_wins(pm):
    for name in ("roost_decide_report", "roost_format_report", "roost_route_report", "roost_report_on_end"):
        (impl,) = getattr(pm.hook, name).get_hookimpls()
        assert impl.trylast, name
