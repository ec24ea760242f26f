"""Background Codex jobs (host ``codex``): the pinned Codex CLI under a roost worker,
``codex exec --json`` then ``codex exec resume`` on the same thread, against the fake
Responses API on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from pathlib import Path

from conftest import wait_until
from fg import (
    answer_the_question,
    in_thread,
    run_async,
    send,
    send_after_first_call,
    send_during_last_answer,
    session,
    spawn,
)
from pikit import roost_bin

from roost_core.hosts.handover import marked_seqs
from roost_core.policy import NO_USER_AUTHORITY

AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


def rollout_lines(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def handed(lines: list[dict]) -> list[tuple[str, list[int], str]]:
    """roost's hand-overs in a rollout: (role, seqs, text) of each user or developer
    message that starts with the marker (a blocked stop's reason unwrapped)."""
    from roost_plugins.codex.transcript import handed_text

    found = []
    for line in lines:
        payload = line.get("payload") or {}
        if line.get("type") != "response_item":
            continue
        text = handed_text(payload)
        if text and marked_seqs(text):
            found.append((payload["role"], marked_seqs(text), text))
    return found


def roost(kit, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([roost_bin(), *args], env=kit.env, capture_output=True, text=True, timeout=120)


def test_a_codex_job_runs_its_task_in_codex_s_own_session_with_the_roost_tools(codex_roost, daemon_factory):
    fake = codex_roost.start_fake({"default": {"steps": [{"agents": {}}, {"say": "Done: {input}"}]}})
    codex_roost.configure()
    daemon = daemon_factory().start()
    started = roost(codex_roost, "start", "--host", "codex", "--name", "builder", "--cwd", str(codex_roost.work), "build the thing")
    assert started.returncode == 0, started.stderr
    job = next(row["id"] for row in daemon.call("jobs")["jobs"] if row["name"] == "builder")
    row = daemon.wait_job(job, timeout=120)
    assert row["state"] == "done", row
    assert row["summary"] == "Done: build the thing"
    # The job's session is Codex's own rollout (named by the thread id), linked from
    # roost's sessions folder: `codex resume THREAD` finds the same conversation.
    session_file = daemon.record(job)["session"]
    [rollout] = codex_roost.rollouts()
    assert os.path.realpath(session_file) == str(rollout)
    assert [(role, seqs) for role, seqs, _ in handed(rollout_lines(rollout))] == [("user", [1])]
    # The roost tools are the MCP namespace mcp__roost, and they ran through the worker.
    first = fake.requests()[0]["body"]
    namespaces = {t["name"]: {i["name"] for i in t["tools"]} for t in first["tools"] if t.get("type") == "namespace"}
    assert {"roost_agents", "roost_send", "roost_spawn"} <= namespaces["mcp__roost"]
    tool_output = json.dumps(next(i["output"] for i in fake.requests()[1]["body"]["input"] if i.get("type") == "function_call_output"))
    assert "no reachable agent sessions" in tool_output, tool_output  # the daemon's answer: it is alone
    # Usage counts toward the tree: the thread's tokens, as Codex's token_count sums them.
    wait_until(lambda: (daemon.job(job)["usage"] or {}).get("tokens") == 110 * len(fake.requests()), 30, what="the job's usage")
    shown = roost(codex_roost, "log", job)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "› you: build the thing", lines
    assert lines[-1] == "assistant: Done: build the thing", lines
    assert not any("[roost seq" in line or "environment_context" in line for line in lines), lines
    assert not fake.violations


def test_a_codex_child_reports_to_its_parent_and_its_answer_resumes_the_thread(codex_roost, daemon_factory, tmp_path):
    scenario = {
        "run": [{"match": "paint", "steps": [{"agents": {}}, {"say": "Which colour, red or blue?"}]}],
        "default": {"steps": [{"say": "painted it {input}"}]},
    }
    fake = codex_roost.start_fake(scenario)
    codex_roost.configure()
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "paint the shed", "painter", host="codex")
            await answer_the_question(daemon, lead, kid, "blue", timeout=120)
            return kid, list(lead.delivered)

    kid, delivered = run_async(story)
    # The child's roost tools see its parent.
    tool_output = json.dumps(next(i["output"] for r in fake.requests() for i in r["body"]["input"] if i.get("type") == "function_call_output"))
    assert "lead" in tool_output and "[parent]" in tool_output, tool_output
    # Each report reached the parent once, framed as the child's.
    assert [d["kind"] for d in delivered] == ["report", "report"]
    assert "Which colour, red or blue?" in delivered[0]["content"]
    assert "painted it" in delivered[1]["content"] and "blue" in delivered[1]["content"]
    assert all(d["fromName"] == "painter" and d["relation"] == "child" for d in delivered)
    assert all(AUTHORITY_LINE in d["content"] for d in delivered)
    # The answer resumed the same thread: one rollout, the answer handed over once.
    [rollout] = codex_roost.rollouts()
    hand = handed(rollout_lines(rollout))
    assert [role for role, _, _ in hand] == ["user", "user"]
    assert "blue" in hand[1][2] and 'relation="parent"' in hand[1][2]
    assert len({seq for _, seqs, _ in hand for seq in seqs}) == 2
    last = fake.requests()[-1]
    assert last["reply"]["text"].startswith("painted it") and last["chat"][0]["content"] == "paint the shed"
    assert daemon.job(kid)["pending"] == 0
    assert not fake.violations


# ------------------------------------------------------------ mid-turn, restarts, stops

import proctools  # noqa: E402


def slow_scenario(gate: Path) -> dict:
    """``slow ...`` runs a tool that waits for ``gate``, then answers; anything else is echoed."""
    return {
        "run": [{"match": "slow", "steps": [{"wait_for": str(gate), "timeout": 120}, {"say": "after the tool"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }


def test_a_message_sent_during_a_slow_tool_arrives_mid_turn_and_a_reply_right_after_the_run(codex_roost, daemon_factory, tmp_path):
    gate = tmp_path / "gate"
    fake = codex_roost.start_fake(slow_scenario(gate))
    codex_roost.configure()
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "do the slow thing", "slowpoke", host="codex")
            await send_after_first_call(lead, kid, fake.requests, "also check the docs", 120)
            assert daemon.received(kid, "also check the docs")["seen"] is None  # held until the hook
            await in_thread(daemon.call, "reply", job=kid, text="and tidy up")  # the user's words
            gate.write_text("go")
            await lead.wait_for_delivery(1, timeout=120)
            await in_thread(daemon.wait_job, kid, timeout=60)
            # Seen: Codex's next model answer after the hand-over (issue 42.4's receipt).
            receipt = await in_thread(daemon.wait_seen, kid, "also check the docs")
            assert receipt["state"] == "seen" and receipt["seen"] >= receipt["created"], receipt
            return kid, list(lead.delivered)

    kid, delivered = run_async(story)
    [rollout] = codex_roost.rollouts()
    hand = handed(rollout_lines(rollout))
    # The task was the prompt; the message came once, as PostToolUse's context (a
    # developer message after the tool call, in the same turn), never as a prompt; the
    # user's reply was the prompt of the exec resume right after (never a hook's context).
    assert [(role, len(seqs)) for role, seqs, _ in hand] == [("user", 1), ("developer", 1), ("user", 1)], hand
    assert "also check the docs" in hand[1][2] and AUTHORITY_LINE in hand[1][2]
    assert hand[2][2].endswith("\nand tidy up")
    second = fake.requests()[1]
    kinds = [i.get("type", "message") + ":" + str(i.get("role")) for i in second["body"]["input"]]
    at = kinds.index("function_call:None")
    assert kinds[at + 1:at + 3] == ["message:developer", "function_call_output:None"], kinds
    assert second["reply"]["text"] == "after the tool"
    assert [r["reply"]["text"] for r in fake.requests()[2:]] == ["ok: and tidy up"]
    # One run (two exec processes): one report, at its end.
    assert [d["kind"] for d in delivered] == ["report"] and "ok: and tidy up" in delivered[0]["content"]
    assert daemon.job(kid)["pending"] == 0
    assert not fake.violations


def test_an_item_that_arrives_during_the_last_answer_blocks_the_stop_and_the_run_goes_on(codex_roost, daemon_factory, tmp_path):
    scenario = {
        "run": [{"match": "finish", "steps": [{"shell": "echo one tool"}, {"say": "final words"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = codex_roost.start_fake(scenario)
    fake.hold = lambda reply: reply.get("text") == "final words"
    codex_roost.configure()
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "finish up", "closer", host="codex")
            await send_during_last_answer(daemon, lead, fake, kid, "one more thing", timeout=120)
            return kid, list(lead.delivered)

    try:
        kid, delivered = run_async(story)
    finally:
        fake.release.set()
    [rollout] = codex_roost.rollouts()
    hand = handed(rollout_lines(rollout))
    # The Stop hook blocked with it: a <hook_prompt> user input in the same exec run.
    assert [seqs for _, seqs, _ in hand] == [[1], [2]] and "one more thing" in hand[1][2]
    raw = next(line["payload"] for line in rollout_lines(rollout) if line.get("type") == "response_item" and "one more thing" in json.dumps(line))
    assert "<hook_prompt" in json.dumps(raw)
    assert fake.requests()[-1]["reply"]["text"] == "ok: one more thing"
    log = (daemon.paths.jobs_dir / f"{kid}.log").read_text()
    assert log.count("starting codex") == 1
    # It reported once, at the run's real end.
    assert [d["kind"] for d in delivered] == ["report"] and "ok: one more thing" in delivered[0]["content"]
    # roost log shows the hand-over as the agent message it is (Codex escapes it inside
    # <hook_prompt>; the reader takes the escaping off).
    shown = roost(codex_roost, "log", kid).stdout.splitlines()
    at = next(n for n, line in enumerate(shown) if line.startswith("✉ message from lead (parent)"))
    assert shown[at + 1] == "│ one more thing" and shown[-1] == "assistant: ok: one more thing", shown
    assert not fake.violations


def test_kill9_of_the_worker_mid_run_ends_codex_and_the_next_worker_takes_nothing_twice(codex_roost, daemon_factory, tmp_path):
    gate = tmp_path / "gate"  # never opened: the tool waits until the kill
    fake = codex_roost.start_fake(slow_scenario(gate))
    codex_roost.configure()
    daemon = daemon_factory().start()
    job = daemon.start_job("a slow task", host="codex", cwd=str(codex_roost.work))
    wait_until(lambda: len(fake.requests()) >= 1 and codex_roost.rollouts(), 120, what="the tool call")
    row = wait_until(lambda: (r := daemon.job(job))["hostPid"] and r, what="codex's pid")
    worker = proctools.proc(row["workerPid"])
    assert worker is not None
    everything = proctools.tree(worker[0])
    assert any("roost_core.mcp" in proctools.cmdline(p[0]) for p in everything), "no roost MCP server under the worker"
    proctools.kill9(worker[0])
    wait_until(lambda: not any(proctools.alive(p) for p in everything), 60, what="the worker, codex and its tool gone")
    # The run failed with its worker; the task is acknowledged (the rollout holds it), so
    # the new worker the daemon started does not run it again.
    row = daemon.wait_job(job, "failed", timeout=60)
    assert "worker died" in (row["error"] or "") and row["pending"] == 0, row
    assert row["workerPid"] != worker[0]
    # The next item resumes the same thread.
    daemon.call("reply", job=job, text="carry on")
    row = daemon.wait_job(job, "done", timeout=120)
    assert row["summary"] == fake.requests()[-1]["reply"]["text"]
    [rollout] = codex_roost.rollouts()
    assert [seqs for _, seqs, _ in handed(rollout_lines(rollout))] == [[1], [2]]
    last = fake.requests()[-1]
    assert [m["content"] for m in last["chat"] if m["role"] == "user"] == ["a slow task", "carry on"]
    log = (daemon.paths.jobs_dir / f"{job}.log").read_text()
    assert log.count("starting codex") == 2 and " resume " in log
    assert not fake.violations


def test_a_stopped_job_ends_codex_and_its_tool_at_once(codex_roost, daemon_factory, tmp_path):
    gate = tmp_path / "gate"  # never opened
    fake = codex_roost.start_fake(slow_scenario(gate))
    codex_roost.configure()
    daemon = daemon_factory().start()
    job = daemon.start_job("a slow task", host="codex", cwd=str(codex_roost.work))
    wait_until(lambda: len(fake.requests()) >= 1, 120, what="the tool call")
    row = wait_until(lambda: (r := daemon.job(job))["hostPid"] and r, what="codex's pid")
    codex = proctools.proc(row["hostPid"])
    assert codex is not None
    everything = proctools.tree(codex[0])
    stopped = roost(codex_roost, "stop", job)
    assert stopped.returncode == 0, stopped.stderr
    daemon.wait_job(job, "stopped", timeout=30)
    wait_until(lambda: not any(proctools.alive(p) for p in everything), 30, what="codex and its tool gone")


# ---------------------------------------------------------------------------- the user's own Codex

import tomllib  # noqa: E402


def test_install_adds_roost_beside_the_user_s_settings_and_uninstall_takes_only_roost_out(codex_roost):
    codex_roost.start_fake(PING_LIKE)
    codex_roost.configure(mcp=True, hooks={"Stop": ""})
    config, hooks = codex_roost.codex_home / "config.toml", codex_roost.codex_home / "hooks.json"
    config.write_text("# my own notes\n" + config.read_text())
    before_config, before_hooks = config.read_text(), json.loads(hooks.read_text())
    installed = roost(codex_roost, "codex", "install", "--json")
    assert installed.returncode == 0, installed.stderr
    result = json.loads(installed.stdout)
    settings = tomllib.loads(config.read_text())
    # The user's own settings and MCP server are all still there.
    assert {k: v for k, v in settings.items() if k not in ("mcp_servers", "hooks")} == {k: v for k, v in tomllib.loads(before_config).items() if k != "mcp_servers"}
    assert settings["mcp_servers"]["pingsrv"] == tomllib.loads(before_config)["mcp_servers"]["pingsrv"]
    assert config.read_text().startswith("# my own notes\n")
    server = settings["mcp_servers"]["roost"]
    assert server["args"][-1] == "mcp" and server["env"] == {"ROOST_MCP_HOST": "codex"} and server["required"] is True
    assert "ROOST_HOME" in server["env_vars"]
    events = json.loads(hooks.read_text())["hooks"]
    assert events["Stop"][0] == before_hooks["hooks"]["Stop"][0]  # the user's hook first, kept
    assert [g["hooks"][0]["command"].split()[-3:] for e in ("UserPromptSubmit", "PostToolUse", "Stop") for g in events[e][-1:]] == [
        ["codex", "hook", e] for e in ("UserPromptSubmit", "PostToolUse", "Stop")]
    # Codex trusts roost's three hooks (not the user's, which stays theirs to review).
    assert len(result["trusted"]) == 3 and all(k in settings["hooks"]["state"] for k in result["trusted"])
    again = roost(codex_roost, "codex", "install", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False
    removed = roost(codex_roost, "codex", "uninstall")
    assert removed.returncode == 0, removed.stderr
    assert tomllib.loads(config.read_text()) == tomllib.loads(before_config)
    assert json.loads(hooks.read_text()) == before_hooks


def test_install_refuses_a_broken_config_or_a_roost_server_of_the_user_s_own(codex_roost):
    config = codex_roost.codex_home / "config.toml"
    config.write_text("model = \n")
    broken = roost(codex_roost, "codex", "install")
    assert broken.returncode == 1 and broken.stderr.startswith("roost: bad_config: ") and "not valid TOML" in broken.stderr
    config.write_text('[mcp_servers.roost]\ncommand = "mine"\n')
    taken = roost(codex_roost, "codex", "install")
    assert taken.returncode == 1 and "[mcp_servers.roost] of its own" in taken.stderr
    assert config.read_text() == '[mcp_servers.roost]\ncommand = "mine"\n'
    assert not (codex_roost.codex_home / "hooks.json").exists()


PING_LIKE = {"default": {"steps": [{"say": "ok: {input}"}]}}


def test_the_user_s_own_codex_joins_and_gets_a_message_mid_turn(codex_roost, daemon_factory, write_config, tmp_path):
    write_config({"agentExternalMessages": True})  # the lead is outside the user's session tree
    gate = tmp_path / "gate"
    scenario = {
        "run": [{"match": "join", "steps": [{"agents": {}}, {"wait_for": str(gate), "timeout": 120}, {"say": "joined"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = codex_roost.start_fake(scenario)
    codex_roost.configure()
    codex_roost.env["ROOST_NAME"] = "coder"
    daemon = daemon_factory().start()
    installed = roost(codex_roost, "codex", "install")
    assert installed.returncode == 0, installed.stderr

    async def story():
        async with session(daemon, tmp_path) as lead:
            await lead.call_tool("roost_agents", {})
            with_coder = await in_thread(wait_until, lambda: [r for r in daemon.call("agents")["agents"] if r["name"] == "coder"], 120,
                                         what="the user's Codex in roost agents")
            ok, text, data = await send(lead, with_coder[0]["id"], "hello from lead")
            assert ok and data["result"] == "delivered", text
            gate.write_text("go")
            return with_coder[0]

    import threading

    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.update(result=codex_roost.exec("please join")))
    runner.start()
    try:
        row = run_async(story)
    finally:
        gate.write_text("go")
        runner.join()
    from codexkit import agent_texts, events_of

    assert agent_texts(events_of(outcome["result"])) == ["joined"]
    assert row["host"] == "codex"
    # The message came mid-turn (PostToolUse, after the tool), once, framed.
    [rollout] = codex_roost.rollouts()
    hand = handed(rollout_lines(rollout))
    assert [role for role, _, _ in hand] == ["developer"] and "hello from lead" in hand[0][2] and AUTHORITY_LINE in hand[0][2]
    assert fake.requests()[-1]["reply"]["text"] == "joined"
    # The roost side saw it in the rollout and acknowledged it: nothing waits.
    wait_until(lambda: next(r for r in daemon.call("agents")["agents"] if r["name"] == "coder")["pending"] == 0, 30,
               what="the message acknowledged")


class DroppingServer:
    """A model endpoint that is down: it takes each connection and closes it unanswered."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return  # stopped
            connection.close()

    def stop(self) -> None:
        self.listener.close()


def test_a_job_whose_model_endpoint_is_down_fails_with_codex_s_reason_on_one_line(codex_roost, daemon_factory):
    codex_roost.fake = DroppingServer()
    codex_roost.configure()
    daemon = daemon_factory().start()
    job = daemon.start_job("build the thing", host="codex", name="offline", cwd=str(codex_roost.work))
    row = daemon.wait_job(job, timeout=120)
    assert row["state"] == "failed", row
    # Codex's own account (its turn.failed), once, on one line: no "None" for an event
    # whose message sits elsewhere, no retries listed, no stderr chatter after it.
    assert row["error"].startswith("codex: stream disconnected") and "None" not in row["error"] and "\n" not in row["error"], row["error"]
    assert row["error"].count("stream disconnected") == 1, row["error"]


def write_program(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_codex_that_rejects_roost_s_flags_names_its_error_in_the_job_and_an_untested_version_says_so(codex_roost, daemon_factory, tmp_path):
    # Another Codex version: its package says 0.1.0, and it rejects a flag roost passes.
    package = tmp_path / "old-codex" / "node_modules" / "@openai" / "codex"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@openai/codex", "version": "0.1.0"}))
    program = write_program(package / "bin" / "codex.js", "#!/bin/sh\n"
                            "echo 'WARNING: something harmless' >&2\n"
                            "printf \"\\033[31merror:\\033[0m unexpected argument '--dangerously-bypass-hook-trust' found\\n\\n\" >&2\n"
                            "echo 'Usage: codex exec [OPTIONS] [PROMPT]' >&2\n"
                            "exit 2\n")
    codex_roost.start_fake({"default": {"steps": [{"say": "never"}]}})
    codex_roost.configure()
    daemon = daemon_factory(ROOST_CODEX_BIN=str(program)).start()
    job = daemon.start_job("build the thing", host="codex", name="old", cwd=str(codex_roost.work))
    # (Its task stays pending: Codex never took it, the next run has it.)
    row = wait_until(lambda: (row := daemon.job(job))["state"] == "failed" and row, 120, what="the job failed")
    assert row["error"] == ("codex exited 2 (codex stderr: WARNING: something harmless | "
                            "error: unexpected argument '--dangerously-bypass-hook-trust' found | Usage: codex exec [OPTIONS] [PROMPT])"), row["error"]
    # The version roost was not tested with: said once, in the job's status line and log.
    assert row["status"] == "codex 0.1.0 is not a version roost was tested with (0.169.1); if it fails, its error says why", row
    log_text = (daemon.paths.jobs_dir / f"{job}.log").read_text()
    assert log_text.count("codex 0.1.0 is not a version roost was tested with") == 1
    assert "unexpected argument" in log_text  # the CLI's stderr still reaches the worker's log
    jobs = subprocess.run([roost_bin(), "jobs"], env={**codex_roost.env, "COLUMNS": "400"}, capture_output=True, text=True, timeout=60)
    assert "error: unexpected argument '--dangerously-bypass-hook-trust' found" in jobs.stdout, jobs.stdout
