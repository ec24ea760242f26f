"""roost's ``gemini`` host against the pinned Gemini CLI and the fake Gemini API: a job
runs headless Gemini CLI in its own session, the roost tools reach it through ``roost mcp``,
items arrive mid-turn through its hooks, exactly once, and ``roost log`` renders it."""

from __future__ import annotations

from clifake import scripted, users


def test_a_gemini_job_runs_its_task_with_roosts_tools_and_renders_in_roost_log(gemini_host):
    fake = gemini_host.start_fake({"default": {"steps": [{"say": "Done: {input}"}]}})
    daemon = gemini_host.daemon()
    job = daemon.start_job("build the thing", host="gemini", name="builder")
    row = daemon.wait_job(job, timeout=90)
    assert row["state"] == "done", row
    assert row["summary"] == "Done: build the thing"
    [request] = scripted(fake)
    assert users(request) == ["build the thing"]
    names = {d["name"] for group in request["body"]["tools"] for d in group.get("functionDeclarations", [])}
    assert {"mcp_roost_roost_agents", "mcp_roost_roost_send", "mcp_roost_roost_spawn"} <= names
    # roost log: the prompt (without roost's marker line) and the answer.
    assert gemini_host.log_lines(job) == ["› you: build the thing", "assistant: Done: build the thing"]
    # The usage of the session's answers counts toward the job.
    assert (daemon.job(job)["usage"] or {}).get("tokens") == 110
