"""Nothing a job started outlives it (issue 13.3), on the scripted and shell hosts.

Each test leaves behind what a daemonising tool leaves: a grandchild in a session of its
own that ignores SIGTERM and SIGHUP (``proctools.escapee_command``). Then the job ends by
each of its ends — ``kill -9`` of its worker (idle, mid-run, after a daemon restart),
stop, remove, reap — and the test walks /proc itself (``proctools``, never roost's
bookkeeping) until no process of the job is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import proctools
import pytest
from conftest import user_messages, wait_until

from roost_core import platform
from roost_core.client import DaemonUnavailable

CLI = [sys.executable, "-m", "roost_core.cli"]


NAMES: list[str] = []


def token() -> str:
    name = f"roost-escapee-{uuid.uuid4().hex[:12]}"
    NAMES.append(name)
    return name


@pytest.fixture(autouse=True)
def no_escapee_survives_a_failed_test():
    """A failing test must not leave its escapee on the machine for five minutes."""
    yield
    proctools.kill_named(NAMES)


def jobs_json(daemon) -> dict[str, dict]:
    """``roost jobs --json``, as a user runs it."""
    result = subprocess.run([*CLI, "jobs", "--json"], env=daemon.env, capture_output=True, text=True, timeout=30, check=True)
    return {row["id"]: row for row in json.loads(result.stdout)}


def start_with_escapee(daemon, tmp_path, *, host: str = "scripted", gate=None):
    """A job whose first tool leaves an escapee; returns (job, escapee, name)."""
    name = token()
    pidfile = tmp_path / f"{name}.pid"
    command = proctools.escapee_command(pidfile, name)
    if host == "shell":
        job = daemon.start_job(command, host="shell")
    else:
        steps = [{"shell": command}]
        if gate is not None:
            steps.append({"wait_for": str(gate)})
        steps.append({"say": "left one behind"})
        scenario = {"run": [{"steps": steps}], "default": {"steps": [{"say": "ok: {input}"}]}}
        job = daemon.start_job("leave a process behind", scenario=scenario)
    escapee = wait_until(lambda: proctools.escapee(pidfile, name), what="the escapee running")
    proctools.check_escapee(escapee)
    return job, escapee, name


def worker_proc(daemon, job: str) -> proctools.Proc:
    row = wait_until(lambda: (r := jobs_json(daemon)[job])["workerPid"] and r, what="the worker pid in jobs --json")
    p = proctools.proc(row["workerPid"])
    assert p is not None, "jobs --json names a worker that does not run"
    return p


def assert_all_gone(procs: set[proctools.Proc], name: str, what: str) -> None:
    wait_until(lambda: not any(proctools.alive(p) for p in procs) and not proctools.with_cmdline(name), what=what)


def test_jobs_json_names_the_worker_and_a_tool_escapee_is_reparented_to_it(daemon, tmp_path):
    job, escapee, _name = start_with_escapee(daemon, tmp_path)
    daemon.wait_job(job, "done")
    row = jobs_json(daemon)[job]
    worker = worker_proc(daemon, job)
    # The scripted host runs in the worker: no host process of its own.
    assert row["hostPid"] is None
    if platform.ADOPTS_ORPHANS:
        # The bash that started the escapee has exited: the escapee is the worker's child
        # now (the worker is the subreaper of its job), not init's.
        assert proctools.parent(escapee[0]) == worker[0]
        assert escapee in proctools.tree(worker[0])
    else:
        # No subreaper (the portable platform): init, or whoever is, has it; the worker
        # knows it all the same (its mark, its process group): the other tests end it.
        assert proctools.parent(escapee[0]) != worker[0]


def test_kill9_of_an_idle_worker_ends_what_its_job_left(daemon, tmp_path):
    job, escapee, name = start_with_escapee(daemon, tmp_path)
    daemon.wait_job(job, "done")
    worker = worker_proc(daemon, job)
    everything = proctools.tree(worker[0]) | {escapee}
    proctools.kill9(worker[0])
    assert_all_gone(everything, name, "every process of the job gone after kill -9 of its worker")
    row = daemon.wait_reaped(job)
    # The worker died idle, after its report: the job is not failed, a reply wakes it.
    assert row["state"] == "done" and row["workerPid"] is None and row["hostPid"] is None


def test_kill9_of_a_worker_mid_run_ends_what_its_job_left(daemon, tmp_path):
    gate = tmp_path / "gate"
    job, escapee, name = start_with_escapee(daemon, tmp_path, gate=gate)
    worker = worker_proc(daemon, job)
    assert daemon.job(job)["state"] == "running"
    everything = proctools.tree(worker[0]) | {escapee}
    proctools.kill9(worker[0])
    assert_all_gone(everything, name, "every process of the job gone after kill -9 of its worker mid-run")


def test_kill9_of_a_worker_after_a_daemon_restart_ends_what_its_job_left(daemon, tmp_path):
    # The worker outlives the daemon (and its fork server); the next daemon must still
    # find what the worker started once the worker dies.
    job, escapee, name = start_with_escapee(daemon, tmp_path)
    daemon.wait_job(job, "done")
    worker = worker_proc(daemon, job)
    daemon.kill9()
    daemon.restart()
    wait_until(lambda: daemon.job(job)["connected"], what="the worker back on the new daemon")
    assert proctools.alive(escapee) and proctools.alive(worker)
    everything = proctools.tree(worker[0]) | {escapee}
    proctools.kill9(worker[0])
    assert_all_gone(everything, name, "every process of the job gone after the daemon restart and kill -9")


@pytest.mark.parametrize("end", ["stop", "remove"])
def test_stop_and_remove_end_what_a_shell_job_left(daemon, tmp_path, end):
    job, escapee, name = start_with_escapee(daemon, tmp_path, host="shell")
    daemon.wait_job(job, "done")
    worker = worker_proc(daemon, job)
    everything = proctools.tree(worker[0]) | {escapee}
    daemon.call(end, job=job)
    assert_all_gone(everything, name, f"every process of the job gone after {end}")


def test_a_reaped_job_leaves_nothing_behind_and_wakes_again(daemon_factory, write_config, tmp_path):
    write_config({"reapAfterSeconds": 0.3})
    daemon = daemon_factory().start()
    gate = tmp_path / "gate"
    job, escapee, name = start_with_escapee(daemon, tmp_path, gate=gate)
    # Seen mid-run (a settled job is reaped 0.3 s later).
    worker = worker_proc(daemon, job)
    everything = proctools.tree(worker[0]) | {escapee}
    gate.touch()
    daemon.wait_job(job, "done")
    daemon.wait_reaped(job)
    assert_all_gone(everything, name, "every process of the job gone after the reap")
    # The worker ended them itself (a clean exit), and the job comes back for a reply.
    assert "process(es) left behind" in (daemon.paths.jobs_dir / f"{job}.log").read_text()
    assert daemon.call("reply", job=job, text="again")["result"] == "started"
    daemon.wait_job(job, "done")


def test_a_worker_started_just_before_the_daemon_died_is_not_left_running(daemon_factory, write_config, tmp_path):
    """The daemon dies right after it started the worker of a waking job, before the job's
    record names it (``daemon.after_worker_start``). The next daemon starts a worker of
    its own for the waiting reply and refuses the old one's hello: the old worker must
    end at once, not wait a minute for a hello that will never come."""
    write_config({"reapAfterSeconds": 0.3})
    daemon = daemon_factory().start()
    folder = tmp_path / "work"
    folder.mkdir()
    job = daemon.start_job("first", cwd=str(folder), scenario={"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon.wait_job(job, "done")
    daemon.wait_reaped(job)
    assert proctools.with_cwd(folder) == set()
    daemon.terminate()
    armed = daemon_factory(ROOST_FAULTS="daemon.after_worker_start").start()
    with pytest.raises((DaemonUnavailable, OSError)):
        armed.call("reply", job=job, text="wake up")
    assert armed.process.wait(20) == -9
    (old,) = wait_until(lambda: proctools.with_cwd(folder), what="the worker the dead daemon started")
    everything = proctools.tree(old[0])
    armed.restart()
    # The reply was stored before the daemon died: the new daemon runs it on a worker of
    # its own; the old one is refused and ends, with everything it started.
    row = armed.wait_job(job, "done")
    assert row["workerPid"] != old[0]
    assert "wake up" in user_messages(armed.entries(job))
    wait_until(lambda: not any(proctools.alive(p) for p in everything), what="the refused worker and its processes gone")
    assert f"refused worker process {old[0]} of {job}" in armed.paths.daemon_log.read_text()
