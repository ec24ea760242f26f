"""Real pi: spawn → the child's first model request, wake from hibernation, and what a
hibernated child costs.

Needs the pinned pi (``scripts/install-pi.sh`` puts it in ``tests/pi/node_modules``, or
``ROOST_PI_BIN``) and the test kit's fake OpenAI-compatible model
(``tests/pi/fake_openai.py``, a thread of this process on 127.0.0.1, answering at once).
Every pi runs in a throwaway pi home (``HOME``, ``PI_CODING_AGENT_DIR``, ``TMPDIR``,
``PI_OFFLINE=1``), as the tests do.

*Baseline*, measured in the same run, alternating with roost's samples so both see the
same load: **bare pi's cold start** with the roost extension — from just before
``Popen(pi --mode rpc --session NEW -e roost-extension.ts)`` (the command the pi host
runs) with the ``prompt`` written to its stdin at once, to the fake model receiving that
prompt's request. The extension runs as a foreground session, fetching its tools from the
bench's daemon. Every pi of the run shares one ``$TMPDIR`` (jiti's transpile cache of the
extension, warm after the first start, as on a machine that has run pi before); one bare
start and one spawn are made first and not counted.

Rows:

* **spawn, warm pool**: a no-session foreground peer sends ``spawn {host: "pi"}`` once
  the pool has a warm pi ready (``piPoolSize`` 1; the run's first spawn taught it what to
  warm); the clock runs from just before the request is written to the fake model
  receiving the child's first request (its task). Each child is removed afterwards.
* **spawn, no pool** (``piPool: false``, a second daemon): the same with a cold pi per
  child; minus the baseline, that is roost's own share of a cold spawn.
* **wake**: each warm-pool child settles, is hibernated (``hibernateAfterSeconds``), and
  is sent a message once the pool has a warm pi ready again; from just before ``send`` to
  the fake model receiving the request with that message (the warm pi switches to the
  child's session file). Against bare pi's cold start.
* **four at once**: the parent spawns four children at once (four ``spawn`` requests in
  flight together) once the pool has learnt a burst of four (a first fan-out, not
  counted) and has four warm pis ready (``piPoolMax`` 4); from just before the first
  request to the fake model receiving the last of the four tasks. Baseline: four bare
  pis started at once, to the last of their four requests.
* **hibernated child, processes**: live processes whose environment names the child
  (``ROOST_JOB=<id>``), read from /proc once it is hibernated (goal 0).
* **hibernated child, daemon memory**: the daemon's private memory (USS) after N
  children spawned and hibernated, against before them, per child (scripted children, so
  that N can be large enough to see a few KiB: the daemon holds the same record whatever
  the host).
* **one warm pi waiting**: RSS and private memory (USS) of a ready warm pi and of its
  worker, and the CPU time each spent to get there (user + system, from /proc).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import (
    REPO,
    Arrivals,
    RoostDaemon,
    Row,
    find_agent,
    fmt_bytes,
    fmt_time,
    median,
    percentile,
    rss_bytes,
)

KIT = REPO / "tests" / "pi"
HIBERNATE_AFTER = 0.5
TIMEOUT = 120.0
#: Children spawned at once in the fan-out rows.
FAN_OUT = 4


class PiUnavailable(RuntimeError):
    """pi (or node) is not installed here."""


def find_pi() -> str:
    found = find_agent("ROOST_PI_BIN", "pi")
    if not found:
        raise PiUnavailable("pi is not installed: run scripts/install-pi.sh or set ROOST_PI_BIN")
    return found


class World:
    """A pi home, the fake model and a roost daemon, all throwaway."""

    def __init__(self, config: dict[str, Any] | None = None, label: str = "pi") -> None:
        sys.path.insert(0, str(KIT))
        from fake_openai import FakeOpenAI

        self.pi = find_pi()
        self.root = Path(tempfile.mkdtemp(prefix=f"rb-{label}-"))
        self.agent_dir = self.root / "pihome" / ".pi" / "agent"
        self.agent_dir.mkdir(parents=True)
        self.tmpdir = self.root / "t"
        self.tmpdir.mkdir()
        self.arrivals = Arrivals()
        self.fake = FakeOpenAI({"default": {"steps": [{"say": "ok: {input}"}]}}, self.root / "model.jsonl").start()
        self.fake.log = self._log  # type: ignore[method-assign]
        provider = {
            "baseUrl": self.fake.base_url,
            "api": "openai-completions",
            "apiKey": "FAKE_LLM_API_KEY",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": "fake-model", "name": "fake", "reasoning": False, "input": ["text"], "contextWindow": 128000, "maxTokens": 4096}],
        }
        (self.agent_dir / "models.json").write_text(json.dumps({"providers": {"fake": provider}}))
        (self.agent_dir / "settings.json").write_text(json.dumps({"defaultProvider": "fake", "defaultModel": "fake-model", "quietStartup": True}))
        self.daemon = RoostDaemon(config=config, label=label)
        node_dir = str(Path(shutil.which("node") or "/usr/bin/node").parent)
        for key in list(self.daemon.env):
            if key.endswith("_API_KEY") or (key.startswith("PI_") and key != "PI_OFFLINE"):
                self.daemon.env.pop(key)
        self.daemon.env.update(
            {
                "HOME": str(self.root / "pihome"),
                "PI_CODING_AGENT_DIR": str(self.agent_dir),
                "TMPDIR": str(self.tmpdir),
                "PI_OFFLINE": "1",
                "FAKE_LLM_API_KEY": "fake-key",
                "NO_PROXY": "127.0.0.1,localhost",
                "ROOST_PI_BIN": self.pi,
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(Path(self.pi).parent), node_dir, os.environ.get("PATH", "/usr/bin:/bin")]),
            }
        )
        for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            self.daemon.env.pop(key, None)

    def _log(self, body: dict[str, Any], reply: dict[str, Any]) -> None:
        """The fake model's request log, kept in memory: when each prompt arrived."""
        now = time.time()
        messages = body.get("messages") or []
        text = ""
        for message in reversed(messages):
            if message.get("role") == "user":
                content = message.get("content")
                text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
                break
        self.arrivals.add(now, text)

    def arrival(self, marker: str, timeout: float = TIMEOUT) -> float:
        """When the first request whose last user message holds ``marker`` arrived."""
        return self.arrivals.first(marker, timeout)

    def start(self) -> World:
        self.daemon.start()
        return self

    def close(self) -> None:
        self.daemon.close()
        self.fake.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ bare pi

    def bare_cold_start(self, n: int, at_once: int = 1) -> float:
        """Bare pi with the extension: process start (prompt written at once) → request;
        with ``at_once`` pis started together, → the last of their requests."""
        from roost_plugins.pi import extension_path

        folder = self.root / "bare"
        folder.mkdir(exist_ok=True)
        env = dict(self.daemon.env, ROOST_SOCKET=self.daemon.socket)
        markers = [f"bare-{n}-{k}-{os.urandom(3).hex()}" for k in range(at_once)]
        processes = []
        t0 = time.time()
        for k, marker in enumerate(markers):
            argv = [self.pi, "--mode", "rpc", "--session", str(folder / f"s{n}-{k}.jsonl"), "-e", str(extension_path())]
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=str(self.root))
            assert process.stdin is not None
            process.stdin.write((json.dumps({"type": "prompt", "message": marker}) + "\n").encode())
            process.stdin.flush()
            processes.append(process)
        try:
            return max(self.arrival(marker) for marker in markers) - t0
        finally:
            for process in processes:
                assert process.stdin is not None
                process.stdin.close()
            for process in processes:
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


