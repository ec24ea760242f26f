"""One tree, three agent products: a pi parent spawns a Claude Code child and a Codex
child. The Codex child asks its parent a question and is answered; every report reaches
the parent once, framed; ``roost agents`` shows each host. (Gemini CLI and OpenCode join
this tree once their hosts are on main.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import wait_until

sys.path.append(str(Path(__file__).resolve().parent.parent / "claude"))

from roost_core.policy import NO_USER_AUTHORITY

AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


@pytest.fixture
def three_kits(tmp_path, roost_env, daemon_factory):
    """The pi, Claude and Codex kits on one environment: pi first, then Claude (it keeps
    the pi fake's key), then Codex (its own CODEX_HOME and key); HOME stays Claude's."""
    from claudekit import ClaudeKit, need_claude
    from codexkit import CodexKit, codex_bin
    from pikit import PiKit, need_pi

    pi_kit = PiKit(tmp_path, roost_env, daemon_factory, need_pi())
    claude_kit = ClaudeKit(tmp_path, roost_env, daemon_factory, need_claude())
    codex = CodexKit(tmp_path, codex_bin())
    codex.join_roost(roost_env)
    roost_env["HOME"] = str(claude_kit.home)
    yield pi_kit, claude_kit, codex
    try:
        if codex.fake is not None:
            codex.fake.stop()
            assert not codex.fake.violations, codex.fake.violations
        claude_kit.cleanup()
    finally:
        pi_kit.cleanup()


def test_a_pi_parent_with_a_claude_child_and_a_codex_child_that_asks(three_kits, write_config):
    pi_kit, claude_kit, codex = three_kits
    write_config({"agentSpawnHosts": ["pi", "claude", "codex"]})
    scenario = {
        "run": [
            {"match": "^delegate", "steps": [
                {"spawn": {"task": "count the pears", "name": "claude-kid", "host": "claude", "model": "ckid"}},
                {"spawn": {"task": "paint the shed", "name": "codex-kid", "host": "codex", "model": "xkid"}},
                {"say": "spawned two"},
            ]},
            {"kind": "report", "match": "Which colour", "steps": [
                {"send": {"to": "codex-kid", "message": "blue"}},
                {"say": "answered the painter"},
            ]},
        ],
        "default": {"steps": [{"say": "noted {from_name}"}]},
        "models": {
            "ckid": {"default": {"steps": [{"say": "pears: 7"}]}},
            "xkid": {"run": [{"match": "paint", "steps": [{"say": "Which colour, red or blue?"}]}],
                     "default": {"steps": [{"say": "painted it {input}"}]}},
        },
    }
    pi_fake = pi_kit.fake(scenario)
    claude_fake = claude_kit.fake(scenario)
    codex_fake = codex.start_fake(scenario)
    codex.configure()
    daemon = pi_kit.daemon()
    parent = daemon.start_job("delegate the chores", host="pi", name="lead")

    def reports():
        return [e for e in daemon.entries(parent) if e.get("type") == "custom_message" and (e.get("details") or {}).get("kind") == "report"]

    def texts():
        return [e["content"] for e in reports()]

    wait_until(lambda: sum("painted it" in t for t in texts()) and sum("pears: 7" in t for t in texts()), timeout=180,
               what="the painter's second report and the Claude child's report in the parent's transcript")
    daemon.wait_job(parent, timeout=90)
    rows = {row["name"]: row for row in daemon.call("agents")["agents"]}
    kid_c, kid_x = rows["claude-kid"], rows["codex-kid"]
    # The Codex child asked; its parent's answer resumed it, and it answered.
    painted = next(t for t in texts() if "painted it" in t)
    assert "blue" in painted
    # Each report exactly once, framed as an agent message from the child.
    got = reports()
    assert sorted(e["details"]["fromName"] for e in got) == ["claude-kid", "codex-kid", "codex-kid"], [e["content"] for e in got]
    assert sum("Which colour, red or blue?" in t for t in texts()) == 1
    assert sum("painted it" in t for t in texts()) == 1
    assert sum("pears: 7" in t for t in texts()) == 1
    assert len({e["details"]["seq"] for e in got}) == 3
    assert all(e["details"]["relation"] == "child" and AUTHORITY_LINE in e["content"] for e in got)
    assert all('<agent-message from="' in e["content"] and 'kind="report"' in e["content"] for e in got)
    # Each child ran on its own product, against its own fake.
    assert {r["model"] for r in claude_fake.requests()} == {"ckid"}
    assert {r["model"] for r in codex_fake.requests()} == {"xkid"}
    assert "fake-model" in {r["model"] for r in pi_fake.requests()}
    # roost agents shows the tree with each host.
    assert (kid_c["host"], kid_x["host"], rows["lead"]["host"]) == ("claude", "codex", "pi")
    assert kid_c["parent"] == parent and kid_x["parent"] == parent
    shown = pi_kit.roost("agents").stdout
    lines = shown.splitlines()
    lead_at = next(i for i, line in enumerate(lines) if f"lead ({parent}) [pi]" in line)
    children = lines[lead_at + 1 : lead_at + 3]
    assert any(f"claude-kid ({kid_c['id']}) [claude]" in line and "↳" in line for line in children), shown
    assert any(f"codex-kid ({kid_x['id']}) [codex]" in line and "↳" in line for line in children), shown
