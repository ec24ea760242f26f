"""The daemon process's life: one per home, stale sockets after kill -9, clean exits,
private files, long homes, the CLI's daemon commands and auto-start."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import DaemonHandle, wait_until

from roost_core.client import Client, DaemonUnavailable
from roost_core.locks import is_alive
from roost_core.paths import MAX_SOCKET_PATH, resolve_paths, short_socket_dir
from roost_core.store import read_journal

QUICK = {"default": {"steps": [{"say": "ok: {input}"}]}}


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def run_cli(env: dict[str, str], *args: str, timeout: float = 40) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roost_core.cli", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_daemon_process(env: dict[str, str], timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roost_core.daemon"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def refused_connect(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return False
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    finally:
        probe.close()


# --------------------------------------------------------------------------- one daemon per home


@pytest.mark.parametrize("command", [["-m", "roost_core.daemon"], ["-m", "roost_core.cli", "daemon"], ["-m", "roost_core.cli", "daemon", "run"]], ids=["module", "cli", "cli-run"])
def test_a_second_daemon_for_the_same_home_refuses_and_leaves_the_first_alone(daemon, command):
    first_pid = daemon.call("daemon_status")["pid"]
    second = subprocess.run([sys.executable, *command], env=daemon.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
    assert second.returncode != 0
    assert "already running" in second.stderr
    # The first daemon still owns its socket and serves.
    assert daemon.paths.socket.exists()
    assert stat.S_ISSOCK(os.stat(daemon.paths.socket).st_mode)
    assert daemon.call("daemon_status")["pid"] == first_pid == daemon.process.pid
    assert daemon.paths.daemon_pidfile.read_text().strip() == str(first_pid)


# --------------------------------------------------------------------------- exits


def test_after_kill9_the_next_daemon_removes_the_stale_socket_and_starts(daemon):
    job = daemon.start_job("before the crash", scenario=QUICK)
    daemon.wait_job(job, "done")
    old_pid = daemon.process.pid
    daemon.kill9()
    # kill -9 leaves the socket file behind, and nobody listens on it.
    assert daemon.paths.socket.exists()
    assert refused_connect(daemon.paths.socket)
    daemon.restart()
    status = daemon.call("daemon_status")
    assert status["pid"] == daemon.process.pid != old_pid
    assert daemon.paths.daemon_pidfile.read_text().strip() == str(status["pid"])
    assert stat.S_ISSOCK(os.stat(daemon.paths.socket).st_mode)
    # State survived: the job is still there and answers.
    assert daemon.job(job)["state"] == "done"


@pytest.mark.smoke
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "daemon_stop"])
def test_a_clean_stop_exits_0_and_removes_the_socket_and_pid_file(daemon, how):
    assert daemon.paths.socket.exists() and daemon.paths.daemon_pidfile.exists()
    if how == "daemon_stop":
        assert daemon.call("daemon_stop") == {"stopping": True}
    else:
        daemon.process.send_signal(getattr(signal, how))
    assert daemon.process.wait(15) == 0
    assert not daemon.paths.socket.exists()
    assert not daemon.paths.daemon_pidfile.exists()
    with pytest.raises(DaemonUnavailable):
        Client(daemon.paths.socket, timeout=2)


def test_sigterm_with_a_live_worker_exits_0_and_the_worker_survives(daemon):
    job = daemon.start_job("keep working", scenario=QUICK)
    daemon.wait_job(job, "done")
    worker = daemon.record(job)["worker_pid"]
    assert daemon.terminate() == 0
    assert not daemon.paths.socket.exists()
    # Workers run in their own session: a daemon restart does not kill them.
    assert is_alive(worker)


@pytest.mark.parametrize(("setting", "loop"), [(None, "uvloop"), ("0", "asyncio")])
def test_the_daemon_runs_on_uvloop_and_without_it(daemon_factory, setting, loop):
    """uvloop is a dependency; ``ROOST_UVLOOP=0`` runs the daemon on asyncio's own loop,
    and everything goes on as before: a job, a reply and its ack, a clean stop."""
    daemon = daemon_factory(**({"ROOST_UVLOOP": setting} if setting else {})).start()
    assert daemon.call("daemon_status")["loop"] == loop
    job = daemon.start_job("first", scenario=QUICK)
    daemon.wait_job(job, "done")
    daemon.call("reply", job=job, text="second")
    wait_until(lambda: "ok: second" in json.dumps(daemon.entries(job)), what="the reply answered")
    wait_until(lambda: daemon.job(job)["pending"] == 0, what="the reply acked")
    assert daemon.terminate() == 0


# --------------------------------------------------------------------------- file modes


def test_socket_folders_and_state_files_are_private(daemon):
    job = daemon.start_job("make some state", scenario=QUICK)
    daemon.wait_job(job, "done")
    daemon.call("reply", job=job, text="and a journal record")
    daemon.wait_job(job, "done")
    paths = daemon.paths
    assert stat.S_ISSOCK(os.stat(paths.socket).st_mode)
    assert mode(paths.socket) == 0o600
    # ROOST_HOME was made 0755 by the fixture: the daemon tightened it.
    for folder in (paths.socket.parent, paths.home, paths.state_dir, paths.jobs_dir, paths.sessions_dir):
        assert mode(folder) == 0o700, folder
    state_files = [paths.jobs_dir / f"{job}.json", paths.journal, paths.sessions_dir / f"{job}.jsonl", paths.runtime_dir / "daemon.lock"]
    for path in state_files:
        assert path.exists(), path
        assert mode(path) == 0o600, f"{path} is {oct(mode(path))}"
    # No temp file of an atomic write was left behind. The daemon may be writing a record
    # as we look (a status, a reap): such a temp file is renamed away in a moment, while
    # one left behind stays; so each one seen must go.
    for folder in (paths.jobs_dir, paths.state_dir):
        for temp in [p for p in folder.iterdir() if p.name.endswith(".tmp")]:
            wait_until(lambda temp=temp: not temp.exists(), what=f"{temp.name} renamed away, not left behind")


def test_a_journal_record_exists_for_a_reply_and_is_private(daemon):
    job = daemon.start_job("journal", scenario=QUICK)
    daemon.wait_job(job, "done")
    records = list(read_journal(daemon.paths.journal))
    assert any(r.get("job") == job for r in records)
    assert mode(daemon.paths.journal) == 0o600


# --------------------------------------------------------------------------- long homes


def test_a_very_long_roost_home_works_with_a_short_socket(daemon_factory, tmp_path):
    home = tmp_path / ("long-home-" + "h" * 60) / ("nested-" + "n" * 60)
    assert len(str(home)) > 120
    daemon = daemon_factory(ROOST_HOME=str(home)).start()
    sock = daemon.paths.socket
    assert sock == resolve_paths({"ROOST_HOME": str(home)}).socket
    assert len(os.fsencode(str(sock))) <= MAX_SOCKET_PATH
    assert sock.parent == short_socket_dir()
    assert mode(sock) == 0o600 and mode(sock.parent) == 0o700
    status = daemon.call("daemon_status")
    assert status["home"] == str(home) and status["socket"] == str(sock)
    job = daemon.start_job("long home job", scenario=QUICK)
    row = daemon.wait_job(job, "done")
    assert row["summary"] == "ok: long home job"
    assert (home / "state" / "jobs" / f"{job}.json").exists()
    assert daemon.terminate() == 0
    assert not sock.exists()


# --------------------------------------------------------------------------- the CLI


def test_cli_daemon_status_and_stop(daemon):
    status = run_cli(daemon.env, "daemon", "status")
    assert status.returncode == 0, status.stderr
    assert "running" in status.stdout and "not running" not in status.stdout
    assert f"pid {daemon.process.pid}" in status.stdout
    as_json = run_cli(daemon.env, "daemon", "status", "--json")
    assert as_json.returncode == 0
    data = json.loads(as_json.stdout)
    assert data["running"] is True and data["pid"] == daemon.process.pid

    stop = run_cli(daemon.env, "daemon", "stop")
    assert stop.returncode == 0, stop.stderr
    assert "stopped" in stop.stdout
    assert daemon.process.wait(15) == 0
    assert not daemon.paths.socket.exists()

    after = run_cli(daemon.env, "daemon", "status")
    assert after.returncode == 1
    assert "not running" in after.stdout
    again = run_cli(daemon.env, "daemon", "stop")
    assert again.returncode == 0
    assert "not running" in again.stdout


class Adopted:
    """A daemon some client started on its own: found by its pid file, ended at teardown."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.handle = DaemonHandle(Path(env["ROOST_HOME"]), env)
        self.paths = self.handle.paths

    def pid(self) -> int | None:
        try:
            return int(self.paths.daemon_pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def daemon_processes(self) -> list[psutil.Process]:
        """Live roost daemons for this home (to prove there is exactly one)."""
        found = []
        for process in psutil.process_iter(["cmdline", "status"]):
            try:
                cmdline = process.info["cmdline"] or []
                if (
                    "roost_core.daemon" in cmdline
                    and process.info["status"] != psutil.STATUS_ZOMBIE
                    and process.environ().get("ROOST_HOME") == self.env["ROOST_HOME"]
                ):
                    found.append(process)
            except psutil.Error:
                continue
        return found

    def cleanup(self) -> None:
        workers = self.handle.worker_pids()
        pids = {p.pid for p in self.daemon_processes()}
        if self.pid():
            pids.add(self.pid())
        try:
            self.handle.call("daemon_stop")
        except (DaemonUnavailable, OSError):
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(is_alive(pid) for pid in pids):
            time.sleep(0.05)
        for pid in set(pids) | set(workers) | set(self.handle.worker_pids()):
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


@pytest.fixture
def adopted(roost_env):
    daemon = Adopted(roost_env)
    yield daemon
    daemon.cleanup()


def test_a_client_command_auto_starts_the_daemon(adopted):
    assert not adopted.paths.socket.exists()
    result = run_cli(adopted.env, "jobs")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no jobs"
    pid = adopted.pid()
    assert pid is not None and is_alive(pid)
    status = adopted.handle.call("daemon_status")
    assert status["pid"] == pid
    assert status["home"] == adopted.env["ROOST_HOME"]
    # The daemon outlives the command that started it, and the next command uses it.
    second = run_cli(adopted.env, "jobs", "--json")
    assert second.returncode == 0 and json.loads(second.stdout) == []
    assert adopted.pid() == pid
    assert [p.pid for p in adopted.daemon_processes()] == [pid]
    # It logs to the state dir.
    assert adopted.paths.daemon_log.exists()


def test_concurrent_client_commands_auto_start_exactly_one_daemon(adopted):
    commands = [
        subprocess.Popen([sys.executable, "-m", "roost_core.cli", "jobs"], env=adopted.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = [(process.wait(40), *process.communicate()) for process in commands]
    for code, out, err in results:
        assert code == 0, err
        assert out.strip() == "no jobs"
    pid = adopted.pid()
    assert pid is not None and adopted.handle.call("daemon_status")["pid"] == pid
    # The daemons that lost the race exit; one is left.
    wait_until(lambda: [p.pid for p in adopted.daemon_processes()] == [pid], timeout=15, what="one daemon left")


def test_auto_start_then_a_job_through_the_cli(adopted, tmp_path):
    scenario = tmp_path / "quick.toml"
    scenario.write_text('[default]\nsteps = [{ say = "cli: {input}" }]\n')
    started = run_cli(adopted.env, "start", "from the cli", "--host", "scripted", "--scenario", str(scenario), "--cwd", str(tmp_path), "--json")
    assert started.returncode == 0, started.stderr
    job = json.loads(started.stdout)["id"]
    waited = run_cli(adopted.env, "wait", job, "--state", "done", "--timeout", "30", "--json")
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["summary"] == "cli: from the cli"
