"""One tree, four agent products: a pi parent spawns a Claude Code child, a Codex child and
an OpenCode child. The Codex child asks its parent a question and is answered; every report
reaches the parent once, framed; ``roost agents`` shows each host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import wait_until

sys.path.append(str(Path(__file__).resolve().parent.parent / "claude"))

from clifake import scripted
from pikit import delegating_parent, reports_to

from roost_core.policy import NO_USER_AUTHORITY

# Four real agent CLIs start on a shared machine (an OpenCode server alone takes several
# seconds on a loaded one), and the fakes answer every model call.
pytestmark = pytest.mark.timeout(300)
AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


@pytest.fixture
def four_kits(tmp_path, roost_env, daemon_factory):
    """The pi, Claude, Codex and OpenCode kits on one environment: pi first, then Claude
    (it keeps the pi fake's key), then Codex (its own CODEX_HOME and key), then OpenCode
    (its own XDG folders, taken into the environment once configured); HOME stays Claude's."""
    from claudekit import ClaudeKit, need_claude
    from codexkit import CodexKit, codex_bin
    from opencodekit import OpenCodeKit, opencode_bin
    from pikit import PiKit, need_pi

    pi_kit = PiKit(tmp_path, roost_env, daemon_factory, need_pi())
    claude_kit = ClaudeKit(tmp_path, roost_env, daemon_factory, need_claude())
    codex = CodexKit(tmp_path, codex_bin())
    codex.join_roost(roost_env)
    opencode = OpenCodeKit(tmp_path, opencode_bin())
    roost_env["ROOST_OPENCODE_BIN"] = opencode.binary
    roost_env["HOME"] = str(claude_kit.home)
    yield pi_kit, claude_kit, codex, opencode
    try:
        for kit in (codex, opencode):
            if kit.fake is not None:
                kit.fake.stop()
                assert not kit.fake.violations, kit.fake.violations
        claude_kit.cleanup()
    finally:
        pi_kit.cleanup()


def test_a_pi_parent_with_claude_codex_and_opencode_children_one_of_which_asks(four_kits, roost_env, write_config):
    pi_kit, claude_kit, codex, opencode = four_kits
    write_config({"agentSpawnHosts": ["pi", "claude", "codex", "opencode"]})
    spawns = [
        {"task": "count the pears", "name": "claude-kid", "host": "claude", "model": "ckid"},
        {"task": "paint the shed", "name": "codex-kid", "host": "codex", "model": "xkid"},
        {"task": "count the apples", "name": "opencode-kid", "host": "opencode", "model": "fake/okid"},
    ]
    scenario = delegating_parent(spawns, "spawned three", asker="codex-kid", models={
        "ckid": {"default": {"steps": [{"say": "pears: 7"}]}},
        "okid": {"default": {"steps": [{"say": "apples: 3"}]}},
        "xkid": {"run": [{"match": "paint", "steps": [{"say": "Which colour, red or blue?"}]}],
                 "default": {"steps": [{"say": "painted it {input}"}]}},
    })
    pi_fake = pi_kit.fake(scenario)
    claude_fake = claude_kit.fake(scenario)
    codex_fake = codex.start_fake(scenario)
    codex.configure()
    opencode_fake = opencode.start_fake(scenario)
    opencode.configure(model="okid")
    roost_env.update({k: v for k, v in opencode.env.items() if k.startswith(("XDG_", "OPENCODE_"))})
    daemon = pi_kit.daemon()
    parent = daemon.start_job("delegate the chores", host="pi", name="lead")

    def texts():
        return [e["content"] for e in reports_to(daemon, parent)]

    wait_until(lambda: all(any(said in t for t in texts()) for said in ("painted it", "pears: 7", "apples: 3")), timeout=240,
               what="the painter's second report and the Claude and OpenCode children's reports in the parent's transcript")
    daemon.wait_job(parent, timeout=90)
    rows = {row["name"]: row for row in daemon.call("agents")["agents"]}
    kid_c, kid_x, kid_o = rows["claude-kid"], rows["codex-kid"], rows["opencode-kid"]
    # The Codex child asked; its parent's answer resumed it, and it answered.
    painted = next(t for t in texts() if "painted it" in t)
    assert "blue" in painted
    # Each report exactly once, framed as an agent message from the child.
    got = reports_to(daemon, parent)
    assert sorted(e["details"]["fromName"] for e in got) == ["claude-kid", "codex-kid", "codex-kid", "opencode-kid"], [e["content"] for e in got]
    assert sum("Which colour, red or blue?" in t for t in texts()) == 1
    assert sum("painted it" in t for t in texts()) == 1
    assert sum("pears: 7" in t for t in texts()) == 1
    assert sum("apples: 3" in t for t in texts()) == 1
    assert len({e["details"]["seq"] for e in got}) == 4
    assert all(e["details"]["relation"] == "child" and AUTHORITY_LINE in e["content"] for e in got)
    assert all('<agent-message from="' in e["content"] and 'kind="report"' in e["content"] for e in got)
    # Each child ran on its own product, against its own fake.
    assert {r["model"] for r in claude_fake.requests()} == {"ckid"}
    assert {r["model"] for r in codex_fake.requests()} == {"xkid"}
    assert {r["body"]["model"] for r in scripted(opencode_fake)} == {"okid"}
    assert "fake-model" in {r["model"] for r in pi_fake.requests()}
    # roost agents shows the tree with each host.
    assert (kid_c["host"], kid_x["host"], kid_o["host"], rows["lead"]["host"]) == ("claude", "codex", "opencode", "pi")
    assert kid_c["parent"] == kid_x["parent"] == kid_o["parent"] == parent
    shown = pi_kit.roost("agents").stdout
    lines = shown.splitlines()
    lead_at = next(i for i, line in enumerate(lines) if f"lead ({parent}) [pi]" in line)
    children = lines[lead_at + 1 : lead_at + 4]
    assert any(f"claude-kid ({kid_c['id']}) [claude]" in line and "↳" in line for line in children), shown
    assert any(f"codex-kid ({kid_x['id']}) [codex]" in line and "↳" in line for line in children), shown
    assert any(f"opencode-kid ({kid_o['id']}) [opencode]" in line and "↳" in line for line in children), shown
