"""Background Claude Code jobs (host ``claude``): the real Claude Code in stream-json mode
under a roost worker, against the fake Anthropic server."""

from __future__ import annotations

from claudekit import FAKE_KEY, transcript_entries

from roost_core.claude import prompt_uuid, session_id_of


def test_a_claude_job_runs_its_task_in_its_own_transcript(claude_kit, tmp_path):
    env_dump = tmp_path / "tool-env.txt"
    fake = claude_kit.fake({"default": {"steps": [{"shell": f"env > {env_dump}"}, {"say": "Done: {input}"}]}})
    daemon = claude_kit.daemon()
    job = daemon.start_job("build the thing", host="claude", name="builder")
    row = daemon.wait_job(job, timeout=90)
    assert row["state"] == "done", row
    assert row["summary"] == "Done: build the thing"
    session = daemon.record(job)["session"]
    # The job's session is Claude Code's own transcript, named by its session id.
    assert session.startswith(str(claude_kit.home / ".claude" / "projects"))
    entries = transcript_entries(session)
    prompts = [e for e in entries if e.get("type") == "user" and isinstance((e.get("message") or {}).get("content"), str)]
    assert [p["message"]["content"] for p in prompts] == ["build the thing"]
    assert prompts[0]["uuid"] == prompt_uuid(session_id_of(session), 1)
    tool_env = env_dump.read_text()
    assert "PI_JOB_TOKEN" not in tool_env and daemon.record(job)["token"] not in tool_env
    requests = fake.requests()
    assert {r["apiKey"] for r in requests} == {FAKE_KEY}
    assert {"mcp__roost__roost_agents", "mcp__roost__roost_send", "mcp__roost__roost_spawn", "Bash"} <= set(requests[0]["tools"])
