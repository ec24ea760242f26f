"""Real Codex: spawn → the child's first model request, against the bare Codex CLI.

Needs the pinned Codex (``scripts/install-codex.sh`` puts it in ``tests/codex/node_modules``,
or ``ROOST_CODEX_BIN``) and the test kit's fake Responses API (``tests/clis/fake_responses.py``,
a thread of this process on 127.0.0.1, answering at once). Every Codex runs in a throwaway
``CODEX_HOME`` whose config names the fake, offline (``--disable plugins -c
analytics.enabled=false``), as the tests do.

*Baseline*, measured in the same run, alternating with roost's samples so both see the
same load: **bare Codex with roost's MCP server** — from just before
``Popen(codex exec --json PROMPT)`` with the roost MCP server (``roost mcp``) in its
config, ``required`` as a job's is, to the fake receiving that prompt's request. The
table also shows bare Codex without any MCP server.

*roost*: a no-session foreground peer sends ``spawn {host: "codex"}``; from just before
the request is written to the fake receiving the child's first request (its task). The
worker starts ``codex exec`` with roost's MCP server and hooks, and Codex waits for the
server before its first request. Each child is removed afterwards; one bare start and one
spawn are made first and not counted.
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

from bench.common import REPO, Arrivals, RoostDaemon, Row, find_agent, fmt_time, median, percentile

CLIS = REPO / "tests" / "clis"
OFFLINE = ["--disable", "plugins", "-c", "analytics.enabled=false"]
TIMEOUT = 120.0


class CodexUnavailable(RuntimeError):
    """Codex is not installed here."""


def find_codex() -> str:
    found = find_agent("ROOST_CODEX_BIN", "codex")
    if not found:
        raise CodexUnavailable("Codex is not installed: run scripts/install-codex.sh or set ROOST_CODEX_BIN")
    return found


class World:
    """A Codex home, the fake Responses API and a roost daemon, all throwaway."""

    def __init__(self) -> None:
        for path in (CLIS, REPO / "tests", REPO / "tests" / "pi"):
            sys.path.insert(0, str(path))
        from fake_responses import FakeResponses

        self.codex = find_codex()
        self.root = Path(tempfile.mkdtemp(prefix="rb-codex-"))
        self.codex_home = self.root / "home" / ".codex"
        self.codex_home.mkdir(parents=True)
        self.work = self.root / "work"
        self.work.mkdir()
        self.arrivals = Arrivals()
        self.fake = FakeResponses({"default": {"steps": [{"say": "ok"}]}}, self.root / "model.jsonl").start()
        self.fake.log = self._log  # type: ignore[method-assign]
        (self.codex_home / "config.toml").write_text("\n".join([
            'model = "fake-model"', 'model_provider = "fake"', 'approval_policy = "never"', "",
            "[model_providers.fake]", 'name = "fake"', f"base_url = {json.dumps(self.fake.base_url)}",
            'env_key = "FAKE_API_KEY"', 'wire_api = "responses"', "request_max_retries = 0", "stream_max_retries = 0", "",
        ]))
        self.daemon = RoostDaemon(label="codex")
        for key in [k for k in self.daemon.env if k.startswith(("OPENAI_", "CODEX_")) or k.endswith("_PROXY") or k.endswith("_proxy")]:
            self.daemon.env.pop(key)
        self.daemon.env.update({
            "HOME": str(self.root / "home"), "CODEX_HOME": str(self.codex_home), "FAKE_API_KEY": "fake-key",
            "NO_PROXY": "127.0.0.1,localhost", "ROOST_CODEX_BIN": self.codex, "ROOST_CODEX_ARGS": " ".join(OFFLINE),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]),
        })

    def _log(self, body: dict[str, Any], reply: dict[str, Any], **fields: Any) -> None:
        """The fake's request log, kept in memory: when each prompt arrived."""
        now = time.time()
        texts = [json.dumps(item.get("content")) for item in body.get("input") or [] if item.get("role") == "user"]
        self.arrivals.add(now, texts[-1] if texts else "")

    def arrival(self, marker: str, timeout: float = TIMEOUT) -> float:
        """When the first request whose last user message holds ``marker`` arrived."""
        return self.arrivals.first(marker, timeout)

    def close(self) -> None:
        self.daemon.close()
        self.fake.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def bare_start(self, n: int, *, with_roost_mcp: bool) -> float:
        """Bare ``codex exec``: process start → the prompt's request."""
        marker = f"bare-{n}-{os.urandom(3).hex()}"
        argv = [self.codex, "exec", "--json", "--skip-git-repo-check", *OFFLINE]
        if with_roost_mcp:
            server = {"command": sys.executable, "args": ["-m", "roost_core.mcp"], "required": True, "startup_timeout_sec": 60,
                      "env": {"ROOST_HOME": str(self.daemon.home)}}
            argv += ["-c", "mcp_servers.roost={" + ", ".join(f"{json.dumps(k)} = {json.dumps(v) if not isinstance(v, bool) else 'true'}"
                                                              if not isinstance(v, dict) else f"{json.dumps(k)} = {{{', '.join(f'{json.dumps(a)} = {json.dumps(b)}' for a, b in v.items())}}}"
                                                              for k, v in server.items()) + "}"]
        t0 = time.time()
        process = subprocess.Popen([*argv, marker], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=self.daemon.env, cwd=str(self.work), start_new_session=True)
        try:
            return self.arrival(marker) - t0
        finally:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()


async def spawn_starts(world: World, count: int) -> list[float]:
    from roost_core.client import AsyncClient

    client = await AsyncClient.open(world.daemon.socket)
    times = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.run)
        await client.call("peer_register", session=None, name="bench parent", pid=os.getpid(), sessionId=os.urandom(8).hex(), cwd=str(world.work))
        for n in range(count):
            marker = f"spawn-{n}-{os.urandom(3).hex()}"
            t0 = time.time()
            result = await client.call("spawn", task=marker, name=marker, host="codex", cwd=str(world.work))
            when = await anyio.to_thread.run_sync(world.arrival, marker)
            times.append(when - t0)
            await client.call("remove", job=result["id"])
        tg.cancel_scope.cancel()
    return times


def measure(count: int) -> dict[str, list[float]]:
    world = World()
    samples: dict[str, list[float]] = {"bare": [], "bare_mcp": [], "spawn": []}
    try:
        world.daemon.start()
        world.bare_start(-1, with_roost_mcp=True)
        anyio.run(spawn_starts, world, 1)
        for n in range(count):  # alternating, so both see the same load
            samples["bare"].append(world.bare_start(n, with_roost_mcp=False))
            samples["bare_mcp"].append(world.bare_start(n, with_roost_mcp=True))
            samples["spawn"].extend(anyio.run(spawn_starts, world, 1))
    finally:
        world.close()
    return samples


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    try:
        find_codex()
    except CodexUnavailable as exc:
        print(f"codex: skipped ({exc})", flush=True)
        return []
    count = 1 if smoke else 3 if quick else 10
    samples = measure(count)
    spawn, base, bare = samples["spawn"], median(samples["bare_mcp"]), median(samples["bare"])
    return [
        Row(
            "codex",
            f"spawn → child's first model request, p50 of {count} (p90 {fmt_time(percentile(spawn, 90))}); baseline: bare codex exec "
            f"with roost's MCP server required (bare codex exec without MCP: {fmt_time(bare)})",
            fmt_time(median(spawn)),
            fmt_time(base),
            median(spawn) / base,
            "—",
            None,
            raw=samples,
        )
    ]
