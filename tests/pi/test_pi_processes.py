"""Nothing a pi job started outlives it (issue 13.3), with the pinned real pi.

The fake model has pi's bash tool leave an escapee behind: a grandchild in a session of
its own that ignores SIGTERM and SIGHUP (pi's bash tool already runs every command in a
new session). Then ``kill -9`` of pi, and separately of the worker; the test walks /proc
itself until no process of the job is left.
"""

from __future__ import annotations

import json
import os
import uuid

import proctools
import pytest
from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn
from pikit import message_text, slow_tool_scenario

from roost_core import platform
from roost_plugins.envelope import parse_envelopes

NAMES: list[str] = []


@pytest.fixture(autouse=True)
def no_escapee_survives_a_failed_test():
    yield
    proctools.kill_named(NAMES)


def jobs_json(pi_kit) -> dict[str, dict]:
    """``roost jobs --json``, as a user runs it."""
    return {row["id"]: row for row in json.loads(pi_kit.roost("jobs", "--json").stdout)}


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode(errors="replace")


def start_pi_job_with_escapee(pi_kit, tmp_path):
    name = f"roost-escapee-{uuid.uuid4().hex[:12]}"
    NAMES.append(name)
    pidfile = tmp_path / f"{name}.pid"
    scenario = {
        "run": [{"steps": [{"shell": proctools.escapee_command(pidfile, name)}, {"say": "left one behind"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    job = daemon.start_job("leave a process behind", host="pi")
    escapee = wait_until(lambda: proctools.escapee(pidfile, name), timeout=90, what="the escapee running")
    proctools.check_escapee(escapee)
    assert daemon.wait_job(job, "done", timeout=60)["summary"] == "left one behind"
    row = wait_until(lambda: (r := jobs_json(pi_kit)[job])["hostPid"] and r, what="pi's pid in jobs --json")
    worker, pi = proctools.proc(row["workerPid"]), proctools.proc(row["hostPid"])
    assert worker is not None and pi is not None
    # jobs --json names the real processes: pi, a child of the worker; and the escapee,
    # whose bash is gone, is the worker's child now (its subreaper), not init's.
    assert proctools.parent(pi[0]) == worker[0]
    # pi names itself "pi" (process.title) and runs on node.
    assert cmdline(pi[0]).split()[0] == "pi" and os.path.basename(os.readlink(f"/proc/{pi[0]}/exe")).startswith("node")
    # (No subreaper on the portable platform: init, or whoever is, has the escapee.)
    assert (proctools.parent(escapee[0]) == worker[0]) is platform.ADOPTS_ORPHANS
    return daemon, fake, job, worker, pi, escapee, name


def test_kill9_of_pi_ends_what_it_left_and_the_job_goes_on(pi_kit, tmp_path):
    daemon, fake, job, worker, pi, escapee, name = start_pi_job_with_escapee(pi_kit, tmp_path)
    everything = proctools.tree(pi[0]) | {escapee}
    proctools.kill9(pi[0])
    wait_until(
        lambda: not any(proctools.alive(p) for p in everything) and not proctools.with_cmdline(name),
        what="pi and everything it left gone",
    )
    # The worker lives on, without a host process, and says so.
    assert proctools.alive(worker)
    assert proctools.tree(worker[0]) == {worker}
    wait_until(lambda: jobs_json(pi_kit)[job]["hostPid"] is None, what="no host pid in jobs --json")
    # The next item starts pi again on the same session; it answers once.
    # No question mark: the settle plugin would take "ok: still there?" for a question.
    daemon.call("reply", job=job, text="carry on")
    row = daemon.wait_job(job, "done", timeout=60)
    assert row["summary"] == "ok: carry on"
    new_pi = jobs_json(pi_kit)[job]["hostPid"]
    assert new_pi and new_pi != pi[0] and proctools.parent(new_pi) == worker[0]
    last = fake.requests()[-1]
    assert sum("carry on" in message_text(m) for m in last["messages"]) == 1


def test_kill9_of_the_worker_ends_pi_and_everything_it_left(pi_kit, tmp_path):
    daemon, _fake, job, worker, pi, escapee, name = start_pi_job_with_escapee(pi_kit, tmp_path)
    everything = proctools.tree(worker[0]) | {escapee}
    assert pi in everything
    proctools.kill9(worker[0])
    wait_until(
        lambda: not any(proctools.alive(p) for p in everything) and not proctools.with_cmdline(name),
        what="the worker, pi and everything it left gone",
    )
    row = daemon.wait_reaped(job)
    assert row["workerPid"] is None and row["hostPid"] is None


def test_kill9_of_pi_mid_run_ends_its_bash_tool_before_the_job_fails(pi_kit, tmp_path):
    """pi dies while its bash tool runs: by the time the job says ``failed``, that run's
    processes are gone (the worker ends them before the run settles, not after)."""
    name = f"roost-sleeper-{uuid.uuid4().hex[:12]}"
    NAMES.append(name)
    # The tool's own shell waits for a bash that runs as ``name``, deaf to SIGTERM (so
    # it outlasts a first SIGTERM: only the end of the sweep ends it).
    scenario = {"run": [{"steps": [{"shell": f"bash -c 'trap \"\" TERM; exec -a {name} sleep 300'; echo woke"}, {"say": "slept"}]}]}
    pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    job = daemon.start_job("sleep a while", host="pi")
    (sleeper,) = wait_until(
        lambda: {p for p in proctools.with_cmdline(name) if cmdline(p[0]).split()[0] == name}, timeout=90, what="the bash tool's sleep running"
    )
    row = jobs_json(pi_kit)[job]
    assert row["state"] == "running"
    pi = proctools.proc(row["hostPid"])
    assert pi is not None and proctools.parent(pi[0]) == row["workerPid"]
    everything = proctools.tree(pi[0])
    assert sleeper in everything and len(everything) >= 3  # pi, the tool's shell, the sleeper
    proctools.kill9(pi[0])
    row = daemon.wait_job(job, "failed", timeout=60)
    assert "pi exited" in (row["error"] or ""), row
    left = {p for p in everything if proctools.alive(p)}
    assert left == set(), f"alive after the job failed: {[(p[0], cmdline(p[0])) for p in left]}"
    assert jobs_json(pi_kit)[job]["hostPid"] is None


def test_a_pi_worker_started_just_before_the_daemon_died_is_not_left_running(pi_kit, write_config, tmp_path):
    """Issue 39.8 with pi: the daemon dies right after it started the worker of a waking
    pi job (``daemon.after_worker_start``); the next daemon refuses that worker, which
    ends at once with everything it started, while the job's own worker runs the reply."""
    from roost_core.client import DaemonUnavailable

    # No warm pi: the only processes that run in the job's folder are the job's.
    write_config({"reapAfterSeconds": 0.3, "piPool": False})
    pi_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = pi_kit.daemon()
    folder = tmp_path / "work"
    folder.mkdir()
    job = daemon.start_job("first", host="pi", cwd=str(folder))
    daemon.wait_job(job, "done", timeout=60)
    daemon.wait_reaped(job)
    wait_until(lambda: not proctools.with_cwd(folder), what="nothing of the job left running")
    daemon.terminate()
    armed = pi_kit.daemon_factory(ROOST_FAULTS="daemon.after_worker_start").start()
    with pytest.raises((DaemonUnavailable, OSError)):
        armed.call("reply", job=job, text="wake up")
    assert armed.process.wait(20) == -9
    (old,) = wait_until(lambda: proctools.with_cwd(folder), what="the worker the dead daemon started")
    armed.restart()
    row = armed.wait_job(job, "done", timeout=60)
    assert row["workerPid"] != old[0] and row["summary"] == "ok: wake up"
    # Whatever the old worker had started (a pi, had it got that far) goes with it.
    wait_until(
        lambda: not proctools.alive(old) and not (proctools.with_cwd(folder) - proctools.tree(row["workerPid"])),
        what="the refused worker and everything it started gone",
    )


def test_kill9_of_a_childs_pi_mid_run_reports_what_follows_and_it_comes_true(pi_kit, tmp_path):
    """Issue 54 point 2: a child's pi killed during a run fails the run, and the job stays
    (its worker starts pi again for the next item). The parent's report says so with a
    ``next:`` line, as a killed worker's report does, and the parent's message then
    starts it again and it reports (it did start pi again, but the run never settled: the
    pi host still counted the run the killed pi died in as under way)."""
    fake = pi_kit.fake(slow_tool_scenario(tmp_path / "never"))
    daemon = pi_kit.daemon()

    def bodies(lead) -> list[str]:
        return [parse_envelopes(item["content"])[0]["body"] for item in lead.delivered if item["kind"] == "report"]

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "do the slow thing", "kid", host="pi")
            # The model has asked for the slow tool: pi is inside it now.
            await in_thread(wait_until, lambda: len(fake.requests()) >= 1, 90, what="the slow tool running")
            pi = await in_thread(wait_until, lambda: jobs_json(pi_kit)[kid]["hostPid"], 30, what="pi's pid")
            proctools.kill9(pi)
            await in_thread(wait_until, lambda: len(bodies(lead)) == 1, 60, what="the failed run's report")
            (failed,) = bodies(lead)
            assert failed.startswith(
                "state: failed\nerror: pi exited during the run\n"
                "next: its run failed, the job stays; a message to it starts it again on the same session, and it reports again as usual"
            ), failed
            ok, text, _data = await send(lead, kid, "carry on")
            assert ok, text
            await in_thread(wait_until, lambda: len(bodies(lead)) == 2, 60, what="the report of the run the message started")
            # A run a message started settles idle (only a user's input makes one done); the
            # fake reads the message as the answer to the tool call pi died in.
            assert bodies(lead)[1] == "state: idle\n\nafter the slow tool"
            last = fake.requests()[-1]
            assert sum("carry on" in message_text(m) for m in last["messages"]) == 1

    run_async(story)
