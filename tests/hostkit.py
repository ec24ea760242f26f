"""What the real-host test kits share (``tests/pi/pikit.py``, ``tests/claude/claudekit.py``):
finding the host program or skipping, an isolated offline environment, the fake models'
refusals failing the test, and driving a program in tmux."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
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


class HostKit:
    """One test's world for a real host program: its folders (a home of its own and a
    TMPDIR under the test's ``tmp_path``), its environment, the fake model servers it
    started and the test's daemons. A subclass makes the environment its host's."""

    def __init__(self, tmp_path: Path, env: dict[str, str], daemon_factory: Any, home: str) -> None:
        self.tmp = tmp_path
        self.env = env
        self.daemon_factory = daemon_factory
        self.home = tmp_path / home
        self.tmpdir = tmp_path / "t"
        for folder in (self.home, self.tmpdir):
            folder.mkdir(parents=True, exist_ok=True)
        self.fakes: list[Any] = []

    def daemon(self) -> Any:
        """A started daemon of the test (``conftest.daemon_factory``)."""
        return self.daemon_factory().start()

    def cleanup(self) -> None:
        """After the test: stop the fakes (a refusal fails the test)."""
        stop_fakes(self.fakes)


def kit_fixtures(kit: type[HostKit], need: Callable[[], str], host: str) -> tuple[Any, Any]:
    """The two fixtures of a host's kit, for its conftest: ``<host>_bin`` (the program, or
    the test skips: ``need``) and ``<host>_kit`` (a ``kit`` for the test, cleaned up after
    it)."""

    @pytest.fixture(name=f"{host}_bin")
    def program() -> str:
        return need()

    @pytest.fixture(name=f"{host}_kit")
    def world(tmp_path: Path, roost_env: dict[str, str], daemon_factory: Any, request: pytest.FixtureRequest) -> Iterator[HostKit]:
        made = kit(tmp_path, roost_env, daemon_factory, request.getfixturevalue(f"{host}_bin"))
        yield made
        made.cleanup()

    return program, world


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


class JsonLinesProgram:
    """A host program driven over its stdin and stdout with one JSON object a line (pi's
    RPC mode, Claude Code's stream-json): what it writes is collected by a thread, in
    :attr:`events` unless :meth:`keep` takes it."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, *, close_wait: float = 10.0) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=str(cwd))
        self.close_wait = close_wait
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                frame = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                if not self.keep(frame):
                    self.events.append(frame)

    def keep(self, frame: dict[str, Any]) -> bool:
        """Take ``frame`` elsewhere than :attr:`events` (True), under :attr:`lock`."""
        return False

    def write(self, frame: dict[str, Any]) -> None:
        """One line to the program's stdin."""
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(frame) + "\n").encode())
        self.process.stdin.flush()

    def close(self) -> None:
        """Close its stdin and wait for it to end (killed when it does not)."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(self.close_wait)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
