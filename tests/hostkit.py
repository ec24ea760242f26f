"""What the real-host test kits share (``tests/pi/pikit.py``, ``tests/claude/claudekit.py``):
finding the host program or skipping, an isolated offline environment, the fake models'
refusals failing the test, and driving a program in tmux."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

#: Proxy variables a kit drops: the fakes are on 127.0.0.1, reached directly.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


def require_program(found: str | None, what: str, required_by: str, install: str) -> str:
    """``found``, the program a kit drives; without it the test skips, or fails when the
    variable ``required_by`` is ``1`` (CI, where a missing program is an error)."""
    if found is not None:
        return found
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{what} is not installed (run {install}) and {required_by}=1")
    pytest.skip(f"{what} is not installed ({install} installs it)")


def offline_env(env: dict[str, str], home: Path, tmpdir: Path, *, drop: Iterable[str] = ()) -> None:
    """Make ``env`` (in place) an isolated environment that talks only to 127.0.0.1: its
    own HOME and TMPDIR, no proxies, and none of the variables ``drop`` names."""
    for key in set(drop):
        env.pop(key, None)
    for key in PROXY_VARIABLES:
        env.pop(key, None)
    env.update({"HOME": str(home), "TMPDIR": str(tmpdir), "NO_PROXY": "127.0.0.1,localhost"})


def stop_fakes(fakes: Iterable[Any]) -> None:
    """Stop the fake model servers; a request one refused is one a real model would have
    failed, so the test fails."""
    fakes = list(fakes)
    for fake in fakes:
        fake.stop()
    refused = [violation for fake in fakes for violation in fake.violations]
    assert not refused, f"the fake model refused {len(refused)} request(s): {refused}"


def shquote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


class Tmux:
    """One program in its own tmux server, driven by keys and read from the screen."""

    def __init__(
        self, name: str, command: list[str], env: dict[str, str], cwd: Path, script_dir: Path, *, prefix: str = "roost-cc", width: int = 160, height: int = 50
    ) -> None:
        self.session = session = f"{prefix}-{os.getpid()}-{name}"
        script = script_dir / f"{name}.sh"
        exports = "\n".join(f"export {k}={shquote(v)}" for k, v in sorted(env.items()) if k.isidentifier())
        script.write_text(f"#!/bin/bash\n{exports}\ncd {shquote(str(cwd))}\nexec {' '.join(shquote(c) for c in command)}\n")
        script.chmod(0o700)
        subprocess.run(["tmux", "-L", session, "new-session", "-d", "-s", session, "-x", str(width), "-y", str(height), str(script)],
                       check=True, env={**os.environ, "TMUX": ""})

    def screen(self) -> str:
        result = subprocess.run(["tmux", "-L", self.session, "capture-pane", "-p", "-t", self.session, "-S", "-200"], capture_output=True, text=True, check=False)
        return result.stdout

    def wait_screen(self, text: str, timeout: float = 60.0) -> str:
        """Wait until ``text`` is on the screen; a timeout shows the screen."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {text!r} on screen:\n{screen}")
            time.sleep(0.1)

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "-L", self.session, "send-keys", "-t", self.session, *keys], check=True)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.session, "kill-server"], capture_output=True, check=False)
