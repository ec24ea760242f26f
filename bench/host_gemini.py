"""Real Gemini CLI: spawn → the child's first model request (host ``gemini``).

Needs the pinned Gemini CLI (``scripts/install-gemini.sh`` puts it in
``tests/gemini/node_modules``, or ``ROOST_GEMINI_BIN``) and the test kit's fake Gemini API
(``tests/clis/fake_gemini.py``, a thread of this process on 127.0.0.1, answering at once).
Gemini CLI runs in a throwaway home (``HOME``, ``TMPDIR``, an offline
``~/.gemini/settings.json``), as the tests do.

*Baseline*, measured in the same run, alternating with roost's samples so both see the
same load: **bare Gemini CLI's start**: from just before
``Popen(gemini -p MARKER --output-format stream-json)`` to the fake model receiving that
prompt's request. One bare start and one spawn are made first and not counted.

Row: **spawn** (a no-session foreground peer sends ``spawn {host: "gemini"}``), from
just before the request is written to the fake model receiving the child's first request
(its task). The difference is roost's share: the worker, the job's Gemini home and
roost's MCP server, which Gemini CLI starts before its first request.
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
    fmt_time,
    median,
    percentile,
    wait_settled,
)

KIT = REPO / "tests" / "clis"
TIMEOUT = 120.0


class GeminiUnavailable(RuntimeError):
    """Gemini CLI is not installed here."""


def find_gemini() -> str:
    """The Gemini CLI to run (:func:`bench.common.find_agent`), or GeminiUnavailable."""
    found = find_agent("ROOST_GEMINI_BIN", "gemini")
    if found is None:
        raise GeminiUnavailable("Gemini CLI is not installed: run scripts/install-gemini.sh or set ROOST_GEMINI_BIN")
    return found


class World:
    """A Gemini home, the fake model and a roost daemon, all throwaway."""

    def __init__(self) -> None:
        for folder in (KIT, KIT.parent, KIT.parent / "pi"):
            sys.path.insert(0, str(folder))
        from fake_gemini import FakeGemini

        self.gemini = find_gemini()
        self.root = Path(tempfile.mkdtemp(prefix="rb-gemini-"))
        self.home = self.root / "home"
        (self.home / ".gemini").mkdir(parents=True)
        self.tmpdir = self.root / "t"
        self.tmpdir.mkdir()
        self.work = self.root / "work"
        self.work.mkdir()
        self.arrivals = Arrivals()
        self.fake = FakeGemini({"default": {"steps": [{"say": "ok: {input}"}]}}, self.root / "model.jsonl").start()
        self.fake.log = self._log  # type: ignore[method-assign]
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "model": {"name": "gemini-2.5-flash"},
        }
        (self.home / ".gemini" / "settings.json").write_text(json.dumps(settings))
        self.daemon = RoostDaemon(label="gemini")
        node_dir = str(Path(shutil.which("node") or "/usr/bin/node").parent)
        for key in list(self.daemon.env):
            if key.endswith("_API_KEY") or key.startswith(("GEMINI", "GOOGLE")) or key.lower().endswith("_proxy"):
                self.daemon.env.pop(key)
        self.daemon.env.update({
            "HOME": str(self.home),
            "TMPDIR": str(self.tmpdir),
            "GEMINI_API_KEY": "fake-gemini-key",
            "GEMINI_CLI_NO_RELAUNCH": "1",
            "GOOGLE_GEMINI_BASE_URL": self.fake.origin,
            "NO_PROXY": "127.0.0.1,localhost",
            "ROOST_GEMINI_BIN": self.gemini,
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), node_dir, os.environ.get("PATH", "/usr/bin:/bin")]),
        })

    def _log(self, body: dict[str, Any], reply: dict[str, Any], **fields: Any) -> None:
        """The fake model's request log, kept in memory: when each prompt arrived."""
        self.arrivals.add(time.time(), json.dumps(body.get("contents") or []))

    def arrival(self, marker: str, timeout: float = TIMEOUT) -> float:
        """When the first request that holds ``marker`` arrived."""
        return self.arrivals.first(marker, timeout)

    def bare_start(self, n: int) -> float:
        """Bare Gemini CLI: process start → its prompt's request."""
        marker = f"bare-{n}-{os.urandom(3).hex()}"
        t0 = time.time()
        process = subprocess.Popen([self.gemini, "-p", marker, "--output-format", "stream-json"], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.daemon.env, cwd=str(self.work))
        try:
            return self.arrival(marker) - t0
        finally:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self) -> None:
        self.daemon.close()
        self.fake.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def measure(count: int, *, warm_up: bool = True) -> dict[str, list[float]]:
    """Bare starts and spawns, alternating."""
    out: dict[str, list[float]] = {"bare": [], "spawn": []}
    world = World()
    world.daemon.start()

    async def spawns() -> None:
        from roost_core.client import AsyncClient

        async with anyio.create_task_group() as tg:
            client = await AsyncClient.open(world.daemon.socket)
            tg.start_soon(client.run)
            await client.call("peer_register", session=None, name="bench parent", pid=os.getpid(), sessionId=os.urandom(8).hex(), cwd=str(world.work))
            for n in range(-1 if warm_up else 0, count):
                bare = await anyio.to_thread.run_sync(world.bare_start, n)
                marker = f"spawn-{n}-{os.urandom(3).hex()}"
                t0 = time.time()
                result = await client.call("spawn", task=marker, name=marker, host="gemini", cwd=str(world.work))
                spawned = await anyio.to_thread.run_sync(world.arrival, marker) - t0
                await wait_settled(client, result["id"], TIMEOUT)
                await client.call("remove", job=result["id"])
                if n >= 0:
                    out["bare"].append(bare)
                    out["spawn"].append(spawned)
            tg.cancel_scope.cancel()

    try:
        anyio.run(spawns)
    finally:
        world.close()
    return out


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    try:
        find_gemini()
    except GeminiUnavailable as exc:
        print(f"gemini: skipped ({exc})", flush=True)
        return []
    count = 1 if smoke else 3 if quick else 8
    samples = measure(count, warm_up=not smoke)
    spawn, bare = samples["spawn"], samples["bare"]
    return [
        Row(
            "gemini",
            f"spawn → child's first model request, p50 of {count} (p90 {fmt_time(percentile(spawn, 90))}); baseline: bare Gemini CLI's start → request "
            f"(p90 {fmt_time(percentile(bare, 90))}); roost's own share {median(spawn) - median(bare):+.2f} s",
            fmt_time(median(spawn)),
            fmt_time(median(bare)),
            median(spawn) / median(bare),
            "—",
            None,
            raw=samples,
        )
    ]