class Parent:
    """A no-session foreground peer (a raw client) that spawns and messages children."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.client: Any = None

    async def open(self, tg: Any) -> None:
        from roost_core.client import AsyncClient

        self.client = await AsyncClient.open(self.world.daemon.socket)
        tg.start_soon(self.client.run)
        await self.client.call("peer_register", session=None, name="bench parent", pid=os.getpid(), sessionId=os.urandom(8).hex(), cwd=str(self.world.root))

    async def spawn(self, marker: str, host: str = "pi") -> tuple[str, float]:
        """Spawn a child whose task is ``marker``: its id and when the request was made."""
        t0 = time.time()
        result = await self.client.call("spawn", task=marker, name=marker, host=host, cwd=str(self.world.root), model="fake/fake-model", thinking="off")
        return result["id"], t0

    async def job(self, job_id: str) -> dict[str, Any]:
        rows = (await self.client.call("jobs"))["jobs"]
        return next(row for row in rows if row["id"] == job_id)

    async def until(self, job_id: str, predicate: Any, what: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            row = await self.job(job_id)
            if predicate(row):
                return row
            if time.monotonic() > deadline:
                raise TimeoutError(f"{job_id} never {what}: {row}")
            await anyio.sleep(0.02)


def processes_of(job_id: str) -> list[int]:
    """Live processes whose environment names ``job_id`` (read from /proc)."""
    needle = f"ROOST_JOB={job_id}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


# ---------------------------------------------------------------------- measurements


async def pool_ready(parent: Parent, count: int = 1, timeout: float = TIMEOUT) -> None:
    """Until the pool has ``count`` warm pis ready and none warming (a pi starting in the
    background would share the CPU with what is measured next)."""
    deadline = time.monotonic() + timeout
    while True:
        pool = (await parent.client.call("daemon_status"))["pool"]
        if pool["ready"] >= count and pool["warming"] == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the pool never got {count} warm pi(s) ready: {pool}")
        await anyio.sleep(0.05)


async def fan_out(parent: Parent, tag: str, at_once: int = FAN_OUT) -> tuple[list[str], float]:
    """Spawn ``at_once`` children together: their ids, and from just before the first
    request to the fake model receiving the last of their tasks."""
    markers = [f"{tag}-{k}-{os.urandom(3).hex()}" for k in range(at_once)]
    ids: list[str] = []

    async def one(marker: str) -> None:
        child, _ = await parent.spawn(marker)
        ids.append(child)

    t0 = time.time()
    async with anyio.create_task_group() as tg:
        for marker in markers:
            tg.start_soon(one, marker)
    last = max([await anyio.to_thread.run_sync(parent.world.arrival, marker) for marker in markers])
    return ids, last - t0


def warm_slot_cost(world: World) -> dict[str, float]:
    """Memory and CPU of the one ready warm slot: its pi and its worker (from /proc)."""
    import psutil

    home = str(world.daemon.paths.home)
    for process in psutil.process_iter(["pid", "exe", "environ"]):
        environ = process.info.get("environ") or {}
        if environ.get("ROOST_HOME") == home and (process.info.get("exe") or "").rsplit("/", 1)[-1].startswith("node"):
            worker = process.parent()
            if worker is None:
                continue
            out: dict[str, float] = {}
            for name, proc in (("pi", process), ("worker", worker)):
                info = proc.memory_full_info()
                times = proc.cpu_times()
                out[f"{name}_rss"] = float(info.rss)
                out[f"{name}_uss"] = float(info.uss)
                out[f"{name}_cpu"] = times.user + times.system
            return out
    return {}


def measure(count: int, *, warm_up: bool = True) -> dict[str, Any]:
    """Samples, each world alternating bare cold starts with roost's samples so both see
    the same load: with the warm pool (spawns, wakes, a warm slot's cost) and without it
    (cold spawns)."""
    out: dict[str, Any] = {"bare_pool": [], "spawn_warm": [], "wake": [], "processes": [], "bare_cold": [], "spawn_cold": [], "slot": {}, "bare_four": [], "four": [], "wake_starts": {}}

    async def spawns(world: World, pool: bool) -> None:
        parent = Parent(world)
        async with anyio.create_task_group() as tg:
            await parent.open(tg)
            if warm_up:
                # One of each first, not counted: jiti's cache, the fork server, the disk.
                await anyio.to_thread.run_sync(world.bare_cold_start, -1)
                warm, _ = await parent.spawn(f"warm-{os.urandom(3).hex()}")
                await parent.until(warm, lambda r: r["state"] in ("done", "idle"), "settled")
                await parent.client.call("remove", job=warm)
            elif pool:
                # The first spawn of a key is what teaches the pool what to warm.
                first, _ = await parent.spawn(f"first-{os.urandom(3).hex()}")
                await parent.until(first, lambda r: r["state"] in ("done", "idle"), "settled")
                await parent.client.call("remove", job=first)
            for n in range(count):
                out["bare_pool" if pool else "bare_cold"].append(await anyio.to_thread.run_sync(world.bare_cold_start, n))
                if pool:
                    await pool_ready(parent)
                marker = f"spawn-{n}-{os.urandom(3).hex()}"
                child, t0 = await parent.spawn(marker)
                out["spawn_warm" if pool else "spawn_cold"].append(await anyio.to_thread.run_sync(world.arrival, marker) - t0)
                if pool:
                    await parent.until(child, lambda r: r["state"] in ("done", "idle") and not r["live"], "hibernated")
                    out["processes"].append(len(processes_of(child)))
                    # Not while the pool's next pi starts (it would share the CPU).
                    await pool_ready(parent)
                    message = f"wake-{n}-{os.urandom(3).hex()}"
                    t0 = time.time()
                    await parent.client.call("tool_call", name="roost_send", args={"to": child, "message": message})
                    out["wake"].append(await anyio.to_thread.run_sync(world.arrival, message) - t0)
                    await parent.until(child, lambda r: r["state"] in ("done", "idle") and r["pending"] == 0, "answered")
                await parent.client.call("remove", job=child)
            if pool:
                status = (await parent.client.call("daemon_status"))["pool"]
                out["wake_starts"] = {"warm": status["wakesWarm"], "cold": status["wakesCold"]}
                # A first fan-out, not counted, teaches the pool a burst of four.
                first, _ = await fan_out(parent, "burst")
                for child in first:
                    await parent.client.call("remove", job=child)
                for n in range(count):
                    out["bare_four"].append(await anyio.to_thread.run_sync(world.bare_cold_start, 1000 + n, FAN_OUT))
                    await pool_ready(parent, FAN_OUT)
                    children, took = await fan_out(parent, f"four-{n}")
                    out["four"].append(took)
                    for child in children:
                        await parent.until(child, lambda r: r["state"] in ("done", "idle") and r["pending"] == 0, "answered")
                        await parent.client.call("remove", job=child)
                await pool_ready(parent)
                await anyio.sleep(1.0)  # let the warm pi settle after its start
                out["slot"] = await anyio.to_thread.run_sync(warm_slot_cost, world)
            tg.cancel_scope.cancel()

    pooled = {"hibernateAfterSeconds": HIBERNATE_AFTER, "piPool": True, "piPoolSize": 1, "piPoolMax": FAN_OUT, "agentSpawnsPerMinute": 10_000}
    with World(pooled, label="pi").start() as world:
        anyio.run(spawns, world, True)
    with World({"piPool": False}, label="picold").start() as world:
        anyio.run(spawns, world, False)
    return out


def hibernated_memory(count: int) -> dict[str, float]:
    """The daemon's private memory per hibernated (scripted) child."""
    with World({"hibernateAfterSeconds": 0.05}, label="pimem").start() as world:
        result: dict[str, float] = {}

        async def main() -> None:
            parent = Parent(world)
            async with anyio.create_task_group() as tg:
                await parent.open(tg)
                # One child first, so the peer tables and the fork server exist already.
                first, _ = await parent.spawn("first", host="scripted")
                await parent.until(first, lambda r: not r["live"] and r["state"] == "done", "hibernated")
                await anyio.sleep(0.5)
                before = rss_bytes(world.daemon.pid)
                children = []
                for n in range(count):
                    child, _ = await parent.spawn(f"child {n}", host="scripted")
                    children.append(child)
                for child in children:
                    await parent.until(child, lambda r: not r["live"] and r["state"] == "done", "hibernated")
                await anyio.sleep(0.5)
                after = rss_bytes(world.daemon.pid)
                result["per_child"] = (after - before) / count
                result["processes"] = float(sum(len(processes_of(child)) for child in children))
                tg.cancel_scope.cancel()

        anyio.run(main)
        return result


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    try:
        find_pi()
    except PiUnavailable as exc:
        print(f"pi: skipped ({exc})", flush=True)
        return []
    count = 1 if smoke else 5 if quick else 12
    children = 5 if smoke else 100 if quick else 300
    samples = measure(count, warm_up=not smoke)
    memory = hibernated_memory(children)
    base, base_cold = median(samples["bare_pool"]), median(samples["bare_cold"])
    warm, cold, wake, four = samples["spawn_warm"], samples["spawn_cold"], samples["wake"], samples["four"]
    base_four, starts = median(samples["bare_four"]), samples["wake_starts"]
    slot = samples["slot"]
    rows = [
        Row(
            "pi",
            f"spawn → child's first model request, warm pool, p50 of {count} (p90 {fmt_time(percentile(warm, 90))}); baseline: bare pi's cold start with the extension (p90 {fmt_time(percentile(samples['bare_pool'], 90))})",
            fmt_time(median(warm)),
            fmt_time(base),
            median(warm) / base,
            "p50 ≤ 0.5 s",
            median(warm) <= 0.5,
            raw=samples,
        ),
        Row(
            "pi",
            f"spawn → child's first model request, no pool (piPool false: a cold pi per child), p50 of {count} (p90 {fmt_time(percentile(cold, 90))}); roost's own share (p50 minus the baseline's) {median(cold) - base_cold:+.2f} s",
            fmt_time(median(cold)),
            fmt_time(base_cold),
            median(cold) / base_cold,
            "—",
            None,
        ),
        Row(
            "pi",
            f"wake from hibernation: message → first model request, warm pool (the pooled pi switches to the child's session; wakes warm/cold: {starts.get('warm')}/{starts.get('cold')}), p50 of {count} (p90 {fmt_time(percentile(wake, 90))}); baseline: bare pi's cold start",
            fmt_time(median(wake)),
            fmt_time(base),
            median(wake) / base,
            "p50 ≤ 0.5 s",
            median(wake) <= 0.5,
        ),
        Row(
            "pi",
            f"{FAN_OUT} children spawned at once → all {FAN_OUT} first model requests, warm pool (piPoolMax {FAN_OUT}, after a first burst), p50 of {count} (p90 {fmt_time(percentile(four, 90))}); baseline: {FAN_OUT} bare pis started at once → all {FAN_OUT} requests (p90 {fmt_time(percentile(samples['bare_four'], 90))})",
            fmt_time(median(four)),
            fmt_time(base_four),
            median(four) / base_four,
            "p50 ≤ 1 s",
            median(four) <= 1.0,
        ),
        Row(
            "pi",
            f"processes left per hibernated child (pi children: most of {count}; scripted children: all of {children})",
            f"{max(samples['processes'] or [0])} / {memory['processes']:.0f}",
            "—",
            None,
            "0",
            max(samples["processes"] or [0]) == 0 and memory["processes"] == 0,
        ),
        Row(
            "pi",
            f"daemon memory per hibernated child ({children} scripted children; the record is the same for pi)",
            fmt_bytes(memory["per_child"]),
            "—",
            None,
            "< 50 KiB",
            memory["per_child"] < 50 * 1024,
        ),
    ]
    if slot:
        rows.append(
            Row(
                "pi",
                f"one warm pi waiting: RSS pi {fmt_bytes(slot['pi_rss'])} + worker {fmt_bytes(slot['worker_rss'])}; CPU to warm it: pi {slot['pi_cpu']:.2f} s + worker {slot['worker_cpu']:.2f} s",
                f"{fmt_bytes(slot['pi_uss'] + slot['worker_uss'])} private",
                "—",
                None,
                "—",
                None,
            )
        )
    return rows
