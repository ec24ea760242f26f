"""What the short-lived ``roost`` commands cost their user: CPU (user + system) of each
run's process, against ``python -c pass`` (the same interpreter) measured in the same run,
runs of the two in turn.

- ``roost claude hook PostToolUse``, as a user's Claude Code runs it after every tool call
  (this process stands for Claude Code: the hook finds the ``roost mcp`` socket of its
  ancestor, which answers at once), and ``roost gemini hook AfterTool`` likewise;
- ``roost --version``, and ``roost jobs`` / ``roost agents`` against a running daemon;
- ``roost mcp`` (foreground, the daemon running): from its start to its answer to
  ``tools/list`` (after ``initialize``), the CPU it used by then (psutil), then closed.

The command is run as the installed ``roost`` script runs it: a script made from the
measured tree's ``pyproject.toml`` entry, as pip makes it, with the modules' bytecode cached as an
install has it (``PYTHONDONTWRITEBYTECODE`` is dropped; the uncounted first run writes
it). A run's CPU is the kernel's accounting of the reaped child (``os.wait4``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import tomllib
from pathlib import Path

from bench.common import PYTHON, RoostDaemon, Row, median


def console_script(folder: Path) -> Path:
    """The ``roost`` script pip writes for the ``[project.scripts]`` entry of the tree whose
    ``roost_core`` runs here (``bench.compare``'s old copy puts its own first)."""
    import roost_core

    tree = Path(roost_core.__file__).resolve().parents[2]
    entry = tomllib.loads((tree / "pyproject.toml").read_text())["project"]["scripts"]["roost"]
    module, _, function = entry.partition(":")
    script = folder / "roost"
    script.write_text(
        f"#!{PYTHON}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {module} import {function}\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        f"    sys.exit({function}())\n"
    )
    script.chmod(0o755)
    return script


def cpu_of(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> float:
    """One run of ``argv``: its CPU seconds (user + system), from the kernel at reaping."""
    process = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin and process.stdout and process.stderr
    process.stdin.write(stdin)
    process.stdin.close()
    out, err = process.stdout.read(), process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{argv}: exit {process.returncode}: {err.decode()[-2000:]}{out.decode()[-500:]}")
    return usage.ru_utime + usage.ru_stime


class Answering:
    """A bridge socket that answers every hook with nothing (``{"output": null}``)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(16)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                if data:
                    conn.sendall(b'{"id": 1, "ok": true, "result": {"output": null}}\n')

    def close(self) -> None:
        self.listener.close()
        self.path.unlink(missing_ok=True)


def paired(command: list[str], env: dict[str, str], count: int, stdin: bytes = b"") -> tuple[list[float], list[float]]:
    """``count`` runs of ``command`` and of ``python -c pass``, in turn (one of each first,
    not counted)."""
    bare = [PYTHON, "-c", "pass"]
    cpu_of(command, env, stdin), cpu_of(bare, env)
    roost, base = [], []
    for _ in range(count):
        roost.append(cpu_of(command, env, stdin))
        base.append(cpu_of(bare, env))
    return roost, base


def mcp_tools_list_cpu(script: Path, env: dict[str, str]) -> float:
    """CPU seconds ``roost mcp`` used from its start to its answer to ``tools/list``."""
    import psutil

    process = subprocess.Popen([str(script), "mcp"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdin and process.stdout
    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
        for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
                        {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}):
            process.stdin.write(json.dumps(message).encode() + b"\n")
        process.stdin.flush()
        while True:
            line = process.stdout.readline()
            if not line:
                raise RuntimeError("roost mcp ended before it answered tools/list")
            if json.loads(line).get("id") == 2:
                times = psutil.Process(process.pid).cpu_times()
                return times.user + times.system
    finally:
        process.kill()
        process.wait()


def row(metric: str, roost: list[float], base: list[float], budget: float) -> Row:
    """A row: roost's median CPU, the bare start's, the ratio, and the budget in ms."""
    mine, bare = median(roost), median(base)
    return Row("command cpu", metric, f"{mine * 1000:.1f} ms", f"{bare * 1000:.1f} ms", mine / bare,
               f"≤ {budget * 1000:.0f} ms", mine <= budget, raw={"roost": roost, "bare": base})


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    count = 2 if smoke else 10 if quick else 30
    rows = []
    with tempfile.TemporaryDirectory(prefix="rb-cmd-") as folder, RoostDaemon(label="commands") as daemon:
        script = console_script(Path(folder))
        # As installed: the modules' bytecode cached (the warm-up run writes it).
        env = {key: value for key, value in daemon.env.items() if key != "PYTHONDONTWRITEBYTECODE"}
        try:
            from roost_core.hookrelay import foreground_socket
        except ImportError:  # a tree from before the relay (bench.compare's old side)
            from roost_core.hosts.bridge import foreground_socket

        server = Answering(foreground_socket(daemon.home, os.getpid()))
        try:
            payload = json.dumps({"session_id": "s", "tool_name": "Bash", "tool_response": "x" * 2000}).encode()
            for name, event in (("claude", "PostToolUse"), ("gemini", "AfterTool")):
                roost, base = paired([str(script), name, "hook", event], env, count, payload)
                rows.append(row(f"`roost {name} hook {event}` (a user's {name}: finds its roost mcp), CPU per call, median of {count}",
                                roost, base, 0.030))
        finally:
            server.close()
        roost, base = paired([str(script), "--version"], env, count)
        rows.append(row(f"`roost --version`, CPU, median of {count}", roost, base, 0.060))
        daemon.start()
        for command in ("jobs", "agents"):
            roost, base = paired([str(script), command], env, count)
            rows.append(row(f"`roost {command}` (daemon running), CPU, median of {count}", roost, base, 0.060))
        try:
            import mcp  # noqa: F401
        except ImportError:
            print("commands: no MCP SDK here: the roost mcp row is left out", file=sys.stderr)
        else:
            mcp_runs = 1 if smoke else 3 if quick else 8
            roost = [mcp_tools_list_cpu(script, env) for _ in range(mcp_runs)]
            base = [cpu_of([PYTHON, "-c", "pass"], env) for _ in range(mcp_runs)]
            rows.append(row(f"`roost mcp`: start → tools/list answered (daemon running), CPU, median of {mcp_runs}", roost, base, 0.150))
    return rows
