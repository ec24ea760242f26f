"""One tree, two agent products: a pi parent spawns a Claude Code child and a pi child.
The same reach, limits, envelope, hand-back and rendering plugins serve both hosts."""

from __future__ import annotations

import json

from claudekit import transcript_entries
from conftest import wait_until
from pikit import delegating_parent, reports_to
from test_claude_background import hook_contexts

from roost_core.policy import NO_USER_AUTHORITY

AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


def test_a_pi_parent_with_a_claude_child_and_a_pi_child(mixed_kits, write_config, tmp_path):
    pi_kit, claude_kit = mixed_kits
    write_config({"agentSpawnHosts": ["pi", "claude"]})
    spawns = [
        {"task": "paint the shed", "name": "claude-kid", "host": "claude", "model": "ckid"},
        {"task": "count the pears", "name": "pi-kid", "model": "pkid"},
    ]
    scenario = delegating_parent(spawns, "spawned two", asker="claude-kid", models={
        "ckid": {"run": [{"steps": [{"say": "Which colour, red or blue?"}]}], "default": {"steps": [{"say": "painted it {input}"}]}},
        "pkid": {"default": {"steps": [{"say": "pears: 7"}]}},
    })
    pi_fake = pi_kit.fake(scenario)
    claude_fake = claude_kit.fake(scenario)
    daemon = pi_kit.daemon()
    parent = daemon.start_job("delegate the chores", host="pi", name="lead")

    def texts():
        return [e["content"] for e in reports_to(daemon, parent)]

    wait_until(lambda: sum("painted it blue" in t for t in texts()) and sum("pears: 7" in t for t in texts()), timeout=180,
               what="the painter's second report and the pi child's report in the parent's transcript")
    daemon.wait_job(parent, timeout=90)
    rows = {row["name"]: row for row in daemon.call("agents")["agents"]}
    kid_c, kid_p = rows["claude-kid"], rows["pi-kid"]
    # Each report exactly once, framed as an agent message from the child.
    got = reports_to(daemon, parent)
    by_sender = sorted((e["details"]["fromName"], e["content"]) for e in got)
    assert [name for name, _ in by_sender] == ["claude-kid", "claude-kid", "pi-kid"], by_sender
    assert sum("Which colour, red or blue?" in t for t in texts()) == 1
    assert sum("painted it blue" in t for t in texts()) == 1
    assert sum("pears: 7" in t for t in texts()) == 1
    assert len({e["details"]["seq"] for e in got}) == 3
    assert all(e["details"]["relation"] == "child" and AUTHORITY_LINE in e["content"] for e in got)
    assert all('<agent-message from="' in e["content"] and 'kind="report"' in e["content"] for e in got)
    # The parent answered with roost_send; the Claude child got the answer as hook context
    # (never as the user's words) and its answer-started run reported.
    claude_entries = transcript_entries(daemon.record(kid_c["id"])["session"])
    contexts = hook_contexts(claude_entries)
    assert [event for event, _, _ in contexts] == ["UserPromptSubmit"]
    assert "blue" in contexts[0][2] and 'relation="parent"' in contexts[0][2]
    assert {r["model"] for r in claude_fake.requests()} == {"ckid"}
    assert {"pkid", "fake-model"} <= {r["model"] for r in pi_fake.requests()}
    # roost agents shows the tree with each host.
    assert kid_c["host"] == "claude" and kid_p["host"] == "pi" and rows["lead"]["host"] == "pi"
    assert kid_c["parent"] == parent and kid_p["parent"] == parent
    shown = pi_kit.roost("agents").stdout
    lines = shown.splitlines()
    lead_at = next(i for i, line in enumerate(lines) if f"lead ({parent}) [pi]" in line)
    children = lines[lead_at + 1 : lead_at + 3]
    assert any(f"↳ ● claude-kid ({kid_c['id']}) [claude]" in line or f"↳ ○ claude-kid ({kid_c['id']}) [claude]" in line for line in children), shown
    assert any(f"pi-kid ({kid_p['id']}) [pi]" in line and "↳" in line for line in children), shown
    # What the parent's model saw: the reports as framed agent input.
    seen = json.dumps([r["messages"] for r in pi_fake.requests() if r["model"] == "fake-model"])
    assert "painted it blue" in seen and "pears: 7" in seen
