"""Kit for ``roost web`` tests: the headless browser (Debian's chromium-headless-shell,
driven by Playwright through ``executable_path``: no browser is downloaded) and the
``roost web`` command run as a user runs it, its link read from its output."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

#: The browser: the headless shell (fastest to launch), else the full Chromium.
BROWSER = shutil.which("chromium-headless-shell") or shutil.which("chromium")
try:
    import playwright.sync_api  # noqa: F401

    HAVE_PLAYWRIGHT = True
except ImportError:  # pragma: no cover - the test extra installs it
    HAVE_PLAYWRIGHT = False
# CI installs the browser and sets ROOST_REQUIRE_BROWSER=1: there these tests never skip.
if (BROWSER is None or not HAVE_PLAYWRIGHT) and os.environ.get("ROOST_REQUIRE_BROWSER") == "1":
    raise RuntimeError("ROOST_REQUIRE_BROWSER=1 but chromium-headless-shell (or Playwright) is not installed")
needs_browser = pytest.mark.skipif(BROWSER is None or not HAVE_PLAYWRIGHT, reason="no headless Chromium or no Playwright")


class RoostWeb:
    """``roost web`` in a subprocess, on the test's daemon; ``url`` is the link it printed."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "roost_core.cli", "web"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # the link, once the page is ready to serve
        assert line.startswith("roost web: http://127.0.0.1:"), line + self.process.stderr.read() if self.process.stderr else line
        self.url = line.split(": ", 1)[1].strip()
        self.base = self.url.split("/?")[0]
        self.port = int(self.base.rsplit(":", 1)[1])
        self.secret = self.url.split("?t=", 1)[1]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def launch(playwright: Any) -> Any:
    """The headless browser (Playwright passes --no-sandbox itself: root needs it)."""
    return playwright.chromium.launch(executable_path=BROWSER)
