"""Workers forked by the daemon's fork server, through the user's path: a real daemon,
its real fork server, real workers; the server is killed, stopped and starved the way a
machine would do it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import wait_until

from roost_core.locks import is_alive

FORKSERVER = "roost_core.worker.forkserver"


def fork_server(daemon) -> psutil.Process:
    """The daemon's (one, live) fork server."""

    def find() -> psutil.Process | None:
        found = [
            child
            for child in psutil.Process(daemon.process.pid).children()
            if FORKSERVER in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE
        ]
        assert len(found) <= 1, found
        return found[0] if found else None

    return wait_until(find, what="the daemon's fork server")


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def worker_of(daemon, job: str) -> psutil.Process:
    wait_until(lambda: daemon.job(job)["connected"], what=f"the worker of {job} connected")
    return psutil.Process(daemon.record(job)["worker_pid"])


def gated(gate: Path, *before: dict) -> dict:
    return {"default": {"steps": [*before, {"wait_for": str(gate)}, {"say": "through the gate"}]}}


def fd_targets(pid: int) -> dict[int, str]:
    targets = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue  # closed while listing
    return targets


def tool_outputs(daemon, job: str) -> list[str]:
    return [
        e["message"]["content"][0]["text"]
        for e in daemon.entries(job)
        if e.get("type") == "message" and e["message"].get("toolName") == "bash"
    ]


def test_a_worker_is_forked_into_its_own_session_with_the_jobs_env_and_cwd(daemon_factory, tmp_path):
    daemon = daemon_factory(ROOST_TEST_DAEMON_MARK="from-the-daemon").start()
    server = fork_server(daemon)
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    gate = tmp_path / "gate"
    show = "printenv ROOST_JOB ROOST_SOCKET ROOST_HOME ROOST_TEST_DAEMON_MARK; printenv PI_JOB_TOKEN || echo no-token; pwd"
    job = daemon.start_job("show yourself", cwd=str(workdir), scenario=gated(gate, {"shell": show}))
    worker = worker_of(daemon, job)

    # Forked by the fork server (a child of the daemon), in a session of its own.
    assert worker.ppid() == server.pid
    assert server.ppid() == daemon.process.pid
    assert os.getsid(worker.pid) == worker.pid
    assert os.getpgid(worker.pid) == worker.pid
    assert os.getsid(worker.pid) != os.getsid(daemon.process.pid)
    assert worker.cwd() == str(workdir)
    assert daemon.record(job)["worker_create_time"] == pytest.approx(worker.create_time(), abs=0.01)
    # The job's environment was set after the fork: /proc/<worker>/environ, which a tool
    # of the job could read, shows the fork server's and never held the token.
    token = daemon.record(job)["token"]
    assert token not in Path(f"/proc/{worker.pid}/environ").read_bytes().decode(errors="replace")

    gate.touch()
    daemon.wait_job(job, "done")
    [output] = tool_outputs(daemon, job)
    assert output.split("\n")[:6] == [
        job,
        str(daemon.paths.socket),
        str(daemon.paths.home),
        "from-the-daemon",
        "no-token",
        str(workdir),
    ]
    # The token went to the worker only: not into the fork server's environment.
    server_env = server.environ()
    assert "PI_JOB_TOKEN" not in server_env and "ROOST_JOB" not in server_env
    assert all(token not in value for value in server_env.values())
    assert token not in (daemon.paths.jobs_dir / f"{job}.log").read_text()


def test_no_fd_of_the_daemon_leaks_into_a_worker_or_the_fork_server(daemon, tmp_path):
    server = fork_server(daemon)
    gate = tmp_path / "gate"
    job = daemon.start_job("hold still", scenario=gated(gate))
    worker = worker_of(daemon, job)
    daemon_fds = fd_targets(daemon.process.pid)
    worker_fds = fd_targets(worker.pid)
    server_fds = fd_targets(server.pid)
    log = str(daemon.paths.jobs_dir / f"{job}.log")

    # The daemon holds its lock, journal and listening socket: neither helper may.
    assert str(daemon.paths.runtime_dir / "daemon.lock") in daemon_fds.values()
    assert str(daemon.paths.journal) in daemon_fds.values()
    # Sockets and files name themselves uniquely (``socket:[inode]``, a path); every epoll
    # instance reads as the same ``anon_inode:[eventpoll]``, and the daemon's spare
    # descriptor (daemon/accept.py) is ``/dev/null`` as the worker's stdin is: those are
    # left out. The spare must not leak either: the worker's only /dev/null is its stdin.
    daemon_own = {target for fd, target in daemon_fds.items() if fd > 2 and not target.startswith("anon_inode:") and target != os.devnull}
    assert daemon_own.isdisjoint(worker_fds.values()), worker_fds
    assert daemon_own.isdisjoint(target for fd, target in server_fds.items() if fd > 2), server_fds
    # The worker: stdin from /dev/null, stdout and stderr appended to its job log, and
    # nothing of the fork server's (its channel to the daemon, its wakeup pipe).
    assert worker_fds[0] == os.devnull
    assert [fd for fd, target in worker_fds.items() if target == os.devnull] == [0], worker_fds
    assert worker_fds[1] == worker_fds[2] == log
    assert os.stat(log).st_mode & 0o777 == 0o600
    server_own = {target for fd, target in server_fds.items() if fd > 2}
    assert server_own.isdisjoint(worker_fds.values()), worker_fds
    gate.touch()
    daemon.wait_job(job, "done")


