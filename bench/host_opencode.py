"""Real OpenCode: spawn → the child's first model request (its task), against the bare CLI.

Needs the pinned OpenCode (``scripts/install-opencode.sh`` puts it in
``tests/opencode/node_modules``, or ``ROOST_OPENCODE_BIN``) and the agent-CLI kit's fake
chat-completions model (``tests/clis/fake_chat.py``, a thread of this process on
127.0.0.1, answering at once). Every OpenCode runs in one throwaway world of the kit
(``tests/clis/opencodekit.py``: its own HOME and XDG folders, the seeded config folder,
offline), as the tests do.

*Baseline*, measured in the same run, alternating with roost's samples so both see the
same load: **bare OpenCode's start**, from just before ``Popen(opencode run --format
json)`` with the prompt on its stdin to the fake model receiving that prompt's request.

*Roost*: a no-session foreground peer sends ``spawn {host: "opencode"}``; from just before
the request is written to the fake receiving the child's task (the worker starts
``opencode serve``, waits for it to listen, makes the session and posts the task; the
session's MCP servers include ``roost mcp``). Each child is removed afterwards. The first
sample of each is not counted (the store's first creation, caches).

Two worlds, two rows: *seeded* (the kit's, as above) and *offline*: the user's config
folder holds ``opencode.json`` only (its OpenCode never installed its plugin package
there) and npm's registry is a closed port of 127.0.0.1 (``npm_config_registry``), for
bare OpenCode and roost's jobs alike. A job that waited for OpenCode's npm install into
that folder (any plugin makes OpenCode wait; roost's job loads one) shows here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import REPO, RoostDaemon, Row, find_agent, fmt_time, median, percentile

KIT = REPO / "tests" / "clis"
TIMEOUT = 180.0
#: An npm registry nobody answers on (the discard port).
CLOSED_REGISTRY = "http://127.0.0.1:9"


class World:
    """The kit's OpenCode world, the fake model, and a daemon that runs its jobs there."""

    def __init__(self, binary: str, *, offline: bool = False) -> None:
        for path in (KIT, KIT.parent, KIT.parent / "pi"):
            if str(path) not in sys.path:
                sys.path.insert(0, str(path))
        from opencodekit import OpenCodeKit

        self.root = Path(tempfile.mkdtemp(prefix="rb-opencode-"))
        self.kit = OpenCodeKit(self.root, binary)
        self.fake = self.kit.start_fake({"default": {"steps": [{"say": "ok: {input}"}]}}, servers=("roost",))
        if offline:
            self.kit.env["npm_config_registry"] = CLOSED_REGISTRY
        self.kit.configure(seed=not offline)
        self.arrived: dict[str, float] = {}
        self.lock = threading.Lock()
        self.fake.log = self._log  # type: ignore[method-assign]
        self.daemon = RoostDaemon(label="opencode")
        self.daemon.env.update({k: v for k, v in self.kit.env.items() if k.startswith(("XDG_", "OPENCODE_", "npm_")) or k in ("HOME", "TMPDIR")})
        self.daemon.env["ROOST_OPENCODE_BIN"] = binary

    def _log(self, body: dict[str, Any], reply: dict[str, Any], **fields: Any) -> None:
        """The fake's request log, kept in memory: when each task's request arrived."""
        now = time.perf_counter()
        for message in body.get("messages") or []:
            content = message.get("content")
            text = content if isinstance(content, str) else " ".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
            if message.get("role") == "user" and text.startswith("mark-"):
                with self.lock:
                    self.arrived.setdefault(text.split()[0], now)

    def arrival(self, mark: str) -> float:
        deadline = time.perf_counter() + TIMEOUT
        while True:
            with self.lock:
                if mark in self.arrived:
                    return self.arrived[mark]
            if time.perf_counter() > deadline:
                raise TimeoutError(f"the model never got {mark}")
            time.sleep(0.001)

    def bare(self, n: int) -> float:
        """Bare OpenCode: ``opencode run`` start → its prompt's request."""
        mark = f"mark-bare-{n}"
        t0 = time.perf_counter()
        process = subprocess.Popen([self.kit.binary, "run", "--format", "json"], cwd=self.kit.work, env=self.kit.env,
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        assert process.stdin is not None
        process.stdin.write(mark)
        process.stdin.close()
        try:
            return self.arrival(mark) - t0
        finally:
            try:
                process.wait(TIMEOUT)
            finally:
                if process.poll() is None:
                    os.killpg(process.pid, 9)
                    process.wait()

    async def spawns(self, marks: list[str]) -> list[float]:
        from roost_core.client import AsyncClient

        client = await AsyncClient.open(self.daemon.socket)
        times = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            await client.call("peer_register", session=None, name="parent", pid=os.getpid(), sessionId=os.urandom(8).hex(), cwd=str(self.kit.work))
            for mark in marks:
                t0 = time.perf_counter()
                result = await client.call("spawn", task=mark, name=mark, host="opencode", cwd=str(self.kit.work))
                times.append(await anyio.to_thread.run_sync(self.arrival, mark) - t0)
                await client.call("remove", job=result["id"])
            tg.cancel_scope.cancel()
        return times

    def close(self) -> None:
        self.daemon.close()
        self.fake.stop()
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)


def measure(world: World, count: int) -> tuple[list[float], list[float]]:
    """``count`` + 1 samples of bare OpenCode and of roost's spawn, alternating so both
    see the same load; the first of each is not counted."""
    bare: list[float] = []
    spawned: list[float] = []
    try:
        world.daemon.start()
        for n in range(count + 1):
            bare.append(world.bare(n))
            spawned.extend(anyio.run(world.spawns, [f"mark-spawn-{n}"]))
    finally:
        world.close()
    return bare[1:], spawned[1:]


def row(name: str, what: str, count: int, bare: list[float], spawned: list[float]) -> Row:
    return Row(
        name,
        f"spawn → child's first model request (its task), {what}, p50 of {count} (p90 {fmt_time(percentile(spawned, 90))}); "
        f"baseline: bare `opencode run` start → the same request (p90 {fmt_time(percentile(bare, 90))})",
        fmt_time(median(spawned)),
        fmt_time(median(bare)),
        median(spawned) / median(bare),
        "—",
        None,
        raw={"roost": spawned, "bare": bare},
    )


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    binary = find_agent("ROOST_OPENCODE_BIN", "opencode", on_path=False)
    if binary is None:
        print("opencode: skipped (not installed: run scripts/install-opencode.sh or set ROOST_OPENCODE_BIN)", flush=True)
        return []
    count = 1 if smoke else 2 if quick else 8
    bare, spawned = measure(World(binary), count)
    offline_bare, offline_spawned = measure(World(binary, offline=True), count)
    return [
        row("opencode", "config folder seeded", count, bare, spawned),
        row("opencode offline", "config folder never installed, no npm registry", count, offline_bare, offline_spawned),
    ]
