"""Fixtures that run the real thing: a daemon process on a real Unix socket in a temp
``ROOST_HOME``, real worker subprocesses, real files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from roost_core.client import Client, DaemonUnavailable, wait_for_daemon
from roost_core.paths import Paths, resolve_paths
from roost_core.transcript import read_entries

WAIT_TIMEOUT = 30.0
#: How long a daemon may go without using any CPU while a test waits on it (an answer, its
#: start, its exit) before the test says it is stuck. A bound on a stall, not on speed: a
#: daemon that is slow because the machine is loaded still gets CPU time now and then.
STALL_SECONDS = 30.0
#: How often a patient wait looks at the daemon's progress.
PROGRESS_SLICE = 2.0
#: Folders whose every test is in the fast tier (``scripts/test.sh --fast``); elsewhere a
#: test joins it with ``@pytest.mark.smoke``.
FAST_FOLDERS = ("unit", "plugins")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bench", action="store_true", help="also run the benchmarks' smoke runs (tests marked bench)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every unit and plugin test ``smoke``, so ``-m smoke`` selects the fast tier;
    leave out the benchmarks' smoke runs (marked ``bench``) unless ``--bench``: they check
    that ``bench/`` still runs, not what roost does, and take a minute and a half of the
    full run (``scripts/test.sh --bench`` runs them; so does CI)."""
    if not config.getoption("--bench"):
        benches = [item for item in items if item.get_closest_marker("bench")]
        if benches:
            config.hook.pytest_deselected(items=benches)
            items[:] = [item for item in items if not item.get_closest_marker("bench")]
    here = Path(__file__).parent
    for item in items:
        try:
            folder = item.path.relative_to(here).parts[0]
        except ValueError:
            continue
        if folder in FAST_FOLDERS:
            item.add_marker(pytest.mark.smoke)


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT_TIMEOUT, interval: float = 0.02, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy (never a blind sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_while_progressing(
    predicate: Callable[[], Any], progress: Callable[[], Any], stall: float = STALL_SECONDS, interval: float = 0.05, what: str = "condition"
) -> Any:
    """Poll ``predicate`` until it returns something truthy, for as long as ``progress()``
    (any value that changes as the work goes on: counts, states) keeps changing; fail once
    it has not changed for ``stall`` seconds. For waits whose length follows the machine's
    speed (a load draining): a slow machine is no failure, a stuck one is."""
    seen = progress()
    changed = time.monotonic()
    while True:
        value = predicate()
        if value:
            return value
        now = progress()
        if now != seen:
            seen, changed = now, time.monotonic()
        elif time.monotonic() - changed > stall:
            raise AssertionError(f"no progress for {stall:g}s waiting for {what} (last: {now!r})"[:2000])
        time.sleep(interval)


class DaemonProgress:
    """Whether a daemon process is still working: alive, and its CPU time grew within the
    last ``stall`` seconds."""

    def __init__(self, pid: int, stall: float = STALL_SECONDS) -> None:
        import psutil

        self.pid = pid
        self.stall = stall
        try:
            self._process: Any = psutil.Process(pid)
        except psutil.Error:
            self._process = None
        self._cpu = self._cpu_time()
        self._changed = time.monotonic()

    def _cpu_time(self) -> float | None:
        import psutil

        if self._process is None:
            return None
        try:
            times = self._process.cpu_times()
        except psutil.Error:
            return None
        return times.user + times.system

    def working(self) -> bool:
        cpu = self._cpu_time()
        if cpu is None:
            return False
        if self._cpu is None or cpu > self._cpu:
            self._cpu, self._changed = cpu, time.monotonic()
            return True
        return time.monotonic() - self._changed < self.stall

    def why_not(self) -> str:
        if self._cpu_time() is None:
            return f"the daemon (pid {self.pid}) is gone"
        return f"the daemon (pid {self.pid}) used no CPU for {self.stall:g}s"


class PatientClient(Client):
    """The CLI's client for a test's daemon, with no fixed time limit on an answer: it
    waits as long as the daemon is working (:class:`DaemonProgress`), so a loaded machine
    makes a call slow, never a failure; a daemon that is gone or does nothing at all for
    :data:`STALL_SECONDS` fails it (``TimeoutError``)."""

    def __init__(self, path: Path, progress: DaemonProgress | None) -> None:
        self.progress = progress
        # Connecting and sending keep the old limit (a send cut off by a timeout could
        # not be taken up again); reads are patient.
        super().__init__(path, timeout=20.0)

    def _next_frame(self) -> Any:
        if self.progress is None:
            return super()._next_frame()
        self.sock.settimeout(PROGRESS_SLICE)
        try:
            while True:
                try:
                    return super()._next_frame()
                except TimeoutError:
                    # Nothing is lost: the decoder keeps what it read of a frame so far.
                    if not self.progress.working():
                        raise TimeoutError(f"no answer: {self.progress.why_not()}") from None
        finally:
            self.sock.settimeout(20.0)


def _alive(pid: int) -> bool:
    from roost_core.locks import is_alive

    return is_alive(pid)


class DaemonHandle:
    """A daemon process for one test, and helpers to talk to it and to break it."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.env = env
        self.paths: Paths = resolve_paths(env)
        self.process: subprocess.Popen | None = None

    def start(self, *cli_flags: str) -> DaemonHandle:
        """Launch the daemon and wait until it answers, for as long as it is working;
        with ``cli_flags``, as ``roost FLAGS daemon`` (the CLI's own flag parsing)."""
        process = self.launch(*cli_flags)
        progress = DaemonProgress(process.pid)
        while True:
            try:
                wait_for_daemon(self.paths, timeout=PROGRESS_SLICE, process=process)
                return self
            except DaemonUnavailable:
                if process.poll() is not None:
                    # It exited (it lost the race to a daemon that was there, which may
                    # still be coming up): the old bound, once.
                    wait_for_daemon(self.paths, timeout=20)
                    return self
                if not progress.working():
                    raise DaemonUnavailable(f"the daemon did not start: {progress.why_not()} (see {self.paths.daemon_log})") from None

    def launch(self, *cli_flags: str) -> subprocess.Popen:
        """Start the daemon process (its output to the daemon log) without waiting for it."""
        self.paths.ensure()
        command = ["-m", "roost_core.cli", *cli_flags, "daemon"] if cli_flags else ["-m", "roost_core.daemon"]
        with open(self.paths.daemon_log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, *command],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        return self.process

    def client(self, timeout: float | None = None) -> Client:
        """A client of this daemon: patient (:class:`PatientClient`), or with a fixed
        socket ``timeout`` when one is given."""
        if timeout is not None:
            return Client(self.paths.socket, timeout=timeout)
        running = self.process is not None and self.process.poll() is None
        return PatientClient(self.paths.socket, DaemonProgress(self.process.pid) if running else None)

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        with self.client() as conn:
            return conn.call(op, **args)

    def kill9(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def terminate(self) -> int:
        """SIGTERM, and its exit code once it has stopped (waiting as long as it works)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        progress = DaemonProgress(self.process.pid)
        while True:
            try:
                return self.process.wait(PROGRESS_SLICE)
            except subprocess.TimeoutExpired:
                if not progress.working():
                    raise AssertionError(f"the daemon did not stop after SIGTERM: {progress.why_not()}") from None

    def restart(self) -> DaemonHandle:
        return self.start()

    # -------------------------------------------------------------- job helpers

    def start_job(self, task: str, **args: Any) -> str:
        args.setdefault("cwd", str(self.home))
        # Tests name the scripted host: without one, `start` picks pi when it is installed.
        args.setdefault("host", "scripted")
        return self.call("start", task=task, **args)["id"]

    def job(self, job_id: str) -> dict[str, Any]:
        rows = {row["id"]: row for row in self.call("jobs")["jobs"]}
        return rows[job_id]

    def wait_job(self, job_id: str, *states: str, timeout: float = WAIT_TIMEOUT) -> dict[str, Any]:
        states = states or ("idle", "needs_input", "done", "failed", "stopped")

        last: dict[str, Any] = {}

        def settled() -> dict[str, Any] | None:
            row = last["row"] = self.job(job_id)
            if row["state"] in states and (row["pending"] == 0 or row["state"] == "stopped"):
                return row
            return None

        try:
            return wait_until(settled, timeout, what=f"job {job_id} in {states}")
        except AssertionError as timed_out:
            # What the job last looked like and what its worker and the daemon last said:
            # a timeout in CI is then a report, not a riddle.
            raise AssertionError(f"{timed_out}; last row: {last.get('row')}\n{self.log_tails(job_id)}") from None

    def received(self, job_id: str, text: str) -> dict[str, Any] | None:
        """The receipt of the item holding ``text`` that the job received (the ``log``
        op's ``received``), or None."""
        return next((r for r in self.call("log", job=job_id)["received"] if r["preview"] == text), None)

    def wait_seen(self, job_id: str, text: str, timeout: float = 60) -> dict[str, Any]:
        """The job's receipt for ``text``, once it says ``seen`` (its model had it)."""
        return wait_until(lambda: (r := self.received(job_id, text)) and r["seen"] and r, timeout, what=f"{text!r} seen by {job_id}")

    def log_tails(self, job_id: str, lines: int = 40) -> str:
        """The last ``lines`` of the job's worker log and of the daemon log."""
        out = []
        for path in (self.paths.jobs_dir / f"{job_id}.log", self.paths.daemon_log):
            try:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError as error:
                tail = [f"({error})"]
            out.append(f"--- {path.name}:\n" + "\n".join(tail))
        return "\n".join(out)

    def wait_reaped(self, job_id: str) -> dict[str, Any]:
        return wait_until(lambda: (row := self.job(job_id)) and not row["live"] and row, what=f"job {job_id} reaped")

    def entries(self, job_id: str) -> list[dict[str, Any]]:
        """The job's transcript (its own session file, which an adopted session moves)."""
        record = self.paths.jobs_dir / f"{job_id}.json"
        session = json.loads(record.read_text())["session"] if record.exists() else self.paths.sessions_dir / f"{job_id}.jsonl"
        return read_entries(session)

    def record(self, job_id: str) -> dict[str, Any]:
        return json.loads((self.paths.jobs_dir / f"{job_id}.json").read_text())

    def worker_pids(self) -> list[int]:
        pids = []
        for path in self.paths.jobs_dir.glob("*.json"):
            try:
                pid = json.loads(path.read_text()).get("worker_pid")
            except ValueError:
                continue
            if pid:
                pids.append(pid)
        return pids

    def cleanup(self) -> None:
        pids = self.worker_pids()
        # SIGTERM first, so workers still write their coverage data; then SIGKILL.
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 3
        while pids and time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.02)
        if self.process is not None and self.process.poll() is None:
            try:
                self.call("daemon_stop")
            except (DaemonUnavailable, OSError):
                pass
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        for pid in set(pids + self.worker_pids()):
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def user_messages(entries: list[dict[str, Any]]) -> list[str]:
    from roost_core.transcript import content_text

    return [content_text(e["message"]["content"]) for e in entries if e.get("type") == "message" and e["message"].get("role") == "user"]


def agent_items(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("type") == "custom_message" and e.get("customType") == "pi-roost-agent-message"]


#: The example plugins (examples/plugins/) are installed in the venv their own tests run in
#: (.venv-examples) and would be autoloaded by every daemon there; each of those tests
#: unblocks only its own plugin. In .venv they are not installed and blocking them is a
#: no-op (keep these names in an override that blocks more).
BLOCKED_BY_DEFAULT = "repo-reach,json-envelope,peek-tool,command-host"


@pytest.fixture
def roost_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ)
    for key in list(env):
        # COLUMNS/LINES: what the CLI prints must not depend on the terminal the tests
        # were started from (a shell or pytest-xdist may export them).
        # ROOST_PLATFORM stays: a run with the portable platform forced (CI's second run)
        # forces it on every daemon and worker it starts.
        if (key.startswith("ROOST_") and key != "ROOST_PLATFORM") or key in ("PI_JOB_TOKEN", "COLUMNS", "LINES"):
            env.pop(key)
    env["ROOST_HOME"] = str(home)
    env["ROOST_WORKER_ORPHAN_SECONDS"] = "30"
    env["ROOST_DISABLE_PLUGINS"] = BLOCKED_BY_DEFAULT
    return env


@pytest.fixture
def write_config(roost_env: dict[str, str]) -> Callable[[dict[str, Any]], Path]:
    def write(data: dict[str, Any]) -> Path:
        path = Path(roost_env["ROOST_HOME"]) / "roost.json"
        path.write_text(json.dumps(data))
        return path

    return write


@pytest.fixture
def daemon_factory(roost_env: dict[str, str]):
    handles: list[DaemonHandle] = []

    def make(**extra_env: str) -> DaemonHandle:
        env = {**roost_env, **extra_env}
        handle = DaemonHandle(Path(env["ROOST_HOME"]), env)
        handles.append(handle)
        return handle

    yield make
    for handle in handles:
        handle.cleanup()


@pytest.fixture
def daemon(daemon_factory) -> DaemonHandle:
    return daemon_factory().start()


@pytest.fixture
def sleepers() -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Starts child processes that wait to be killed (standing in for workers the daemon
    did not start); every one is killed and reaped after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()
        child.wait()