def forked_worker_in_a_run(daemon, tmp_path):
    """A job whose worker (a child of the fork server) is in a run that never ends."""
    server = fork_server(daemon)
    job = daemon.start_job("hang", scenario=gated(tmp_path / "never"))
    worker = worker_of(daemon, job)
    assert worker.ppid() == server.pid
    wait_until(lambda: daemon.job(job)["state"] == "running" and daemon.job(job)["pending"] == 0, what="the run")
    return job, worker


def test_a_forked_worker_killed_by_sigkill_is_reported_so(daemon, tmp_path):
    job, worker = forked_worker_in_a_run(daemon, tmp_path)
    worker.kill()
    # Another start right away: the exit notice may come in while it waits for its fork.
    other = daemon.start_job("another", scenario={"default": {"steps": [{"say": "ran"}]}})
    row = daemon.wait_job(job, "failed")
    # The exit code came from the fork server (liveness alone says "exit status unknown").
    assert row["error"] == "worker died during a run (killed by SIGKILL)"
    assert row["live"] is False
    assert "died (killed by SIGKILL)" in daemon.paths.daemon_log.read_text()
    assert daemon.wait_job(other, "done")["summary"] == "ran"


def test_a_forked_worker_dies_of_sigint_as_a_fresh_interpreter_would(daemon, tmp_path):
    job, worker = forked_worker_in_a_run(daemon, tmp_path)
    # SIGINT is what the interpreter turns into KeyboardInterrupt: as `python -m
    # roost_core.worker` would, the forked worker dies of it.
    worker.send_signal(signal.SIGINT)
    row = daemon.wait_job(job, "failed")
    assert row["error"] == "worker died during a run (killed by SIGINT)"


def test_jobs_still_start_when_the_fork_server_is_killed(daemon, tmp_path):
    server = fork_server(daemon)
    gate = tmp_path / "gate"
    before = daemon.start_job("started before", scenario=gated(gate))
    orphan = worker_of(daemon, before)
    assert orphan.ppid() == server.pid
    server.kill()
    wait_until(lambda: gone(server), what="the fork server gone")

    after = daemon.start_job("started after", scenario={"default": {"steps": [{"say": "ran"}]}})
    assert daemon.wait_job(after, "done")["summary"] == "ran"
    replacement = fork_server(daemon)
    assert replacement.pid != server.pid
    later = daemon.start_job("started later", scenario={"default": {"steps": [{"say": "ran too"}]}})
    assert worker_of(daemon, later).ppid() == replacement.pid
    assert daemon.wait_job(later, "done")["summary"] == "ran too"

    # The worker the dead server forked keeps its job; when it ends, liveness notices.
    gate.touch()
    assert daemon.wait_job(before, "done")["summary"] == "through the gate"
    assert daemon.record(before)["worker_pid"] == orphan.pid
    orphan.kill()
    wait_until(lambda: not daemon.job(before)["live"], what="the orphaned worker's end noticed")


def test_a_wedged_fork_server_is_replaced_and_the_job_starts_anyway(daemon, tmp_path):
    server = fork_server(daemon)
    first = daemon.start_job("first", scenario={"default": {"steps": [{"say": "forked"}]}})
    assert worker_of(daemon, first).ppid() == server.pid  # so it is ready: it answered
    server.suspend()  # SIGSTOP: it cannot answer, and will never
    try:
        job = daemon.start_job("go", scenario={"default": {"steps": [{"say": "ran anyway"}]}})
        assert daemon.wait_job(job, "done")["summary"] == "ran anyway"
        wait_until(lambda: gone(server), what="the wedged fork server killed")
    finally:
        if not gone(server):
            server.kill()
    replacement = fork_server(daemon)
    assert replacement.pid != server.pid
    job = daemon.start_job("again", scenario={"default": {"steps": [{"say": "forked again"}]}})
    assert daemon.wait_job(job, "done")["summary"] == "forked again"
    assert "starting the worker without it" in daemon.paths.daemon_log.read_text()


