"""Honest states (issue 42.6) through the lead's ``roost_agents`` tool, a real daemon and
scripted-host workers: a running child, one on a dialog, a hibernated one, one whose worker
crashed and a stopped one are told apart, each with what a message will do to it; and a
message does what the listing said (``roost agents`` shows the same)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn

QUIET = {"run": [{"steps": [{"say": "ready"}]}], "default": {"steps": [{"say": "ok: {input}"}]}}


def gated(gate) -> dict:
    return {"run": [{"steps": [{"wait_for": str(gate)}, {"say": "through"}]}], "default": {"steps": [{"say": "ok: {input}"}]}}


def test_roost_agents_tells_each_state_apart_and_what_a_message_does(daemon_factory, write_config, tmp_path):
    write_config({"hibernateAfterSeconds": 0})
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            runner = await spawn(lead, "work", "runner", scenario=gated(tmp_path / "never"))
            asker = await spawn(lead, "deploy", "asker", scenario={"run": [{"steps": [{"dialog": "Deploy?"}, {"say": "deployed"}]}]})
            sleeper = await spawn(lead, "start", "sleeper", scenario=QUIET)
            crasher = await spawn(lead, "work", "crasher", scenario=gated(tmp_path / "never"))
            ender = await spawn(lead, "start", "ender", scenario=QUIET)
            await in_thread(wait_until, lambda: daemon.job(runner)["state"] == "running" and daemon.job(crasher)["state"] == "running", what="two runs")
            await in_thread(wait_until, lambda: daemon.job(asker)["dialog"], what="the dialog open")
            for kid in (sleeper, ender):
                await in_thread(wait_until, lambda kid=kid: not daemon.job(kid)["live"] and daemon.job(kid)["state"] == "done", what="hibernated")
            os.kill(daemon.job(crasher)["workerPid"], signal.SIGKILL)
            await in_thread(wait_until, lambda: not daemon.job(crasher)["live"], what="the worker gone")
            daemon.call("stop", job=ender)
            await in_thread(daemon.wait_job, ender, "stopped")

            ok, text, data = await lead.call_tool("roost_agents", {})
            assert ok, text
            rows = {row["name"]: row for row in data["peers"]}
            assert {name: (row["activity"], row["onMessage"]) for name, row in rows.items()} == {
                "runner": ("running", "a message reaches it in this run"),
                "asker": ("dialog", "a message waits until the user answers its dialog"),
                "sleeper": ("hibernated", "a message wakes it"),
                "crasher": ("crashed", "a message restarts it"),
                "ender": ("ended", "a message does not wake it (the user may restart it)"),
            }
            lines = {line.split("  ")[1]: line for line in text.splitlines() if "  [child]  " in line}
            assert f"{sleeper}  sleeper  [child]  done, hibernated: a message wakes it" in lines["sleeper"]
            assert f"{crasher}  crasher  [child]  failed, crashed: a message restarts it" in lines["crasher"]
            assert f"{ender}  ender  [child]  stopped: a message does not wake it" in lines["ender"]
            assert f"{asker}  asker  [child]  needs_input, dialog: a message waits" in lines["asker"]
            assert f"{runner}  runner  [child]  running: a message reaches it in this run" in lines["runner"]
            # roost agents (the CLI) shows the same words.
            agents = await in_thread(cli, daemon, "agents")
            for kid, words in ((sleeper, "done, hibernated"), (crasher, "failed, crashed"), (asker, "needs_input, dialog"), (ender, "stopped"), (runner, "running")):
                (line,) = [line for line in agents.splitlines() if f"({kid})" in line]
                assert f"]  {words}  " in line or line.endswith(f"]  {words}"), line

            # What a message does is what the listing said.
            for kid, result in ((sleeper, "started"), (crasher, "started"), (ender, "stopped"), (runner, "delivered")):
                ok, text, sent = await send(lead, kid, "status?")
                assert ok and sent["result"] == result, (kid, text)

    run_async(story)


def cli(daemon, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "roost_core.cli", *args], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout
