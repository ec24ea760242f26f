"""Hibernation with the pinned real pi (issue 14.1/14.3): a settled pi child is ended —
worker, pi and everything under them — after ``hibernateAfterSeconds`` (found gone by
walking /proc), and a message wakes it from its session file: it answers exactly once,
with the same session file, model, thinking level, cwd and tree links as before."""

from __future__ import annotations

import json
import os
import signal
import uuid

import proctools
import pytest
from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn
from pikit import agent_items, message_text

NAMES: list[str] = []


@pytest.fixture(autouse=True)
def no_server_survives_a_failed_test():
    yield
    proctools.kill_named(NAMES)


#: What pi's bash tool writes about its own process tree: pi (the tool's parent) and the
#: worker (pi's parent), each as "pid start-time", from /proc (not from roost).
WHO = (
    'p=$PPID; w=$(sed "s/.*) //" /proc/$p/stat | cut -d" " -f2); '
    'echo "$p $(sed "s/.*) //" /proc/$p/stat | cut -d" " -f20) $w $(sed "s/.*) //" /proc/$w/stat | cut -d" " -f20)" > {out}'
)


def test_a_pi_child_hibernates_and_a_message_wakes_it_to_answer_once(pi_kit, write_config, tmp_path):
    write_config({"hibernateAfterSeconds": 0.5})
    who = tmp_path / "who.txt"
    workdir = tmp_path / "work"
    workdir.mkdir()
    scenario = {
        "default": {"steps": [{"say": "noted"}]},
        "models": {
            "kid": {
                "run": [
                    {"steps": [{"shell": WHO.format(out=who)}, {"say": "first done"}]},
                    {"steps": [{"shell": "pwd"}, {"say": "done with {input}"}]},
                ]
            }
        },
    }
    fake = pi_kit.fake(scenario)
    # The child's model reasons, so its thinking level is a real setting ("low", not "off").
    models = json.loads((pi_kit.agent_dir / "models.json").read_text())
    for model in models["providers"]["fake"]["models"]:
        model["reasoning"] = model["id"] == "kid"
    (pi_kit.agent_dir / "models.json").write_text(json.dumps(models))
    daemon = pi_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "look around", "kid", host="pi", model="fake/kid", thinking="low", cwd=str(workdir))
            await lead.wait_for_delivery(1, timeout=90)
            first = wait_until(lambda: who.exists() and who.read_text().split(), what="the tool's view of its processes")
            pi, worker = (int(first[0]), int(first[1])), (int(first[2]), int(first[3]))
            await in_thread(wait_until, lambda: not daemon.job(kid)["live"], 60, what="the child hibernated")
            gone = (not proctools.alive(pi), not proctools.alive(worker), proctools.with_environ("ROOST_JOB", kid))
            before = daemon.job(kid)
            ok, text, data = await send(lead, kid, "the second part")
            assert ok and data["result"] == "started", text
            await lead.wait_for_delivery(2, timeout=90)
            await in_thread(daemon.wait_job, kid, timeout=60)
            return kid, gone, before, [e for e in lead.delivered if e["kind"] == "report"]

    kid, gone, before, reports = run_async(story)
    # Hibernated: pi, its worker and every process started under the child's name ended.
    assert gone == (True, True, set())
    # Woken by the parent's message: it answered once, and reported (a parent's message).
    assert [r["content"].count("done with the second part") for r in reports] == [0, 1]
    entries = daemon.entries(kid)
    items = agent_items(entries)
    assert [i["details"]["kind"] for i in items] == ["message"] and "the second part" in items[0]["content"]
    requests = [r for r in fake.requests() if r["model"] == "kid"]
    asked = [r for r in requests if any("the second part" in message_text(m) for m in r["messages"])]
    assert asked and sum("the second part" in message_text(m) for m in asked[0]["messages"]) == 1
    # Same session file (one header), model and thinking level (never changed), cwd, links.
    assert sum(1 for e in entries if e.get("type") == "session") == 1
    assert [(e["provider"], e["modelId"]) for e in entries if e.get("type") == "model_change"] == [("fake", "kid")]
    assert [e["thinkingLevel"] for e in entries if e.get("type") == "thinking_level_change"] == ["low"]
    assistant = [e["message"] for e in entries if e.get("type") == "message" and e["message"]["role"] == "assistant"]
    assert {m["model"] for m in assistant} == {"kid"}
    results = [message_text(e["message"]) for e in entries if e.get("type") == "message" and e["message"]["role"] == "toolResult"]
    assert results[-1].strip() == str(workdir)
    after = daemon.job(kid)
    for key in ("session", "cwd", "parentSession", "parentPeer", "rootSession", "depth"):
        assert after[key] == before[key], key
    # A second pi ran it: the log shows two starts on the same file.
    log = (daemon.paths.jobs_dir / f"{kid}.log").read_text()
    assert log.count("starting pi") == 2


def test_a_pi_child_keeps_its_server_until_it_exits_then_hibernates(pi_kit, write_config, tmp_path):
    """Issue 42.3 with the pinned real pi: pi's bash tool starts a server in the
    background (``setsid``, its shell gone) and the child settles; it is not hibernated
    while the server runs, ``roost jobs`` and ``roost agents`` show the server, and once
    the test kills it the child hibernates. (``roost stop`` ending such a server:
    tests/system/test_background_processes.py.)"""
    write_config({"hibernateAfterSeconds": 0})
    name = f"roost-server-{uuid.uuid4().hex[:12]}"
    NAMES.append(name)
    pidfile = tmp_path / f"{name}.pid"
    # The run settles once the server runs under its name (it renames itself as it starts).
    ready = f"until grep -q {name} /proc/$(cat {pidfile} 2>/dev/null)/cmdline 2>/dev/null; do sleep 0.05; done"
    pi_kit.fake({
        "run": [{"steps": [{"shell": proctools.escapee_command(pidfile, name)}, {"shell": ready}, {"say": "the server runs"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    })
    daemon = pi_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "start the dev server", "devserver", host="pi")
            running = await in_thread(wait_until, lambda: proctools.escapee(pidfile, name), 90, what="the server running")
            row = await in_thread(wait_until, lambda: (r := daemon.job(kid))["state"] == "done" and r["background"] and r, 90, what="settled with its server")
            return kid, running, row

    kid, running, row = run_async(story)
    assert row["live"] and row["hostPid"] and proctools.alive(running)
    assert row["backgroundShown"] == [{"pid": running[0], "command": f"{name} 300"}]
    jobs = pi_kit.roost("jobs").stdout
    assert f"[1 background process: {name} 300] the server runs" in jobs
    (agents,) = [line for line in pi_kit.roost("agents").stdout.splitlines() if kid in line]
    assert "done, background" in agents and f"[1 background process: {name} 300]" in agents
    assert proctools.alive(running) and daemon.job(kid)["live"]
    pi = proctools.proc(row["hostPid"])
    os.kill(running[0], signal.SIGKILL)
    after = wait_until(lambda: not (r := daemon.job(kid))["live"] and r, 60, what="the child hibernated once its server exited")
    assert after["state"] == "done" and after["background"] == 0
    wait_until(lambda: not proctools.alive(pi), what="its pi ended")
