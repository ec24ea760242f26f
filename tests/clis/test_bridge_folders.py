"""The private folder of a job's bridge socket (the agent CLI's hooks and ``roost mcp``
reach the worker there) does not outlive the worker: a ``kill -9`` of a Codex or Gemini
CLI job's worker leaves nothing in the temp folder once the daemon has found it gone
(issue 49.B13)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import proctools
import pytest
from clifake import scripted
from conftest import wait_until

from roost_core.hosts.handover import BRIDGE_ENV


@pytest.fixture
def short_tmpdir(roost_env) -> Iterator[Path]:
    """A temp folder of the test's own (short: a socket's path fits under it), the
    daemon's and its workers' ``TMPDIR``."""
    folder = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def bridge_folders(tmpdir: Path) -> list[Path]:
    """The bridge folders roost keeps under ``tmpdir``: a fresh temp folder each, or a
    worker's in the per-user short-socket folder."""
    return sorted([*tmpdir.glob("roost-cc-*"), *tmpdir.glob(f"roost-{os.getuid()}/w-*")])


def kill9_the_worker_then_stop_everything(daemon, env: dict[str, str], job: str, tmpdir: Path) -> Path:
    """Once ``job``'s agent runs its slow tool, ``kill -9`` its worker; once the daemon has
    found it gone, ``roost daemon stop --jobs``. The bridge folder the agent was given."""
    row = wait_until(lambda: (r := daemon.job(job))["hostPid"] and r, 120, what="the agent's pid")
    bridge = Path(proctools.environ(row["hostPid"])[BRIDGE_ENV])
    assert bridge.exists() and tmpdir in bridge.parents, bridge
    everything = proctools.tree(row["workerPid"])
    proctools.kill9(row["workerPid"])
    wait_until(lambda: not any(proctools.alive(p) for p in everything), 60, what="the worker, the agent and its tool gone")
    daemon.wait_job(job, "failed", timeout=60)
    stopped = subprocess.run([sys.executable, "-m", "roost_core.cli", "daemon", "stop", "--jobs"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    return bridge


def slow(gate: Path) -> dict:
    return {"run": [{"steps": [{"wait_for": str(gate), "timeout": 120}, {"say": "after the tool"}]}],
            "default": {"steps": [{"say": "ok: {input}"}]}}


def test_a_killed_codex_workers_bridge_folder_goes_with_it(codex_roost, daemon_factory, roost_env, short_tmpdir, tmp_path):
    roost_env["TMPDIR"] = str(short_tmpdir)
    fake = codex_roost.start_fake(slow(tmp_path / "gate"))  # never opened: the tool waits until the kill
    codex_roost.configure()
    daemon = daemon_factory().start()
    job = daemon.start_job("a slow task", host="codex", cwd=str(codex_roost.work))
    wait_until(lambda: len(fake.requests()) >= 1, 120, what="the slow tool's call")
    bridge = kill9_the_worker_then_stop_everything(daemon, roost_env, job, short_tmpdir)
    assert not bridge.parent.exists() and bridge_folders(short_tmpdir) == []


def test_a_killed_gemini_workers_bridge_folder_goes_with_it(gemini_host, roost_env, short_tmpdir, tmp_path):
    roost_env["TMPDIR"] = str(short_tmpdir)
    fake = gemini_host.start_fake(slow(tmp_path / "gate"))
    daemon = gemini_host.daemon()
    job = daemon.start_job("a slow task", host="gemini", cwd=str(gemini_host.cli.work))
    wait_until(lambda: len(scripted(fake)) >= 1, 120, what="the slow tool's call")
    bridge = kill9_the_worker_then_stop_everything(daemon, roost_env, job, short_tmpdir)
    assert not bridge.parent.exists() and bridge_folders(short_tmpdir) == []
