"""Issue 16 on the pinned real pi (background jobs, host ``pi``) with the fake model:
scoped broadcast, replies, delivery modes, watches and a tree budget, each through the
roost tools as pi's model calls them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import wait_until
from fg import in_thread, run_async, session, spawn
from pikit import COST_PER_CALL, agent_items, message_text, slow_tool_scenario

from roost_plugins.envelope import parse_envelopes


def framed(request: dict) -> list[dict]:
    """The envelopes in one model request's messages."""
    found = []
    for message in request["messages"]:
        if message.get("role") == "user":
            found.extend(parse_envelopes(message_text(message)))
    return found


def tool_errors(entries, tool: str) -> list[str]:
    return [
        message_text(e["message"])
        for e in entries
        if e.get("type") == "message" and e["message"].get("role") == "toolResult" and e["message"].get("toolName") == tool and e["message"].get("isError")
    ]


def test_pi_broadcast_reaches_each_child_once_and_cannot_chain(pi_kit, tmp_path):
    gate = tmp_path / "gate"
    scenario = {
        "run": [
            {
                "steps": [
                    {"spawn": {"task": "get ready", "name": "kid-a", "model": "kid"}},
                    {"spawn": {"task": "get ready", "name": "kid-b", "model": "kid"}},
                    {"wait_for": str(gate)},
                    {"send": {"to": "*children", "message": "status please"}},
                    {"say": "broadcast sent"},
                ]
            }
        ],
        "default": {"steps": [{"say": "noted"}]},
        "models": {
            "kid": {
                "run": [{"match": "status please", "steps": [{"send": {"to": "*siblings", "message": "pass it on"}}, {"say": "tried"}]}],
                "default": {"steps": [{"say": "ready"}]},
            }
        },
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    lead = daemon.start_job("coordinate", host="pi", name="lead")
    kids = wait_until(lambda: [r for r in daemon.call("jobs")["jobs"] if r["name"].startswith("kid-")] if len([r for r in daemon.call("jobs")["jobs"] if r["name"].startswith("kid-")]) == 2 else None, 90, what="two kids")
    for kid in kids:
        daemon.wait_job(kid["id"], timeout=90)
    gate.write_text("go")

    def handled(kid_id):
        return [i for i in agent_items(daemon.entries(kid_id)) if i["details"]["kind"] == "message"]

    for kid in kids:
        wait_until(lambda kid=kid: handled(kid["id"]) and daemon.job(kid["id"])["state"] != "running" and daemon.job(kid["id"])["pending"] == 0, 90, what="the broadcast handled")
    for kid in kids:
        (item,) = handled(kid["id"])
        assert item["details"]["scope"] == "children"
        (envelope,) = parse_envelopes(item["content"])
        assert envelope["body"] == "status please" and envelope["relation"] == "parent"
        # pi's model called roost_send with *siblings in the run the broadcast started: refused.
        (error,) = tool_errors(daemon.entries(kid["id"]), "roost_send")
        assert "broadcast_chain" in error
    ids = {item["details"]["id"] for kid in kids for item in handled(kid["id"])}
    assert len(ids) == 1  # one message id for the whole broadcast
    # The kids' model calls saw the broadcast framed once each, and nothing from each other.
    kid_requests = [r for r in fake.requests() if r["model"] == "kid"]
    bodies = [e["body"] for r in kid_requests for e in framed(r)]
    assert "pass it on" not in bodies and "status please" in bodies
    daemon.wait_job(lead, timeout=60)


def test_pi_reply_carries_reply_to_and_roost_log_shows_the_thread(pi_kit):
    scenario = {
        "run": [
            {
                "steps": [
                    {"spawn": {"task": "get ready", "name": "answerer", "model": "answerer"}},
                    {"send": {"to": "answerer", "message": "what is 2+2?"}},
                    {"say": "asked"},
                ]
            }
        ],
        "default": {"steps": [{"say": "thanks: {input}"}]},
        "models": {
            "answerer": {
                "run": [{"match": r"2\+2", "steps": [{"send": {"to": "{from}", "message": "4", "reply_to": "{msg}"}}, {"say": "answered"}]}],
                "default": {"steps": [{"say": "ready"}]},
            }
        },
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    asker = daemon.start_job("find out 2+2", host="pi", name="asker")

    def replies():
        return [i for i in agent_items(daemon.entries(asker)) if i["details"]["kind"] == "message"]

    wait_until(replies, 120, what="the answer in the asker's session")
    daemon.wait_job(asker, timeout=90)
    (reply,) = replies()
    question_id = reply["details"]["replyTo"]
    assert question_id and question_id.startswith("m")
    assert reply["details"]["replyQuote"] == "what is 2+2?"
    # The asker's model read the id it is answered about in the frame.
    seen = [e for r in fake.requests() if r["model"] == "fake-model" for e in framed(r) if e["body"] == "4"]
    assert seen and seen[0]["reply_to"] == question_id
    # The answerer's model got the question with that id as its msg.
    asked = [e for r in fake.requests() if r["model"] == "answerer" for e in framed(r) if e["body"] == "what is 2+2?"]
    assert asked and asked[0]["msg"] == question_id
    log = subprocess.run([sys.executable, "-m", "roost_core.cli", "log", asker], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert f"↪ re {question_id} “what is 2+2?”" in log.stdout, log.stdout


def test_pi_follow_up_lands_after_the_run_and_urgent_before_the_next_model_call(pi_kit, tmp_path):
    gate = tmp_path / "gate"
    fake = pi_kit.fake(slow_tool_scenario(gate))
    daemon = pi_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "do the slow thing", "slowpoke", host="pi")
            await in_thread(wait_until, lambda: len(fake.requests()) >= 1, 60, what="the first model call")
            ok, text, data = await lead.call_tool("roost_send", {"to": kid, "message": "later please", "urgent": False})
            assert ok and data["result"] == "delivered", text
            ok, text, data = await lead.call_tool("roost_send", {"to": kid, "message": "now please", "urgent": True})
            assert ok and data["result"] == "delivered", text
            gate.write_text("go")
            await in_thread(wait_until, lambda: daemon.job(kid)["pending"] == 0 and daemon.job(kid)["state"] != "running", 90, what="both handled")
            return kid

    run_async(story)
    requests = [r for r in fake.requests() if r["model"] == "fake-model"]
    bodies = [[e["body"] for e in framed(r)] for r in requests]
    # Call 2 (right after the slow tool) has the urgent one, not the follow-up.
    assert requests[0]["reply"].get("tool", [None])[0] == "bash"
    assert bodies[1] == ["now please"] and requests[1]["reply"]["text"] == "after the slow tool"
    # The follow-up came once that run had ended, as the start of a new run.
    later = next(n for n, b in enumerate(bodies) if "later please" in b)
    assert later >= 2 and requests[later]["reply"]["text"] == "ok: later please"


def test_pi_watch_fires_exactly_once(pi_kit, tmp_path):
    gate = tmp_path / "gate"
    scenario = {
        "run": [
            {"steps": [{"spawn": {"task": "slow work", "name": "kid", "model": "kid"}}, {"agents": {"watch": "kid"}}, {"say": "watching"}]},
        ],
        "default": {"steps": [{"say": "noted {kind}"}]},
        "models": {"kid": {"run": [{"steps": [{"wait_for": str(gate)}, {"say": "slow work done"}]}], "default": {"steps": [{"say": "again: {input}"}]}}},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    lead = daemon.start_job("watch a child", host="pi", name="lead")
    kid = wait_until(lambda: next((r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == "kid"), None), 90, what="the kid")
    wait_until(lambda: daemon.job(lead)["state"] != "running", 90, what="the lead's first run")
    watch_results = [message_text(e["message"]) for e in daemon.entries(lead) if e.get("type") == "message" and e["message"].get("toolName") == "roost_agents"]
    assert watch_results and f"watching kid ({kid})" in watch_results[0], watch_results
    gate.write_text("go")

    def notices():
        return [i for i in agent_items(daemon.entries(lead)) if i["details"]["kind"] == "notice"]

    wait_until(notices, 90, what="the notice")
    # The kid runs again (a user reply) and settles again: no second notice.
    daemon.wait_job(kid, timeout=60)
    daemon.call("reply", job=kid, text="one more thing")
    wait_until(lambda: len([i for i in agent_items(daemon.entries(lead)) if i["details"]["kind"] == "report"]) >= 2, 90, what="the second report")
    daemon.wait_job(lead, timeout=60)
    assert len(notices()) == 1
    (notice,) = notices()
    (envelope,) = parse_envelopes(notice["content"])
    assert envelope["from"] == "kid" and envelope["relation"] == "child" and "settled" in envelope["body"]
    seen = {e["body"] for r in fake.requests() if r["model"] == "fake-model" for e in framed(r) if e["kind"] == "notice"}
    assert len(seen) == 1


#: The root spawns a kid that spends (a tool call, then an answer); told by roost that its
#: tree's budget is spent, the root tries to spawn another kid.
OVER_BUDGET = {
    "run": [
        {"steps": [{"spawn": {"task": "spend", "name": "kid", "model": "kid"}}, {"say": "spawned"}]},
        {"kind": "report", "match": "budget spent", "steps": [{"spawn": {"task": "more", "name": "kid-2", "model": "kid"}}, {"say": "tried again"}]},
    ],
    "default": {"steps": [{"say": "noted"}]},
    "models": {"kid": {"default": {"steps": [{"shell": "true"}, {"say": "spent"}]}}},
}


def refused_over_budget(daemon) -> tuple[str, dict, str]:
    """Start the root of :data:`OVER_BUDGET` and wait until roost has told it, once, that its
    budget is spent and has refused its second spawn, once; no ``kid-2`` exists. Returns the
    root's id, the envelope of roost's report and the refused spawn's error."""
    root = daemon.start_job("delegate", host="pi", name="root")

    def told():
        return [i for i in agent_items(daemon.entries(root)) if i["details"].get("from") == "roost"]

    wait_until(told, 120, what="the root's budget report")
    wait_until(lambda: tool_errors(daemon.entries(root), "roost_spawn"), 90, what="the refused spawn")
    (report,) = told()
    (envelope,) = parse_envelopes(report["content"])
    (error,) = tool_errors(daemon.entries(root), "roost_spawn")
    assert not [r for r in daemon.call("jobs")["jobs"] if r["name"] == "kid-2"]
    return root, envelope, error


def test_pi_tree_over_budget_is_refused_and_its_root_is_told(pi_kit, write_config):
    # Every fake model call reports 15 tokens (10 in, 5 out).
    write_config({"agentTreeTokens": 50})
    fake = pi_kit.fake(OVER_BUDGET)
    daemon = pi_kit.daemon()
    _root, envelope, error = refused_over_budget(daemon)
    assert envelope["kind"] == "report" and envelope["relation"] == "system" and "agentTreeTokens" in envelope["body"]
    assert "budget_spent" in error
    rows = {row["name"]: row for row in daemon.call("agents")["agents"]}
    # The usage comes from pi's own records: 15 tokens per model call.
    assert rows["kid"]["usage"]["tokens"] % 15 == 0 and rows["kid"]["usage"]["tokens"] >= 30
    assert rows["root"]["treeUsage"]["spent"] is True and rows["root"]["treeUsage"]["tokens"] >= 50
    assert any('from="roost"' in message_text(m) for r in fake.requests() for m in r["messages"] if m.get("role") == "user")


def test_pi_tree_over_its_cost_budget_is_refused(pi_kit, write_config):
    # pi prices every fake call (COST_PER_CALL); the tree may spend three calls' worth.
    write_config({"agentTreeCost": 3 * COST_PER_CALL})
    pi_kit.fake(OVER_BUDGET)
    daemon = pi_kit.daemon()
    root, envelope, error = refused_over_budget(daemon)
    assert "budget spent" in envelope["body"] and "agentTreeCost" in envelope["body"], envelope["body"]
    assert "budget_spent" in error and "agentTreeCost" in error
    kid = next(r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == "kid")
    for job in (root, kid):
        daemon.wait_job(job, timeout=60)
    rows = {row["name"]: row for row in daemon.call("agents")["agents"]}
    # The cost is pi's own record of each call, priced by the model's cost table.
    for name in ("root", "kid"):
        usage = rows[name]["usage"]
        calls = usage["tokens"] // 15
        assert calls >= 1 and usage["cost"] == pytest.approx(calls * COST_PER_CALL), (name, usage)
    tree = rows["root"]["treeUsage"]
    assert tree["spent"] is True and tree["cost"] == pytest.approx(rows["root"]["usage"]["cost"] + rows["kid"]["usage"]["cost"])
    assert tree["cost"] >= 3 * COST_PER_CALL


def test_pi_tree_broadcast_reaches_every_live_peer_of_the_tree_once(pi_kit, tmp_path):
    # lead -> kid-a -> grandkid, and lead -> kid-b: the grandkid's *tree reaches its parent,
    # its grandparent and its aunt, each once, and nobody outside the tree.
    gate = tmp_path / "gate"
    scenario = {
        "run": [{"match": "^coordinate", "steps": [{"spawn": {"task": "lead a team", "name": "kid-a", "model": "kida"}},
                           {"spawn": {"task": "stand by", "name": "kid-b", "model": "kidb"}}, {"say": "spawned"}]}],
        "default": {"steps": [{"say": "noted: {input}"}]},
        "models": {
            "kida": {"run": [{"match": "lead a team", "steps": [{"spawn": {"task": "report to all", "name": "grandkid", "model": "gk"}}, {"say": "spawned gk"}]}],
                     "default": {"steps": [{"say": "noted: {input}"}]}},
            "kidb": {"default": {"steps": [{"say": "noted: {input}"}]}},
            "gk": {"run": [{"match": "report to all", "steps": [{"wait_for": str(gate)}, {"send": {"to": "*tree", "message": "all hands"}}, {"say": "told the tree"}]}],
                   "default": {"steps": [{"say": "noted: {input}"}]}},
        },
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    outsider = daemon.start_job("stand apart", host="pi", name="outsider")
    lead = daemon.start_job("coordinate", host="pi", name="lead")

    def job_id(name):
        return next((r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == name), None)

    grandkid = wait_until(lambda: job_id("grandkid"), 120, what="the grandkid")
    others = {name: wait_until(lambda name=name: job_id(name), 60, what=name) for name in ("kid-a", "kid-b")}
    others["lead"] = lead
    for job in [*others.values(), outsider]:
        daemon.wait_job(job, timeout=90)
    wait_until(lambda: daemon.job(grandkid)["state"] == "running", 60, what="the grandkid waiting")
    gate.write_text("go")
    daemon.wait_job(grandkid, timeout=90)

    def tree_items(job):
        return [i for i in agent_items(daemon.entries(job)) if i["details"]["kind"] == "message" and i["details"].get("scope") == "tree"]

    for name, job in others.items():
        wait_until(lambda job=job: tree_items(job) and daemon.job(job)["pending"] == 0, 90, what=f"{name} got the broadcast")
    ids = set()
    for name, job in others.items():
        (item,) = tree_items(job)
        (envelope,) = parse_envelopes(item["content"])
        assert envelope["body"] == "all hands" and envelope["from"] == "grandkid", (name, envelope)
        ids.add(item["details"]["id"])
    assert len(ids) == 1  # one message id for the whole broadcast
    assert not tree_items(outsider) and not tree_items(grandkid)
    # The grandkid's model read the receivers in its tool's result.
    (result,) = [message_text(e["message"]) for e in daemon.entries(grandkid) if e.get("type") == "message" and e["message"].get("toolName") == "roost_send"]
    assert all(name in result for name in others) and "outsider" not in result, result
    # Each receiver's model saw it once.
    for name, model in (("lead", "fake-model"), ("kid-a", "kida"), ("kid-b", "kidb")):
        last = [r for r in fake.requests() if r["model"] == model][-1]
        assert [e["body"] for e in framed(last)].count("all hands") == 1, name
