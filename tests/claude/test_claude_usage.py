"""A Claude Code child's usage counts in its tree's budget, as a pi child's does: the job
reports the tokens and cost its session spent (from Claude Code's transcript and results),
and once the tree's budget is spent its next spawn is refused. The real Claude Code, the
fake Anthropic server reporting usage as the real API does."""

from __future__ import annotations

from conftest import wait_until
from fg import in_thread, run_async, session, spawn


def test_a_claude_childs_usage_counts_in_its_trees_budget(claude_kit, write_config, tmp_path):
    write_config({"agentTreeTokens": 1000})
    fake = claude_kit.fake({"default": {"steps": [{"shell": "true"}, {"say": "spent: {input}"}]}})
    daemon = claude_kit.daemon()

    def fake_tokens() -> int:
        return sum(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in fake.requests() if r["usage"])

    async def story():
        async with session(daemon, tmp_path, name="lead") as lead:
            kid = await spawn(lead, "spend some tokens", "kid", host="claude")
            await in_thread(daemon.wait_job, kid, timeout=120)
            # What the model answered (and reported) is what the job reports it spent.
            row = await in_thread(wait_until, lambda: (r := daemon.job(kid))["usage"] and r["usage"]["tokens"] == fake_tokens() and r, 30,
                                  what="the kid's usage")
            assert row["usage"]["tokens"] > 1000 and row["usage"]["cost"] > 0
            tree = {r["name"]: r for r in daemon.call("agents")["agents"]}["lead"]["treeUsage"]
            assert tree["tokens"] == row["usage"]["tokens"] and tree["cost"] == row["usage"]["cost"] and tree["spent"] is True
            # The tree has spent its budget: the lead may not spawn again.
            ok, text, _ = await lead.call_tool("roost_spawn", {"task": "more"})
            assert not ok and text.startswith("error (budget_spent)"), text
            return row

    run_async(story)