def test_a_fork_server_that_cannot_start_is_given_up_and_jobs_start_without_it(daemon_factory, tmp_path):
    # A fork server that dies before it is ready (here: at interpreter start), every time.
    sabotage = tmp_path / "sabotage"
    sabotage.mkdir()
    (sabotage / "sitecustomize.py").write_text(
        "import os\n"
        "with open('/proc/self/cmdline', 'rb') as cmdline:\n"
        f"    if b'{FORKSERVER}' in cmdline.read():\n"
        "        os._exit(3)\n"
    )
    pythonpath = os.pathsep.join(p for p in (str(sabotage), os.environ.get("PYTHONPATH", "")) if p)
    daemon = daemon_factory(PYTHONPATH=pythonpath).start()
    for n in range(3):
        job = daemon.start_job(f"job {n}", scenario={"default": {"steps": [{"say": "ran {input}"}]}})
        assert daemon.wait_job(job, "done")["summary"] == f"ran job {n}"
    # Two servers that never became ready: the daemon stops starting them.
    assert worker_of(daemon, job).ppid() == daemon.process.pid
    assert not any(FORKSERVER in child.cmdline() for child in psutil.Process(daemon.process.pid).children() if not gone(child))
    log = daemon.paths.daemon_log.read_text()
    assert "2 worker fork servers never became ready; workers start without one" in log


@pytest.mark.parametrize("how", ["kill9", "stop"])
def test_the_fork_server_ends_with_its_daemon_and_its_workers_outlive_both(daemon, tmp_path, how):
    server = fork_server(daemon)
    gate = tmp_path / "gate"
    job = daemon.start_job("outlive", scenario=gated(gate))
    worker = worker_of(daemon, job)
    assert worker.ppid() == server.pid
    if how == "kill9":
        daemon.kill9()
    else:
        assert daemon.terminate() == 0
    wait_until(lambda: gone(server), what="the fork server exited")
    assert is_alive(worker.pid, worker.create_time())

    daemon.restart()
    # Re-found by pid and create time: the same worker reconnects and finishes its run.
    wait_until(lambda: daemon.job(job)["connected"], what="the worker reconnected")
    assert daemon.record(job)["worker_pid"] == worker.pid
    gate.touch()
    assert daemon.wait_job(job, "done")["summary"] == "through the gate"
    assert fork_server(daemon).pid != server.pid


# --------------------------------------------------------------------------- the channel itself


@pytest.fixture
def raw_server(tmp_path):
    """A fork server spoken to directly over its socketpair, as the daemon does."""
    ours, theirs = socket.socketpair()
    with open(tmp_path / "server.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", FORKSERVER, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stderr=log,
        )
    theirs.close()
    ours.settimeout(30)
    reader = ours.makefile("rb")

    def talk(line: bytes | None = None) -> dict:
        if line is not None:
            ours.sendall(line + b"\n")
        return json.loads(reader.readline())

    assert talk()["ready"] == process.pid
    yield talk
    reader.close()
    ours.close()
    assert process.wait(20) == 0  # the channel closed: it exits cleanly


def test_the_fork_server_answers_a_bad_request_and_keeps_serving(raw_server, tmp_path):
    assert "bad request" in raw_server(b"not json")["error"]
    assert "bad request" in raw_server(json.dumps({"id": 1, "env": [], "cwd": "/", "log": "x"}).encode())["error"]
    answer = raw_server(json.dumps({"id": 2, "env": {}, "cwd": "/", "log": str(tmp_path / "no" / "such" / "dir.log")}).encode())
    assert answer["id"] == 2 and "FileNotFoundError" in answer["error"]
    # Still serving: a worker without its job's variables exits at once with code 2.
    log = tmp_path / "worker.log"
    answer = raw_server(json.dumps({"id": 3, "env": {"PATH": os.environ.get("PATH", "")}, "cwd": str(tmp_path), "log": str(log)}).encode())
    assert answer["id"] == 3 and answer["pid"] > 0
    assert raw_server() == {"exit": answer["pid"], "code": 2}
    assert "a worker needs PI_JOB_TOKEN" in log.read_text()


def test_a_busy_daemon_replaces_its_fork_server_past_fd_setsize(daemon_factory, tmp_path):
    """A server started when the daemon holds over 1024 fds talks over a channel whose
    fd number ``select()`` cannot take."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2600  # the daemon's fds, and this test's end of every connection
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"needs {wanted} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        daemon = daemon_factory().start()  # inherits the raised limit
        server = fork_server(daemon)
        crowd = []
        try:
            for _ in range(1100):
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.connect(str(daemon.paths.socket))
                crowd.append(conn)
            wait_until(lambda: daemon.call("daemon_status")["connections"] > 1100, what="the crowd accepted")
            server.kill()
            wait_until(lambda: gone(server), what="the fork server gone")
            first = daemon.start_job("first", scenario={"default": {"steps": [{"say": "one"}]}})
            assert daemon.wait_job(first, "done")["summary"] == "one"
            replacement = fork_server(daemon)
            assert max(fd_targets(replacement.pid)) > 1024  # its channel
            second = daemon.start_job("second", scenario={"default": {"steps": [{"say": "two"}]}})
            assert worker_of(daemon, second).ppid() == replacement.pid
            assert daemon.wait_job(second, "done")["summary"] == "two"
        finally:
            for conn in crowd:
                conn.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
