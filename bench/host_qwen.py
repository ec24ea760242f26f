"""Real Qwen Code (``--host qwen``): spawn → the child's first model request, against the
bare CLI's start → its first request, in the same run.

Needs the pinned Qwen Code (``scripts/install-qwen.sh`` puts it in
``tests/qwen/node_modules``, or ``ROOST_QWEN_BIN``) and the CLI tests' fake
chat-completions API (``tests/clis/fake_chat.py``, a thread of this process on 127.0.0.1,
answering at once). Every Qwen Code runs in a throwaway home with the tests' offline
settings (``tests/clis/qwenkit.py``).

*Baseline*, alternating with roost's samples so both see the same load: **bare Qwen
Code's cold start**, from just before ``Popen(qwen -p --input-format stream-json
--output-format stream-json --session-id NEW)`` with the prompt written to its stdin at
once, to the fake receiving that prompt's request (no MCP server, no hooks).

Row: a no-session foreground peer sends ``spawn {host: "qwen"}``; the clock runs from
just before the request to the fake receiving the child's first request (its task). The
difference is roost's share: the worker, the job's settings and bridge, and ``roost
mcp`` (Qwen Code lists its MCP servers' tools before the first call). One of each is
made first and not counted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio

from bench.common import (
    REPO,
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


class World:
    """A Qwen Code home, the fake model and a roost daemon, all throwaway."""

    def __init__(self, qwen: str) -> None:
        for path in (KIT, KIT.parent, KIT.parent / "pi"):
            sys.path.insert(0, str(path))
        from fake_chat import FakeChat
        from qwenkit import OFFLINE_ENV, OFFLINE_SETTINGS

        self.qwen = qwen
        self.root = Path(tempfile.mkdtemp(prefix="rb-qwen-"))
        home = self.root / "home"
        (home / ".qwen").mkdir(parents=True)
        (home / ".qwen" / "settings.json").write_text(json.dumps(OFFLINE_SETTINGS))
        (self.root / "t").mkdir()
        self.fake = FakeChat({"default": {"steps": [{"say": "ok: {input}"}]}}, self.root / "model.jsonl", dialect="qwen").start()
        self.daemon = RoostDaemon(label="qwen")
        for key in list(self.daemon.env):
            if key.endswith("_API_KEY") or key.startswith(("OPENAI_", "QWEN_", "DASHSCOPE_", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")):
                self.daemon.env.pop(key)
        node_dir = str(Path(shutil.which("node") or "/usr/bin/node").parent)
        self.daemon.env.update({
            **OFFLINE_ENV, "HOME": str(home), "TMPDIR": str(self.root / "t"), "NO_PROXY": "127.0.0.1,localhost",
            "OPENAI_BASE_URL": self.fake.base_url, "ROOST_QWEN_BIN": qwen,
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), node_dir, os.environ.get("PATH", "/usr/bin:/bin")]),
        })

    def arrival(self, marker: str, timeout: float = TIMEOUT) -> float:
        """When the fake got the first request whose last user message holds ``marker``
        (its log, polled: this is the bench's side, not the measured path)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for record in self.fake.requests():
                users = [m for m in record.get("chat") or [] if m.get("role") == "user"]
                if users and marker in json.dumps(users[-1].get("content")):
                    return float(record["time"])
            time.sleep(0.01)
        raise TimeoutError(f"the model never got {marker!r}")

    def bare_cold_start(self, n: int) -> float:
        """Bare Qwen Code: process start (prompt written at once) → its request."""
        marker = f"bare-{n}-{os.urandom(3).hex()}"
        argv = [self.qwen, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--session-id", str(uuid.uuid4())]
        t0 = time.time()
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.daemon.env, cwd=str(self.root))
        assert process.stdin is not None
        process.stdin.write((json.dumps({"type": "user", "message": {"role": "user", "content": marker}}) + "\n").encode())
        process.stdin.flush()
        try:
            return self.arrival(marker) - t0
        finally:
            process.stdin.close()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self) -> None:
        self.daemon.close()
        self.fake.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def measure(world: World, count: int, warm_up: bool) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"bare": [], "spawn": []}

    async def spawns() -> None:
        from roost_core.client import AsyncClient

        client = await AsyncClient.open(world.daemon.socket)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            await client.call("peer_register", session=None, name="bench parent", pid=os.getpid(), sessionId=os.urandom(8).hex(), cwd=str(world.root))

            async def spawn(marker: str) -> float:
                t0 = time.time()
                child = (await client.call("spawn", task=marker, name=marker, host="qwen", cwd=str(world.root)))["id"]
                arrived = await anyio.to_thread.run_sync(world.arrival, marker)
                await wait_settled(client, child, TIMEOUT)
                await client.call("remove", job=child)
                return arrived - t0

            if warm_up:
                await anyio.to_thread.run_sync(world.bare_cold_start, -1)
                await spawn(f"warm-{os.urandom(3).hex()}")
            for n in range(count):
                out["bare"].append(await anyio.to_thread.run_sync(world.bare_cold_start, n))
                out["spawn"].append(await spawn(f"spawn-{n}-{os.urandom(3).hex()}"))
            tg.cancel_scope.cancel()

    anyio.run(spawns)
    return out


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    qwen = find_agent("ROOST_QWEN_BIN", "qwen")
    if qwen is None:
        print("host_qwen: skipped (Qwen Code is not installed: run scripts/install-qwen.sh or set ROOST_QWEN_BIN)", flush=True)
        return []
    count = 1 if smoke else 2 if quick else 8
    world = World(qwen)
    try:
        world.daemon.start()
        samples = measure(world, count, warm_up=not smoke)
    finally:
        world.close()
    spawn, bare = samples["spawn"], samples["bare"]
    return [
        Row(
            "qwen",
            f"spawn → child's first model request, p50 of {count} (p90 {fmt_time(percentile(spawn, 90))}); baseline: bare Qwen Code's cold start, "
            f"no MCP server (p90 {fmt_time(percentile(bare, 90))}); roost's own share {median(spawn) - median(bare):+.2f} s",
            fmt_time(median(spawn)),
            fmt_time(median(bare)),
            median(spawn) / median(bare),
            "—",
            None,
            raw=samples,
        )
    ]
