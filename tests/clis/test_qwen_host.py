"""roost's ``qwen`` host (``roost_plugins.qwen``): background jobs on the pinned real Qwen
Code against the fake chat-completions API, through the user's path (``roost start --host
qwen``, a parent's ``roost_spawn``), and ``roost qwen install | uninstall``."""

from __future__ import annotations

import json
import subprocess

from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn
from pikit import roost_bin
from clifake import scripted
from qwenkit import session_records

from roost_core.policy import NO_USER_AUTHORITY

AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


def prompts(records):
    """The prompts the session holds (user records' texts)."""
    return ["".join(p.get("text", "") for p in r["message"]["parts"]) for r in records if r.get("type") == "user" and not r.get("subtype")]


def tool_outputs(records):
    return [p["functionResponse"]["response"].get("output", "") for r in records if r.get("type") == "tool_result" for p in r["message"]["parts"] if "functionResponse" in p]


def test_roost_start_runs_qwen_code_in_its_own_session_and_roost_log_renders_it(qwen_host):
    fake = qwen_host.fake({"default": {"steps": [{"say": "Done: {input}"}]}})
    daemon = qwen_host.daemon()
    started = subprocess.run([roost_bin(), "start", "--host", "qwen", "--name", "builder", "--json", "build the thing"],
                             env=qwen_host.env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    job = json.loads(started.stdout)["id"]
    row = daemon.wait_job(job, timeout=90)
    assert row["state"] == "done", row
    assert row["summary"] == "Done: build the thing"
    session_file = daemon.record(job)["session"]
    # Qwen Code's own session file, named by its session id (--session-id).
    assert session_file.startswith(str(qwen_host.home / ".qwen" / "projects")) and "/chats/" in session_file
    records = session_records(session_file)
    assert prompts(records) == ["[roost seq 1]\nbuild the thing"]
    [request] = scripted(fake)
    # roost's tools reach the model through Qwen Code's MCP client (deferred: named in
    # the conversation, called through tool_call).
    assert "tool_call" in [t["function"]["name"] for t in request["body"]["tools"]]
    assert "mcp__roost__roost_agents" in json.dumps(request["body"]["messages"])
    # Usage: the answer's tokens, the job's and its tree's.
    wait_until(lambda: (daemon.job(job)["usage"] or {}).get("tokens") == 15, 30, what="the job's usage")
    shown = subprocess.run([roost_bin(), "log", job], env=qwen_host.env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == ["› you: build the thing", "assistant: Done: build the thing"]
