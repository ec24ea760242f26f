"""Jobs through real processes: start, reply, reap and restart, crashes, stop, remove."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import user_messages, wait_until

from roost_core.locks import is_alive

ASK_THEN_FINISH = {
    "run": [
        {"steps": [{"say": "Looking at {input}"}, {"tool": "sleep", "args": {"seconds": 0}}, {"ask": "Which branch?"}]},
        {"steps": [{"say": "Merging into {input}"}, {"say": "Merged into {input}."}]},
    ],
    "default": {"steps": [{"say": "ok: {input}"}]},
}


def assistant_texts(entries):
    from roost_core.transcript import content_text

    return [content_text(e["message"]["content"]) for e in entries if e.get("type") == "message" and e["message"]["role"] == "assistant" and content_text(e["message"]["content"])]


def in_tool_call(daemon, job):
    """The worker is inside its first run's tool call, and has acked the task."""
    entries = daemon.entries(job)
    calling = any(e.get("type") == "message" and e["message"].get("stopReason") == "toolUse" for e in entries)
    return calling and daemon.job(job)["pending"] == 0


@pytest.mark.smoke
def test_job_runs_to_done_and_reply_runs_again(daemon):
    job = daemon.start_job("fix the bug", scenario=ASK_THEN_FINISH, name="fixer")
    row = daemon.wait_job(job)
    assert row["state"] == "needs_input"
    assert row["question"] == "Which branch?"
    assert row["name"] == "fixer"
    result = daemon.call("reply", job=job, text="main")
    assert result["result"] == "delivered"
    row = daemon.wait_job(job, "done")
    assert row["summary"] == "Merged into main."
    entries = daemon.entries(job)
    assert entries[0]["type"] == "session"
    assert user_messages(entries) == ["fix the bug", "main"]
    assert assistant_texts(entries) == ["Looking at fix the bug", "Which branch?", "Merging into main", "Merged into main."]


def test_reaped_job_restarts_from_its_session_file_without_duplicate_turn(daemon_factory, write_config):
    write_config({"reapAfterSeconds": 0.3})
    daemon = daemon_factory().start()
    job = daemon.start_job("first task", scenario=ASK_THEN_FINISH)
    daemon.wait_job(job, "needs_input")
    row = daemon.wait_reaped(job)
    assert row["state"] == "needs_input"
    assert daemon.record(job)["worker_pid"] is None
    result = daemon.call("reply", job=job, text="release")
    assert result["result"] == "started"
    row = daemon.wait_job(job, "done")
    entries = daemon.entries(job)
    assert user_messages(entries) == ["first task", "release"]
    # The restored worker ran exactly the new item: one run per input, no replay.
    runs = [e for e in entries if e.get("type") == "custom" and e.get("customType") == "roost-run"]
    assert [r["data"]["index"] for r in runs] == [0, 1]
    assert assistant_texts(entries).count("Looking at first task") == 1
    assert sum(1 for e in entries if e.get("type") == "session") == 1


@pytest.mark.smoke
def test_kill9_daemon_with_replies_queued_delivers_each_once(daemon, tmp_path):
    gate = tmp_path / "gate"
    scenario = {
        "run": [{"steps": [{"wait_for": str(gate)}, {"say": "passed the gate"}]}],
        "default": {"steps": [{"say": "got: {input}"}]},
    }
    job = daemon.start_job("wait at the gate", scenario=scenario)
    wait_until(lambda: daemon.job(job)["connected"], what="worker connected")
    # The worker is busy at the gate; these replies join the run as steers or wait.
    seqs = [daemon.call("reply", job=job, text=f"reply {n}")["seq"] for n in range(5)]
    assert len(set(seqs)) == 5
    daemon.kill9()
    gate.write_text("open")
    daemon.restart()
    daemon.wait_job(job, "done", "idle")
    entries = daemon.entries(job)
    texts = user_messages(entries)
    assert texts[0] == "wait at the gate"
    for n in range(5):
        assert texts.count(f"reply {n}") == 1, texts
    assert daemon.job(job)["pending"] == 0


def test_kill9_worker_during_a_run_marks_it_failed_never_stuck_running(daemon, tmp_path):
    gate = tmp_path / "never"
    job = daemon.start_job("hang", scenario={"run": [{"steps": [{"wait_for": str(gate)}]}]})
    wait_until(lambda: in_tool_call(daemon, job), what="inside the run")
    pid = daemon.record(job)["worker_pid"]
    os.kill(pid, signal.SIGKILL)
    row = daemon.wait_job(job, "failed")
    assert "worker died during a run" in row["error"]
    assert "SIGKILL" in row["error"]
    assert row["live"] is False
    # A reply starts it again: the user decides to retry.
    assert daemon.call("reply", job=job, text="try again")["result"] == "started"
    row = daemon.wait_job(job, "done", "idle")
    assert row["error"] is None


