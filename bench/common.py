"""What every benchmark shares: a real roost daemon in a throwaway ROOST_HOME, helper
processes driven over pipes, percentiles, the machine's description and the result rows.

Timestamps cross process boundaries: ``time.perf_counter`` is CLOCK_MONOTONIC on Linux,
one clock for every process on the machine.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import attrs

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

#: Config every benchmark daemon runs with: senders are not rate-limited, no-session
#: foreground peers (each its own tree) may reach each other by id, spawn caps are out of
#: the way of the cold-start loop, and nothing is reaped during a run.
BENCH_CONFIG: dict[str, Any] = {
    "agentMessagesPerMinute": 1_000_000,
    "agentExternalMessages": True,
    "agentMaxChildren": 1000,
    "agentMaxPerTree": 1000,
    "agentMaxSpawned": 1000,
    "agentSpawnsPerMinute": 1_000_000,
    "reapAfterSeconds": 3600,
}

#: File descriptors the bench (and the daemon it starts, which inherits the limit) may open.
NOFILE_WANTED = 65536


def raise_nofile(wanted: int = NOFILE_WANTED) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# --------------------------------------------------------------------------- numbers


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an unsorted list."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def fmt_time(seconds: float) -> str:
    if seconds != seconds:
        return "n/a"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_rate(per_second: float) -> str:
    return f"{per_second:,.0f}/s"


def fmt_bytes(count: float) -> str:
    if count >= 1024 * 1024:
        return f"{count / 1024 / 1024:.1f} MiB"
    if count >= 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count:.0f} B"


@attrs.define
class Row:
    """One line of the results table.

    ``ratio`` is roost / baseline (a time: lower is better; a rate: higher is better);
    ``target`` says what it must be and ``met`` whether it is (None: nothing to meet).
    """

    bench: str
    metric: str
    roost: str
    baseline: str = "—"
    ratio: float | None = None
    target: str = "—"
    met: bool | None = None
    raw: dict[str, Any] = attrs.field(factory=dict)

    def cells(self) -> list[str]:
        ratio = "—" if self.ratio is None else f"{self.ratio:.2f}x"
        met = {None: "—", True: "yes", False: "**no**"}[self.met]
        return [self.bench, self.metric, self.roost, self.baseline, ratio, self.target, met]


HEADER = ["benchmark", "metric", "roost", "baseline", "ratio", "target", "met"]


def ratio_of(roost: float, baseline: float) -> float | None:
    """roost / baseline, or None when the baseline measured nothing (a window in which a
    loaded machine completed no message is a measurement, not a crash)."""
    return roost / baseline if baseline else None


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)


def machine_description() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    fs = "?"
    tmp = tempfile.gettempdir()
    try:
        best = ""
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mount, kind = line.split()[:3]
            if tmp.startswith(mount) and len(mount) > len(best):
                best, fs = mount, f"{kind} on {dev}"
    except OSError:
        pass
    try:
        import orjson  # noqa: F401

        codec = "orjson available"
    except ImportError:
        codec = "no orjson"
    try:
        import msgspec  # noqa: F401

        codec += ", msgspec available"
    except ImportError:
        codec += ", no msgspec"
    from importlib.metadata import version

    import anyio  # noqa: F401

    return (
        f"{os.cpu_count()} vCPU {cpu}, {mem} RAM, {fs} ({tmp}), Linux {platform.release()}, "
        f"Python {platform.python_version()}, anyio {version('anyio')} (asyncio loop), {codec}; "
        f"default plugins only{' (blocked: ' + ', '.join(extra_plugins()) + ')' if extra_plugins() else ''}; "
        f"load average at start {os.getloadavg()[0]:.2f}"
    )


# --------------------------------------------------------------------------- processes


class Agent:
    """A helper process (``python -m bench.agents``) spoken to by JSON lines on its
    stdin/stdout."""

    def __init__(self, role: str, args: dict[str, Any], *, env: dict[str, str] | None = None) -> None:
        # Its stderr goes to a file, shown only when the agent fails.
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - open for the agent's life, closed in close()
        self.process = subprocess.Popen(
            [PYTHON, "-m", "bench.agents", role, json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            cwd=str(REPO),
            env=env or bench_env(),
            text=True,
            bufsize=1,
        )
        self.pid = self.process.pid

    def tell(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def hear(self, timeout: float = 60.0) -> dict[str, Any]:
        assert self.process.stdout is not None
        import select

        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"agent {self.pid} said nothing for {timeout}s{self.stderr_tail()}")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"agent {self.pid} exited (code {self.process.wait()}){self.stderr_tail()}")
        return json.loads(line)

    def stderr_tail(self) -> str:
        self.log.seek(0)
        text = self.log.read()[-3000:]
        return f"; its stderr:\n{text}" if text else ""

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()  # type: ignore[union-attr]
                self.process.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.log.close()


def bench_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ROOST_") and key != "PI_JOB_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def write_job_records(paths: Any, count: int, *, state: str = "done",
                      workers: list[tuple[int, float]] | None = None) -> list[Any]:
    """``count`` job records written in the home of ``paths`` (a daemon's
    :class:`~roost_core.paths.Paths`) before its daemon starts (it loads them as after a
    restart); ``workers[n]`` (pid, create time) names record n's worker process. Returns
    the :class:`~roost_core.daemon.jobs.Job` records."""
    from roost_core import identity
    from roost_core.daemon.jobs import Job
    from roost_core.store import JobFiles

    files = JobFiles(paths.jobs_dir, durable=False)
    taken: set[str] = set()
    now = time.time()
    jobs = []
    for n in range(count):
        job_id = identity.new_job_id(taken)
        taken.add(job_id)
        pid, create_time = workers[n] if workers else (None, None)
        job = Job(
            id=job_id,
            name=f"job {n}",
            host="scripted",
            cwd=str(paths.home),
            session=str(paths.sessions_dir / f"{job_id}.jsonl"),
            token=identity.new_token(),
            task=f"task {n}",
            state=state,
            summary=f"finished task {n}" if state == "done" else None,
            created=now - count + n,
            updated=now,
            worker_pid=pid,
            worker_create_time=create_time,
        )
        files.save(job_id, job.to_json())
        jobs.append(job)
    return jobs


class RoostDaemon:
    """A real daemon process in a throwaway ROOST_HOME (removed on close)."""

    def __init__(self, *, durable: bool = True, config: dict[str, Any] | None = None, label: str = "roost") -> None:
        self.home = Path(tempfile.mkdtemp(prefix=f"rb-{label}-"))
        (self.home / "roost.json").write_text(json.dumps({**BENCH_CONFIG, **(config or {})}))
        self.env = bench_env({"ROOST_HOME": str(self.home), "ROOST_DURABLE": "1" if durable else "0"})
        blocked = extra_plugins()
        if blocked:
            self.env["ROOST_DISABLE_PLUGINS"] = ",".join(blocked)
        from roost_core.paths import resolve_paths

        self.paths = resolve_paths(self.env)
        self.paths.ensure()
        self.label = label
        self.process: subprocess.Popen | None = None
        self.spy: subprocess.Popen | None = None

    @property
    def socket(self) -> str:
        return str(self.paths.socket)

    def start(self) -> RoostDaemon:
        from roost_core.client import wait_for_daemon

        with open(self.paths.daemon_log, "ab") as log:
            self.process = subprocess.Popen(
                [PYTHON, "-m", "roost_core.daemon"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        wait_for_daemon(self.paths, timeout=30, process=self.process)
        profile_dir = os.environ.get("BENCH_PROFILE")
        if profile_dir:
            # Sample the daemon while it works (see bench/profile.py to read the output).
            Path(profile_dir).mkdir(parents=True, exist_ok=True)
            out = Path(profile_dir) / f"{self.label}-{self.process.pid}.txt"
            spy = shutil.which("py-spy", path=str(Path(PYTHON).parent)) or shutil.which("py-spy")
            if spy:
                self.spy = subprocess.Popen(
                    [spy, "record", "-p", str(self.process.pid), "-r", "400", "-f", "raw", "--nonblocking", "-o", str(out)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                time.sleep(0.3)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        from roost_core.client import Client

        with Client(self.paths.socket, timeout=60) as client:
            return client.call(op, **args)

    def worker_pids(self) -> list[int]:
        pids = []
        for path in self.paths.jobs_dir.glob("*.json"):
            try:
                pid = json.loads(path.read_text()).get("worker_pid")
            except (OSError, ValueError):
                continue
            if pid and pid != os.getpid():
                pids.append(pid)
        return pids

    def close(self) -> None:
        pids = self.worker_pids()
        if self.spy is not None:
            self.spy.send_signal(signal.SIGINT)
            try:
                self.spy.wait(20)
            except subprocess.TimeoutExpired:
                self.spy.kill()
            self.spy = None
        if self.process is not None and self.process.poll() is None:
            try:
                self.call("daemon_stop")
                self.process.wait(15)
            except Exception:  # noqa: BLE001
                self.process.kill()
                self.process.wait()
        for pid in pids:
            # Only workers this daemon started (their own process group).
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> RoostDaemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BareServer:
    """The baseline broker process (``python -m bench.bare serve``; with ``module``
    "bench.lean", the lean broker, ``uvloop`` choosing its loop)."""

    def __init__(self, *, durable: bool = False, rows: int = 0, label: str = "bare", module: str = "bench.bare",
                 uvloop: bool = False) -> None:
        self.home = Path(tempfile.mkdtemp(prefix=f"rb-{label}-"))
        self.socket = str(self.home / "bare.sock")
        args = [PYTHON, "-m", module, "serve", "--socket", self.socket, "--rows", str(rows)]
        if durable:
            args += ["--journal", str(self.home / "bare.journal")]
        if uvloop:
            args.append("--uvloop")
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, cwd=str(REPO), env=bench_env(), text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"bare server did not start: {line!r}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> BareServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def extra_plugins() -> list[str]:
    """Plugins installed beside the defaults (a developer's venv has the examples): the
    benchmarks block them, so they measure roost as it ships."""
    from importlib import metadata

    from roost_core.plugins import DEFAULT_PLUGINS

    return sorted({ep.name for ep in metadata.entry_points(group="roost")} - set(DEFAULT_PLUGINS))


def rss_bytes(pid: int) -> int:
    """Resident private memory (USS when the kernel tells it, else RSS)."""
    import psutil

    process = psutil.Process(pid)
    try:
        return int(process.memory_full_info().uss)
    except (psutil.AccessDenied, AttributeError):
        return int(process.memory_info().rss)


def thread_schedstats(pid: int) -> dict[int, tuple[int, int]]:
    """Each thread of ``pid``: nanoseconds it has run on a core and waited, runnable, for
    one (Linux's ``/proc/PID/task/TID/schedstat``); empty where the kernel has none."""
    stats: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return stats
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ran, waited = f.read().split()[:2]
        except (OSError, ValueError):
            continue
        stats[int(tid)] = (int(ran), int(waited))
    return stats


def busiest_thread(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], seconds: float) -> tuple[float, float] | None:
    """The share of ``seconds`` that the thread which ran most between two
    :func:`thread_schedstats` readings ran, and the share it waited for a core: a server
    whose loop thread adds up to about 1 is bound by that thread's CPU; one well below it
    is bound by its round trips (the disk, the clients, the wakeups)."""
    deltas = [(after[tid][0] - ran, after[tid][1] - waited) for tid, (ran, waited) in before.items() if tid in after]
    if not deltas or seconds <= 0:
        return None
    ran, waited = max(deltas)
    return ran / 1e9 / seconds, waited / 1e9 / seconds


def wait_for_socket(path: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
            return
        except OSError:
            time.sleep(0.01)
        finally:
            probe.close()
    raise TimeoutError(f"nothing listens on {path}")


def message_text(size: int = 200) -> str:
    """A message body of about ``size`` characters after the timestamp."""
    words = "the quick brown fox jumps over the lazy dog and reports back to its parent "
    return (words * (size // len(words) + 1))[:size]


def item_record_size(content: str, text: str) -> int:
    """Bytes of roost's journal record for a message item with ``content`` and ``text``
    (the checkout's own record shape: an older one, the "before" of a comparison, wrote
    its items another way)."""
    from roost_core.protocol import encode
    from roost_core.queue import Item

    item = Item(seq=1, kind="message", content=content, text=text)
    try:
        from roost_core.daemon.delivery import item_record
    except ImportError:  # before items were stored as their deliver events
        return len(encode({"op": "item", "job": "j-01234567", "item": item.to_json()}))
    return len(item_record("j-01234567", encode(item.to_event())))



def find_agent(variable: str, program: str, *, on_path: bool = True) -> str | None:
    """The agent CLI ``program`` a host's benchmark runs: ``$variable``, else the copy its
    install script put under ``tests/PROGRAM/node_modules``, else (``on_path``) the one
    on PATH; None when there is none."""
    configured = os.environ.get(variable)
    if configured:
        return configured
    local = REPO / "tests" / program / "node_modules" / ".bin" / program
    if local.exists():
        return str(local)
    return shutil.which(program) if on_path else None


async def wait_settled(client: Any, job: str, timeout: float) -> None:
    """Until job ``job``'s run has ended (done, idle or failed), asking ``client``'s daemon
    every 50 ms, so a host benchmark's next sample does not share the CPU with it; a
    TimeoutError after ``timeout`` seconds."""
    import anyio  # only the host benchmarks, which run an async client, need it

    deadline = time.monotonic() + timeout
    while True:
        row = next(r for r in (await client.call("jobs"))["jobs"] if r["id"] == job)
        if row["state"] in ("done", "idle", "failed"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{job} never settled: {row}")
        await anyio.sleep(0.05)


class Arrivals:
    """When each prompt reached a fake model: the fake's request log (its own thread)
    adds them, a benchmark waits for one."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str]] = []
        self.changed = threading.Condition()

    def add(self, when: float, text: str) -> None:
        """A request whose last user message is ``text`` arrived at ``when``."""
        with self.changed:
            self.seen.append((when, text))
            self.changed.notify_all()

    def first(self, marker: str, timeout: float) -> float:
        """When the first request whose last user message holds ``marker`` arrived
        (waiting up to ``timeout`` seconds for it)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for when, text in self.seen:
                    if marker in text:
                        return when
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"the model never got {marker!r}")
                self.changed.wait(remaining)
