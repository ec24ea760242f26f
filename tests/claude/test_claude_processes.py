"""Nothing a Claude job started outlives its run's end (issue 39.9), with the real Claude
Code: the rule pi jobs keep (``tests/pi/test_pi_processes.py``).

The fake model has Claude Code's Bash tool run a long ``sleep``; then ``kill -9`` of the
``claude`` process. The test walks /proc itself (``proctools``, never roost's
bookkeeping): once the job says ``failed``, the Bash tool's processes are gone and the
MCP servers Claude Code had started are reaped (no zombie waits for the worker's exit).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
import uuid

import proctools
import pytest
from conftest import wait_until

NAMES: list[str] = []


@pytest.fixture(autouse=True)
def no_sleeper_survives_a_failed_test():
    yield
    proctools.kill_named(NAMES)


def jobs_json(claude_kit) -> dict[str, dict]:
    """``roost jobs --json``, as a user runs it."""
    import subprocess

    from pikit import roost_bin

    result = subprocess.run([roost_bin(), "jobs", "--json"], env=claude_kit.env, capture_output=True, text=True, timeout=60, check=True)
    return {row["id"]: row for row in json.loads(result.stdout)}


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode(errors="replace")


def sleepers(name: str) -> set[proctools.Proc]:
    """The processes running as ``name`` (their argv[0]; the shells that started them
    hold it in their command line too)."""
    found = set()
    for p in proctools.with_cmdline(name):
        try:
            if cmdline(p[0]).split()[0] == name:
                found.add(p)
        except (OSError, IndexError):
            continue
    return found


def in_proc_table(p: proctools.Proc) -> bool:
    """True while ``p`` has an entry in the process table, a zombie included (it is not reaped)."""
    return proctools.listed(p)


def test_kill9_of_claude_ends_its_bash_tool_and_reaps_its_mcp_servers(claude_kit, tmp_path):
    name = f"roost-sleeper-{uuid.uuid4().hex[:12]}"
    NAMES.append(name)
    # The tool's own shell waits for a bash that runs as ``name``, deaf to SIGTERM (so
    # it outlasts a first SIGTERM: only the end of the sweep ends it).
    command = f"bash -c 'trap \"\" TERM; exec -a {name} sleep 300'; echo woke"
    claude_kit.fake({"default": {"steps": [{"shell": command}, {"say": "slept"}]}})
    daemon = claude_kit.daemon()
    job = daemon.start_job("sleep a while", host="claude")
    (sleeper,) = wait_until(lambda: sleepers(name), timeout=90, what="the Bash tool's sleep running")
    row = jobs_json(claude_kit)[job]
    assert row["state"] == "running"
    # jobs --json names the claude process while it runs, a child of the worker.
    claude = proctools.proc(row["hostPid"]) if row["hostPid"] else None
    assert claude is not None, f"no live host pid in jobs --json: {row}"
    assert proctools.parent(claude[0]) == row["workerPid"]
    assert "claude" in cmdline(claude[0])
    everything = proctools.tree(claude[0])
    assert sleeper in everything
    tool = {p for p in everything if p[0] == proctools.parent(sleeper[0])}
    assert tool, "the Bash tool's shell is not the sleeper's parent"
    mcp_servers = {p for p in everything if "roost_core.mcp" in cmdline(p[0])}
    assert mcp_servers, "Claude Code started no roost MCP server"
    proctools.kill9(claude[0])
    # Failed, and its task acknowledged: the transcript holds it.
    row = daemon.wait_job(job, "failed", timeout=60)
    assert "claude exited" in (row["error"] or ""), row
    # By the time the job says failed, its run has ended, and with it everything it started.
    left = {p for p in everything if proctools.alive(p)}
    assert left == set(), f"alive after the job failed: {[(p[0], cmdline(p[0])) for p in left]}"
    assert not proctools.with_cmdline(name)
    unreaped = {p for p in mcp_servers if in_proc_table(p)}
    assert unreaped == set(), f"MCP servers not reaped: {unreaped}"
    row = jobs_json(claude_kit)[job]
    assert row["hostPid"] is None and row["workerPid"] is not None


def test_a_task_claude_never_wrote_down_before_it_died_is_kept_for_the_next_run(claude_kit, tmp_path):
    """Claude Code killed before its transcript holds the task (here before it even
    starts: a wrapper holds it until a gate file appears): the job fails and keeps the
    task (pending, not lost, not run again by itself), and the next reply's run hands the
    model both, the task once."""
    gate = tmp_path / "gate"
    wrapper = tmp_path / "claude-after-gate"
    wrapper.write_text(
        f"#!/bin/sh\nwhile [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.05; done\nexec {shlex.quote(claude_kit.claude)} \"$@\"\n"
    )
    wrapper.chmod(0o755)
    claude_kit.env["ROOST_CLAUDE_BIN"] = str(wrapper)
    fake = claude_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = claude_kit.daemon()
    job = daemon.start_job("write the haiku", host="claude")
    held = wait_until(lambda: daemon.job(job)["hostPid"], timeout=60, what="the held claude's pid")
    os.kill(held, signal.SIGKILL)
    row = wait_until(lambda: (r := daemon.job(job))["state"] == "failed" and r, timeout=60, what="the run failed")
    assert "claude exited during the run" in (row["error"] or ""), row
    assert row["pending"] == 1, row  # the task: kept, not acknowledged
    assert fake.requests() == []

    gate.touch()
    replied_at = time.time()
    daemon.call("reply", job=job, text="and a title")
    daemon.wait_job(job, "done", timeout=90)
    # The kept task ran with the reply's run, not by itself before it; and once.
    requests = fake.requests()
    assert requests and all(request["time"] >= replied_at for request in requests), requests
    last = json.dumps(requests[-1]["raw"])
    assert last.count('"text": "write the haiku"') == 1 and '"text": "and a title"' in last, last
