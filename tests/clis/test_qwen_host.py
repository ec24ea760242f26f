"""roost's ``qwen`` host (``roost_plugins.qwen``): background jobs on the pinned real Qwen
Code against the fake chat-completions API, through the user's path (``roost start --host
qwen``, a parent's ``roost_spawn``), and ``roost qwen install | uninstall``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading

import proctools
from clifake import scripted, users
from cliworld import json_lines
from conftest import wait_until
from fake_chat import FakeChat
from fg import (
    answer_the_question,
    in_thread,
    run_async,
    send,
    send_after_first_call,
    session,
    spawn,
)
from pikit import roost_bin
from qwenkit import OFFLINE_SETTINGS, session_records

from roost_core.hosts import registered_hosts, session_seqs
from roost_core.plugins import make_plugin_manager
from roost_core.policy import NO_USER_AUTHORITY

AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


def prompts(records):
    """The prompts the session holds (user records' texts)."""
    return ["".join(p.get("text", "") for p in r["message"]["parts"]) for r in records if r.get("type") == "user" and not r.get("subtype")]


def tool_outputs(records):
    return [p["functionResponse"]["response"].get("output", "") for r in records if r.get("type") == "tool_result" for p in r["message"]["parts"] if "functionResponse" in p]


def test_roost_start_runs_qwen_code_in_its_own_session_and_roost_log_renders_it(qwen_host):
    fake = qwen_host.fake({"default": {"steps": [{"say": "Done: {input}"}]}})
    daemon = qwen_host.daemon()
    started = subprocess.run([roost_bin(), "start", "--host", "qwen", "--name", "builder", "--json", "build the thing"],
                             env=qwen_host.env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    job = json.loads(started.stdout)["id"]
    row = daemon.wait_job(job, timeout=90)
    assert row["state"] == "done", row
    assert row["summary"] == "Done: build the thing"
    session_file = daemon.record(job)["session"]
    # Qwen Code's own session file, named by its session id (--session-id).
    assert session_file.startswith(str(qwen_host.home / ".qwen" / "projects")) and "/chats/" in session_file
    records = session_records(session_file)
    assert prompts(records) == ["[roost seq 1]\nbuild the thing"]
    # What a restarted worker and the daemon's restore check read from it: seq 1 is in.
    assert session_seqs(registered_hosts(make_plugin_manager(autoload=False))["qwen"], session_file) == {1}
    # One model call: none of Qwen Code's own side calls (memory extraction, suggestions),
    # which the job's settings turn off.
    [request] = fake.requests()
    assert not request["reply"].get("side")
    # roost's tools reach the model through Qwen Code's MCP client (deferred: named in
    # the conversation, called through tool_call).
    assert "tool_call" in [t["function"]["name"] for t in request["body"]["tools"]]
    assert "mcp__roost__roost_agents" in json.dumps(request["body"]["messages"])
    # Usage: the answer's tokens, the job's and its tree's.
    wait_until(lambda: (daemon.job(job)["usage"] or {}).get("tokens") == 15, 30, what="the job's usage")
    shown = subprocess.run([roost_bin(), "log", job], env=qwen_host.env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == ["› you: build the thing", "assistant: Done: build the thing"]


def test_a_qwen_child_reports_to_its_parent_once_and_is_woken_by_its_answer(qwen_host, tmp_path):
    scenario = {
        "run": [{"steps": [{"agents": {}}, {"say": "Which colour, red or blue?"}]}],
        "default": {"steps": [{"say": "painted it {input}"}]},
    }
    fake = qwen_host.fake(scenario)
    daemon = qwen_host.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "paint the shed", "painter", host="qwen")
            await answer_the_question(daemon, lead, kid, "blue")
            # The answer went in as a prompt; the model call that held it answered: seen.
            assert (await in_thread(daemon.wait_seen, kid, "blue"))["state"] == "seen"
            return kid, list(lead.delivered)

    kid, delivered = run_async(story)
    # The child's roost tools (Qwen Code's MCP client, roost mcp in job mode) run through
    # its worker: it sees its parent.
    listing = next(r for r in scripted(fake) if any(m["role"] == "tool" for m in r["chat"]))
    tool_text = json.dumps([m["content"] for m in listing["chat"] if m["role"] == "tool"])
    assert "lead" in tool_text and "[parent]" in tool_text, tool_text
    # Each report once, framed as the child's.
    assert [d["kind"] for d in delivered] == ["report", "report"]
    assert "Which colour, red or blue?" in delivered[0]["content"] and "painted it blue" in delivered[1]["content"]
    assert all(d["fromName"] == "painter" and d["relation"] == "child" and AUTHORITY_LINE in d["content"] for d in delivered)
    # The answer started the next turn as a prompt of its own: marker, then the framed item.
    said = prompts(session_records(daemon.record(kid)["session"]))
    assert said[0] == "[roost seq 1]\npaint the shed"
    assert said[1].startswith("[roost seq 2]\n<agent-message from=\"lead\"") and AUTHORITY_LINE in said[1] and len(said) == 2
    assert scripted(fake)[-1]["reply"]["text"] == "painted it blue"
    assert daemon.job(kid)["pending"] == 0
    shown = subprocess.run([roost_bin(), "log", kid], env=qwen_host.env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "› you: paint the shed" and "assistant: Which colour, red or blue?" in lines
    at = next(n for n, line in enumerate(lines) if re.fullmatch(r"✉ message from lead \(parent\) · m[0-9a-f]{8}", line))
    assert lines[at + 1] == "│ blue" and lines[-1] == "assistant: painted it blue"
    assert not any("[roost seq" in line for line in lines), lines
    # The no-user-authority notice that follows the frame is the frame's, not the user's words.
    assert [line for line in lines if "you:" in line] == ["› you: paint the shed"], lines
    assert not any(AUTHORITY_LINE in line for line in lines), lines


def test_a_message_sent_during_a_tool_arrives_mid_turn_after_the_tool_result(qwen_host, tmp_path):
    gate = tmp_path / "gate"
    scenario = {
        "run": [{"steps": [{"wait_for": str(gate)}, {"shell": "echo second tool"}, {"say": "after the tools"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = qwen_host.fake(scenario)
    daemon = qwen_host.daemon()
    # The user has roost in their own Qwen Code too: the job's Qwen Code runs those hooks
    # as well (every scope's), and still hands each item over once.
    installed = subprocess.run([roost_bin(), "qwen", "install"], env=qwen_host.env, capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stderr

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "do the slow thing", "slowpoke", host="qwen")
            await send_after_first_call(lead, kid, lambda: scripted(fake), "also check the docs", 90)
            # Held by the worker until the slow tool's PostToolUse hook: no model call has it.
            assert daemon.received(kid, "also check the docs")["seen"] is None
            gate.write_text("go")
            await lead.wait_for_delivery(1, timeout=90)
            await in_thread(daemon.wait_job, kid, timeout=60)
            # Seen: the model call after the hand-over answered (issue 42.4's receipt).
            receipt = await in_thread(daemon.wait_seen, kid, "also check the docs")
            assert receipt["state"] == "seen" and receipt["seen"] >= receipt["created"], receipt
            return kid, list(lead.delivered)

    kid, delivered = run_async(story)
    records = session_records(daemon.record(kid)["session"])
    # Handed over by PostToolUse, once: Qwen Code appended it to the tool's output, with
    # every hook context's < and > escaped (the frame reads &lt;agent-message ...&gt;).
    handed = [out for out in tool_outputs(records) if "also check the docs" in out]
    assert len(handed) == 1, handed
    assert "\n[roost seq 2]\n&lt;agent-message from=\"lead\"" in handed[0] and AUTHORITY_LINE in handed[0], handed[0][-1500:]
    assert prompts(records) == ["[roost seq 1]\ndo the slow thing"]
    # The model saw it mid-turn, in the tool result before its next answer.
    requests = scripted(fake)
    seen = next(i for i, r in enumerate(requests) if "also check the docs" in json.dumps(r["chat"][-1]))
    assert requests[seen]["chat"][-1]["role"] == "tool" and requests[-1]["reply"]["text"] == "after the tools"
    assert [d["kind"] for d in delivered] == ["report"] and "after the tools" in delivered[0]["content"]
    assert daemon.job(kid)["pending"] == 0
    shown = subprocess.run([roost_bin(), "log", kid], env=qwen_host.env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = next(n for n, line in enumerate(lines) if re.fullmatch(r"✉ message from lead \(parent\) · m[0-9a-f]{8}", line))
    assert lines[at + 1] == "│ also check the docs" and lines[-1] == "assistant: after the tools"


def test_a_worker_killed_mid_run_hands_the_message_over_once_and_leaves_no_process(qwen_host, tmp_path):
    gate = tmp_path / "gate"
    scenario = {
        "run": [{"match": "first task", "steps": [{"say": "ready"}]},
                {"match": "wait here", "steps": [{"wait_for": str(gate)}, {"say": "waited"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = qwen_host.fake(scenario)
    daemon = qwen_host.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first task", "sleeper", host="qwen")
            await lead.wait_for_delivery(1, timeout=90)
            ok, text, _data = await send(lead, kid, "wait here")
            assert ok, text
            # Qwen Code has the message (its session file holds the prompt) and runs the
            # tool. Kill -9 the worker.
            await in_thread(wait_until, lambda: proctools.with_cmdline(str(gate)), 90, what="the tool running")
            row = daemon.job(kid)
            everything = proctools.tree(row["hostPid"])
            assert proctools.with_cmdline(str(gate)) <= everything
            proctools.kill9(row["workerPid"])
            settled = await in_thread(wait_until, lambda: (r := daemon.job(kid))["state"] == "failed" and r["workerPid"] != row["workerPid"] and r, 90,
                                      what="the run failed and a new worker took the job")
            return kid, everything, settled

    kid, everything, settled = run_async(story)
    assert "worker died during a run" in settled["error"], settled
    # The new worker finds the message in the session file: settled, not run again.
    wait_until(lambda: daemon.job(kid)["pending"] == 0, 90, what="the message settled")
    # Nothing of the killed run lives on: Qwen Code, its MCP server, the tool's shell. The
    # daemon SIGKILLs them when it hears the worker died (it does not wait for their
    # deaths), so this waits for them, as the pi worker's kill -9 test does.
    wait_until(lambda: not any(proctools.alive(p) for p in everything), 60, what="everything the killed worker left ended")
    # The message went in once, and the model saw it once.
    records = session_records(daemon.record(kid)["session"])
    assert sum("wait here" in p for p in prompts(records)) == 1
    assert sum(1 for r in scripted(fake) if r["chat"][-1]["role"] == "user" and "wait here" in users(r)[-1]) == 1


# ------------------------------------------------------------------ the user's own Qwen Code


def roost(qwen_host, *args):
    return subprocess.run([roost_bin(), *args], env=qwen_host.env, capture_output=True, text=True, timeout=60)


def test_install_and_uninstall_keep_the_users_settings(qwen_host):
    mine = json.loads(qwen_host.settings_file.read_text())
    mine["mcpServers"] = {"theirs": {"command": "their-server"}}
    mine["hooks"] = {"Stop": [{"hooks": [{"type": "command", "command": "their-stop-hook"}]}]}
    qwen_host.settings_file.write_text(json.dumps(mine))
    first = roost(qwen_host, "qwen", "install")
    assert first.returncode == 0 and "installed in" in first.stdout, first.stderr
    installed = json.loads(qwen_host.settings_file.read_text())
    assert installed["mcpServers"]["theirs"] == {"command": "their-server"}
    assert installed["mcpServers"]["roost"]["args"][-4:] == ["mcp", "--hooks", "--host", "qwen"] and installed["mcpServers"]["roost"]["trust"] is True
    assert installed["hooks"]["Stop"][0] == mine["hooks"]["Stop"][0] and len(installed["hooks"]["Stop"]) == 2
    assert sorted(installed["hooks"]) == ["PostToolUse", "Stop", "UserPromptSubmit"]
    assert {k: v for k, v in installed.items() if k not in ("mcpServers", "hooks")} == {k: v for k, v in mine.items() if k not in ("mcpServers", "hooks")}
    again = roost(qwen_host, "qwen", "install")
    assert again.returncode == 0 and "already in" in again.stdout
    assert json.loads(qwen_host.settings_file.read_text()) == installed
    gone = roost(qwen_host, "qwen", "uninstall")
    assert gone.returncode == 0 and "removed from" in gone.stdout
    assert json.loads(qwen_host.settings_file.read_text()) == mine
    qwen_host.settings_file.write_text("{not json")
    broken = roost(qwen_host, "qwen", "install")
    assert broken.returncode == 1 and broken.stderr.startswith("roost: bad_config: ") and str(qwen_host.settings_file) in broken.stderr
    assert qwen_host.settings_file.read_text() == "{not json"


def test_an_installed_qwen_session_joins_and_gets_a_message_mid_turn(qwen_host, write_config, tmp_path):
    write_config({"agentExternalMessages": True})
    gate = tmp_path / "gate"
    scenario = {
        "run": [{"steps": [{"agents": {}}, {"wait_for": str(gate)}, {"say": "saw it"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = qwen_host.fake(scenario)
    daemon = qwen_host.daemon()
    # The user's own settings keep Qwen Code's side calls off (as the kit's do).
    qwen_host.settings_file.write_text(json.dumps(OFFLINE_SETTINGS))
    assert roost(qwen_host, "qwen", "install").returncode == 0
    project = tmp_path / "myproj"
    project.mkdir()
    user = subprocess.Popen([qwen_host.binary, "-p", "who is around?", "--output-format", "stream-json", "--yolo"], cwd=project, env=qwen_host.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:

        async def story():
            async with session(daemon, tmp_path) as lead:
                # The user's session joined through roost mcp on its first roost tool call.
                row = await in_thread(wait_until, lambda: next((a for a in daemon.call("agents")["agents"] if a["name"] == "myproj"), None), 90,
                                      what="the user's Qwen Code session as a peer")
                assert row["host"] == "qwen"
                ok, text, data = await send(lead, row["id"], "the build is green")
                assert ok and data["result"] == "delivered", text
                gate.write_text("go")
                return row

        row = run_async(story)
        _out, err = user.communicate(timeout=120)
        assert user.returncode == 0, err[-3000:]
    finally:
        if user.poll() is None:
            os.killpg(user.pid, signal.SIGKILL)
            user.wait()
    # Handed over mid-turn by a PostToolUse hook (after the roost tool's or the waiting
    # tool's result), through roost mcp, once.
    requests = scripted(fake)
    seen = [r for r in requests if "the build is green" in json.dumps(r["chat"][-1])]
    assert seen and seen[0]["chat"][-1]["role"] == "tool", seen
    handed = json.dumps(seen[0]["chat"][-1]["content"])
    assert "&lt;agent-message from=" in handed and handed.count("the build is green") == 1
    assert sum(json.dumps(r["chat"]).count("the build is green") for r in requests[-1:]) == 1
    assert requests[-1]["reply"]["text"] == "saw it"
    assert next(a for a in daemon.call("agents")["agents"] if a["id"] == row["id"])["pending"] == 0
    assert "[qwen]" in roost(qwen_host, "agents").stdout


class HeldFake(FakeChat):
    """The fake, holding the answer whose text ``held`` names until ``release`` is set
    (``holding`` says it is held)."""

    held = ""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.holding, self.release = threading.Event(), threading.Event()

    def answer(self, path, body):
        chat, reply = super().answer(path, body)
        if reply.get("text") == self.held and not reply.get("tool"):
            self.holding.set()
            self.release.wait(120)
        return chat, reply


def test_an_installed_qwen_session_gets_a_message_that_arrives_during_its_last_answer_at_its_stop(qwen_host, write_config, tmp_path):
    write_config({"agentExternalMessages": True})
    scenario = {"run": [{"steps": [{"agents": {}}, {"say": "final words"}]}], "default": {"steps": [{"say": "ok: {input}"}]}}
    fake = HeldFake(scenario, tmp_path / "held.jsonl", dialect="qwen").start()
    fake.held = "final words"
    qwen_host.fakes.append(fake)
    qwen_host.env["OPENAI_BASE_URL"] = fake.base_url
    daemon = qwen_host.daemon()
    qwen_host.settings_file.write_text(json.dumps(OFFLINE_SETTINGS))
    assert roost(qwen_host, "qwen", "install").returncode == 0
    project = tmp_path / "myproj"
    project.mkdir()
    user = subprocess.Popen([qwen_host.binary, "-p", "who is around?", "--output-format", "stream-json"], cwd=project, env=qwen_host.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:

        async def story():
            async with session(daemon, tmp_path) as lead:
                # The last answer is being given: the tool boundary has passed.
                assert await in_thread(fake.holding.wait, 90), "the last answer never started"
                row = next(a for a in daemon.call("agents")["agents"] if a["name"] == "myproj")
                ok, text, data = await send(lead, row["id"], "one more thing")
                assert ok and data["result"] == "delivered", text
                fake.release.set()
                return row

        row = run_async(story)
        out, err = user.communicate(timeout=120)
        assert user.returncode == 0, err[-3000:]
    finally:
        fake.release.set()
        if user.poll() is None:
            os.killpg(user.pid, signal.SIGKILL)
            user.wait()
    # The stop was blocked with it: the same run answered it, once.
    requests = scripted(fake)
    assert requests[-1]["reply"]["text"] == "ok: one more thing"
    assert sum(1 for r in requests if r["chat"][-1]["role"] == "user" and "one more thing" in json.dumps(r["chat"][-1])) == 1
    assert "<agent-message from=" in requests[-1]["chat"][-1]["content"]
    assert json_lines(out)[-1]["result"].endswith("ok: one more thing")
    assert next(a for a in daemon.call("agents")["agents"] if a["id"] == row["id"])["pending"] == 0
