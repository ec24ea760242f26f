"""Hibernation keeps what a child started on purpose (issue 42.3), on the scripted host: a
child whose tool leaves a server running (a process in a session of its own, its shell
gone, as ``nohup ... &`` or ``setsid`` leave one) settles, and is not hibernated while
the server runs; ``roost jobs``, ``roost agents`` and the lead's ``roost_agents`` say so;
once the server exits the child hibernates; and ``roost stop`` ends such a server. The
test reads the process table itself (``proctools``), never roost's bookkeeping, to say
what runs. The real-pi version is in tests/pi/test_pi_hibernation.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import proctools
import pytest
from conftest import wait_until
from fg import in_thread, run_async, session, spawn

NAMES: list[str] = []


@pytest.fixture(autouse=True)
def no_server_survives_a_failed_test():
    yield
    proctools.kill_named(NAMES)


def server(tmp_path) -> tuple[str, dict, object]:
    """A name, a scenario whose first run leaves a "server" named so running (and says
    so), and the server's pid file."""
    name = f"roost-server-{uuid.uuid4().hex[:12]}"
    NAMES.append(name)
    pidfile = tmp_path / f"{name}.pid"
    # The run settles once the server runs under its name (it renames itself as it starts).
    ready = f"until grep -q {name} /proc/$(cat {pidfile} 2>/dev/null)/cmdline 2>/dev/null; do sleep 0.05; done"
    scenario = {
        "run": [{"steps": [{"shell": proctools.escapee_command(pidfile, name)}, {"shell": ready}, {"say": "the server runs"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    return name, scenario, pidfile


async def start_server_child(daemon, lead, tmp_path) -> tuple[str, str, proctools.Proc]:
    """Spawn a child whose first run leaves a server running (:func:`server`) and wait until
    the process table shows it. Returns the child's id, the server's name and its process."""
    name, scenario, pidfile = server(tmp_path)
    kid = await spawn(lead, "start the dev server", "devserver", scenario=scenario)
    running = await in_thread(wait_until, lambda: proctools.escapee(pidfile, name), what="the server running")
    return kid, name, running


def cli(daemon, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "roost_core.cli", *args], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def line_of(text: str, job: str) -> str:
    (line,) = [line for line in text.splitlines() if job in line]
    return line


def test_a_child_is_not_hibernated_while_its_server_runs_and_hibernates_once_it_exits(daemon_factory, write_config, tmp_path):
    # Hibernation at once: an old daemon ends the child (and its server) as it settles.
    write_config({"hibernateAfterSeconds": 0})
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid, name, running = await start_server_child(daemon, lead, tmp_path)
            settled = await in_thread(
                wait_until, lambda: (row := daemon.job(kid))["state"] == "done" and row["background"] and row, what="settled with its server"
            )
            ok, text, data = await lead.call_tool("roost_agents", {})
            assert ok, text
            return kid, name, running, settled, data, text

    kid, name, running, settled, data, text = run_async(story)
    # Settled, with its worker and its server: not hibernated.
    assert settled["live"] and settled["workerPid"] and proctools.alive(running)
    assert settled["background"] == 1
    assert settled["backgroundShown"] == [{"pid": running[0], "command": f"{name} 300"}]
    (row,) = [row for row in data["peers"] if row["id"] == kid]
    assert (row["activity"], row["onMessage"]) == ("background", "a message starts a run; its background processes keep running")
    assert f"{kid}  devserver  [child]  done, background: a message starts a run; its background processes keep running" in text
    # roost jobs and roost agents show it: how many, and each one's command line.
    assert f"[1 background process: {name} 300] the server runs" in line_of(cli(daemon, "jobs"), kid)
    agents = line_of(cli(daemon, "agents"), kid)
    assert "done, background" in agents and f"[1 background process: {name} 300]" in agents
    # Still running, and the child still not hibernated, after every look above.
    assert proctools.alive(running) and daemon.job(kid)["live"]

    # The server exits: the child hibernates (its worker ends).
    worker = proctools.proc(settled["workerPid"])
    os.kill(running[0], signal.SIGKILL)
    row = wait_until(lambda: not (r := daemon.job(kid))["live"] and r, what="the child hibernated once its server exited")
    assert row["state"] == "done" and row["background"] == 0 and row["backgroundShown"] == []
    wait_until(lambda: not proctools.alive(worker), what="its worker gone")
    assert "done, hibernated" in line_of(cli(daemon, "agents"), kid)


def test_roost_stop_ends_a_childs_server(daemon_factory, write_config, tmp_path):
    write_config({"hibernateAfterSeconds": 0})
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid, _name, running = await start_server_child(daemon, lead, tmp_path)
            await in_thread(wait_until, lambda: daemon.job(kid)["background"], what="settled with its server")
            return kid, running

    kid, running = run_async(story)
    worker = proctools.proc(daemon.job(kid)["workerPid"])
    cli(daemon, "stop", kid)
    wait_until(lambda: not proctools.alive(running) and not proctools.alive(worker), what="the server and the worker ended by roost stop")
    row = wait_until(lambda: not (r := daemon.job(kid))["live"] and r, what="the daemon sees the worker gone")
    assert row["state"] == "stopped" and row["background"] == 0