def test_kill9_worker_with_items_pending_is_restarted(daemon, tmp_path):
    gate = tmp_path / "gate"
    job = daemon.start_job("hang", scenario={"run": [{"steps": [{"wait_for": str(gate)}]}], "default": {"steps": [{"say": "handled {input}"}]}})
    wait_until(lambda: in_tool_call(daemon, job), what="inside the run")
    pid = daemon.record(job)["worker_pid"]
    # Stop the worker from taking the reply before the kill, so it is pending.
    os.kill(pid, signal.SIGSTOP)
    daemon.call("reply", job=job, text="pending one")
    os.kill(pid, signal.SIGKILL)
    row = daemon.wait_job(job, "done", "idle")
    assert daemon.record(job)["worker_pid"] != pid
    assert user_messages(daemon.entries(job)).count("pending one") == 1
    assert row["state"] in ("done", "idle")


@pytest.mark.smoke
def test_stop_ends_the_worker_and_rm_removes_the_job(daemon, tmp_path):
    job = daemon.start_job("hang", scenario={"run": [{"steps": [{"wait_for": str(tmp_path / 'never')}]}]})
    wait_until(lambda: daemon.job(job)["connected"], what="connected")
    pid = daemon.record(job)["worker_pid"]
    assert daemon.call("stop", job=job)["state"] == "stopped"
    wait_until(lambda: not is_alive(pid), what="worker gone")
    row = daemon.wait_reaped(job)
    assert row["state"] == "stopped"
    daemon.call("remove", job=job)
    assert all(r["id"] != job for r in daemon.call("jobs")["jobs"])
    assert not (daemon.paths.jobs_dir / f"{job}.json").exists()


def test_shell_job_runs_a_command(daemon):
    job = daemon.start_job("echo shell-out; exit 0", host="shell")
    row = daemon.wait_job(job, "done")
    assert row["summary"] == "shell-out"
    job2 = daemon.start_job("echo nope >&2; exit 3", host="shell")
    row = daemon.wait_job(job2, "failed")
    assert "exited 3" in row["error"]


def test_daemon_survives_restart_and_worker_reconnects(daemon):
    job = daemon.start_job("hello", scenario={"default": {"steps": [{"say": "hi {input}"}]}})
    daemon.wait_job(job, "done")
    pid = daemon.record(job)["worker_pid"]
    assert daemon.terminate() == 0
    daemon.restart()
    wait_until(lambda: daemon.job(job)["connected"], what="worker reconnected")
    assert daemon.record(job)["worker_pid"] == pid
    assert daemon.call("reply", job=job, text="again")["result"] == "delivered"
    daemon.wait_job(job, "done")
    assert user_messages(daemon.entries(job)) == ["hello", "again"]


def test_a_reply_right_after_stop_starts_the_job_again(daemon):
    job = daemon.start_job("first", scenario={"default": {"steps": [{"say": "handled {input}"}]}})
    daemon.wait_job(job, "done")
    daemon.call("stop", job=job)
    # The worker may still be exiting: the reply must not be stranded.
    daemon.call("reply", job=job, text="come back")
    daemon.wait_job(job, "done")
    wait_until(lambda: "come back" in user_messages(daemon.entries(job)), what="the reply in the transcript")
    assert user_messages(daemon.entries(job)).count("come back") == 1


def test_a_run_working_through_items_shows_its_progress_while_updated_stays(daemon, tmp_path):
    """Issue 54 point 3: a child that answers one steered item after another runs long with
    ``state: running``, nothing pending and ``updated`` from its run's start. Its row's
    ``progress`` (the run's last sign of work, coalesced by the worker) moves with each
    item, ``roost jobs`` and ``roost view --once`` say so, and ``updated`` stays: a sign
    of work is no record write."""
    from clikit import Cli
    from fg import in_thread, run_async, send, session, spawn

    gates = [tmp_path / f"gate-{n}" for n in range(6)]
    scenario = {"run": [{"steps": [*({"wait_for": str(gate)} for gate in gates), {"say": "all answered"}]}]}
    cli = Cli(daemon.env, tmp_path)

    def row(kid: str) -> dict:
        return next(r for r in cli.json("jobs") if r["id"] == kid)

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "answer them as they come", "kid", scenario=scenario)
            first = await in_thread(wait_until, lambda: (r := row(kid))["state"] == "running" and r["pending"] == 0 and r["progress"] and r, 30, what="the kid's run under way")
            seen = [first["progress"]]
            for n, gate in enumerate(gates[:-1]):
                ok, text, _data = await send(lead, kid, f"item {n}")
                assert ok, text
                gate.write_text("go")
                moved = await in_thread(wait_until, lambda: (r := row(kid))["progress"]["steps"] > seen[-1]["steps"] and r, 30, what=f"progress after item {n}")
                assert moved["state"] == "running" and moved["updated"] == first["updated"], (first, moved)
                assert moved["progress"]["what"] in ("item delivered", "tool boundary", "model call")
                seen.append(moved["progress"])
                if n == 2:
                    assert "working: " in cli("jobs").stdout
                    assert "working: " in cli("view", "--once").stdout
            assert [p["at"] for p in seen] == sorted(p["at"] for p in seen)
            gates[-1].write_text("go")
            return kid

    kid = run_async(story)
    assert daemon.wait_job(kid)["state"] == "done"
