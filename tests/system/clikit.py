"""Run the real ``roost`` command in a subprocess, as a user does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import wait_until

CLI = [sys.executable, "-m", "roost_core.cli"]


class Cli:
    """Runs ``roost ARGS`` in a subprocess with the test daemon's environment."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env = env
        self.cwd = cwd

    def __call__(self, *args: str, expect: int | None = 0, timeout: float = 30) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [*CLI, *args], env=self.env, cwd=self.cwd, capture_output=True, text=True, timeout=timeout
        )
        if expect is not None:
            assert result.returncode == expect, (args, result.returncode, result.stdout, result.stderr)
        return result

    def json(self, *args: str) -> object:
        return json.loads(self(*args, "--json").stdout)


def stop_live_jobs(daemon: Any) -> None:
    """Stop every live job of ``daemon`` and wait until none is live: the teardown of a
    ``cli`` fixture, so the workers its commands started exit cleanly before the daemon does."""
    for row in daemon.call("jobs")["jobs"]:
        if row["live"]:
            daemon.call("stop", job=row["id"])
    wait_until(lambda: not any(row["live"] for row in daemon.call("jobs")["jobs"]), what="workers gone")
