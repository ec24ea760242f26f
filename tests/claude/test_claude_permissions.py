"""A background Claude Code job's permission prompt reaches the user: Claude Code asks
roost's permission tool (``--permission-prompt-tool``), the prompt shows in ``roost jobs``
as a dialog with ``allow``/``deny``, and ``roost answer`` decides whether the tool runs.
``claudePermissionPrompts: "none"`` keeps the old behaviour: refused, nobody asked."""

from __future__ import annotations

import json
import subprocess

from claudekit import transcript_entries
from conftest import wait_until
from pikit import roost_bin


def roost(kit, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([roost_bin(), *args], env=kit.env, capture_output=True, text=True, timeout=60)


def tool_results(session: str) -> list[str]:
    """The text of every tool result in a Claude transcript."""
    found = []
    for entry in transcript_entries(session):
        content = (entry.get("message") or {}).get("content") if entry.get("type") == "user" else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                found.append(inner if isinstance(inner, str) else json.dumps(inner))
    return found


def start_asking(claude_kit, tmp_path, name: str):
    """A Claude job whose model runs a Bash command that needs the user's permission (Bash
    is not allowed beforehand); returns the daemon, the job and the file the command makes."""
    claude_kit.env["ROOST_CLAUDE_ARGS"] = ""  # the kit allows Bash; here it must ask
    made = tmp_path / f"{name}.txt"
    claude_kit.fake({"default": {"steps": [{"shell": f"echo ran > {made}"}, {"say": "Done: {input}"}]}})
    daemon = claude_kit.daemon()
    job = daemon.start_job("make the file", host="claude", name=name)
    return daemon, job, made


def test_a_permission_prompt_shows_in_jobs_and_roost_answer_allow_runs_the_tool(claude_kit, tmp_path):
    daemon, job, made = start_asking(claude_kit, tmp_path, "allowed")
    wait_until(lambda: daemon.job(job)["dialog"], timeout=90, what="the permission prompt")
    line = next(line for line in roost(claude_kit, "jobs").stdout.splitlines() if job in line)
    assert f"Claude Code asks to use Bash: echo ran > {made}" in line and "[allow / deny]" in line, line
    assert f"roost answer {job}" in line
    assert not made.exists()  # nothing runs before the user says so
    bad = roost(claude_kit, "answer", job, "sure")
    assert bad.returncode == 1 and bad.stderr.startswith("roost: not_an_option:"), bad.stderr

    answered = roost(claude_kit, "answer", job, "allow")
    assert answered.returncode == 0, answered.stderr
    row = daemon.wait_job(job, "done", timeout=90)
    assert row["summary"] == "Done: make the file" and not row["dialog"], row
    assert made.read_text() == "ran\n"
    assert tool_results(daemon.record(job)["session"]) == ["(Bash completed with no output)"]
    # Claude Code keeps its permission prompt tool from the model.
    assert all("mcp__roost__roost_permission" not in r["tools"] for r in claude_kit.fakes[0].requests())


def test_roost_answer_deny_refuses_the_tool(claude_kit, tmp_path):
    daemon, job, made = start_asking(claude_kit, tmp_path, "denied")
    wait_until(lambda: daemon.job(job)["dialog"], timeout=90, what="the permission prompt")
    assert roost(claude_kit, "answer", job, "deny").returncode == 0
    row = daemon.wait_job(job, "done", timeout=90)
    assert not row["dialog"], row
    assert not made.exists()
    assert any("The user denied this tool call" in text for text in tool_results(daemon.record(job)["session"]))


def test_claude_permission_prompts_none_refuses_without_asking(claude_kit, tmp_path, write_config):
    write_config({"claudePermissionPrompts": "none"})
    daemon, job, made = start_asking(claude_kit, tmp_path, "refused")
    row = daemon.wait_job(job, "done", timeout=90)
    assert not made.exists()
    assert row["summary"] == "Done: make the file" and not row["dialog"], row
    (result,) = tool_results(daemon.record(job)["session"])
    assert "was denied automatically" in result, result


def test_a_prompt_left_open_by_a_dead_claude_does_not_hold_the_job(claude_kit, tmp_path):
    import os
    import signal

    daemon, job, made = start_asking(claude_kit, tmp_path, "orphaned")
    row = wait_until(lambda: (r := daemon.job(job))["dialog"] and r["hostPid"] and r, timeout=90, what="the permission prompt")
    os.kill(row["hostPid"], signal.SIGKILL)
    row = wait_until(lambda: (r := daemon.job(job))["state"] == "failed" and r, timeout=90, what="the run failed")
    assert not row["dialog"] and row["dialogOptions"] is None, row
    # Claude Code writes its transcript a moment after it has the prompt: killed before
    # that, the task is kept for the next run (pending), else it is acknowledged.
    written = any("make the file" in json.dumps(entry.get("message")) for entry in transcript_entries(daemon.record(job)["session"]))
    assert row["pending"] == (0 if written else 1), (row, written)
    # The job takes the next reply (its queue is not held by the dead prompt): Claude Code
    # starts again, and asks again.
    assert roost(claude_kit, "reply", job, "try again").returncode == 0
    wait_until(lambda: daemon.job(job)["dialog"], timeout=90, what="the prompt asked again")
    assert roost(claude_kit, "answer", job, "allow").returncode == 0
    daemon.wait_job(job, "done", timeout=90)  # nothing pending: the task is in the transcript now
    assert made.read_text() == "ran\n"
