"""OpenCode as a roost host (``--host opencode``, ``roost opencode install``): the pinned
real OpenCode under a roost worker, against the fake chat-completions API on 127.0.0.1.

A job runs ``opencode serve`` with a password of its own, drives one OpenCode session over
its HTTP API and event stream, and reads what OpenCode stored (its SQLite store) to know
which items the model has: each is delivered once, across a worker's kill -9."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess

import proctools
import pytest
from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn
from opencodekit import OpenCodeKit, opencode_bin
from pikit import roost_bin

from roost_core.policy import NO_USER_AUTHORITY
from roost_plugins.opencode.transcript import seqs_in_session

# A job starts a real OpenCode server (several seconds on a loaded machine, twice in a
# restart) and the fake answers every model call.
pytestmark = pytest.mark.timeout(300)
AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


@pytest.fixture
def world(tmp_path, roost_env, daemon_factory):
    """The OpenCode kit's isolated world (XDG folders, seeded config, the fake provider)
    shared with a roost daemon: the daemon and its workers see the same environment."""
    kit = OpenCodeKit(tmp_path, opencode_bin())
    keep = {key: roost_env[key] for key in ("PATH",) if key in roost_env}
    roost_env.update(kit.env)
    roost_env.update(keep)
    roost_env["ROOST_OPENCODE_BIN"] = kit.binary
    kit.roost_env = roost_env
    kit.daemon_factory = daemon_factory
    yield kit
    if kit.fake is not None:
        kit.fake.stop()
        assert not kit.fake.violations, kit.fake.violations


def start(world, scenario, **configure):
    """The fake (calling roost's tools by name), OpenCode's config, and a daemon."""
    fake = world.start_fake(scenario, servers=("pingsrv", "roost"))
    world.configure(**configure)
    world.roost_env.update({k: v for k, v in world.env.items() if k.startswith(("XDG_", "OPENCODE_"))})
    return fake, world.daemon_factory().start()


def opencode_processes(world):
    """Every live process of this test's OpenCode servers: those started with its data
    folder and a server password (the host sets one; the daemon and workers have none),
    so the server, its MCP servers and its tools' commands."""
    ours = proctools.with_environ("XDG_DATA_HOME", world.env["XDG_DATA_HOME"])
    return {p for p in ours if "OPENCODE_SERVER_PASSWORD" in proctools.environ(p[0])}


def roost(world, *args):
    return subprocess.run([roost_bin(), *args], env=world.roost_env, capture_output=True, text=True, timeout=60)


def test_a_job_runs_its_task_in_an_opencode_session_and_renders_in_roost_log(world):
    fake, daemon = start(world, {"default": {"steps": [{"say": "Done: {input}"}]}})
    started = roost(world, "start", "build the thing", "--host", "opencode", "--name", "builder", "--cwd", str(world.work), "--json")
    assert started.returncode == 0, started.stderr
    job = json.loads(started.stdout)["id"]
    row = daemon.wait_job(job, timeout=120)
    assert row["state"] == "done", row
    assert row["summary"] == "Done: build the thing"
    # roost's tools were listed, through `roost mcp` in job mode.
    [request] = [r for r in fake.requests() if not r["reply"].get("side")]
    assert {"roost_roost_send", "roost_roost_agents", "roost_roost_spawn"} <= {t["function"]["name"] for t in request["body"]["tools"]}
    log = roost(world, "log", job)
    assert log.returncode == 0, log.stderr
    assert "build the thing" in log.stdout and "Done: build the thing" in log.stdout
    # Usage: the fake reports 10 in, 5 out for each answer.
    usage = wait_until(lambda: daemon.job(job).get("usage"), 30, what="the job's usage")
    assert usage["tokens"] == 15
    # The server lives with the job's worker; stopping the job ends it and all it started.
    assert opencode_processes(world)
    stopped = roost(world, "stop", job)
    assert stopped.returncode == 0, stopped.stderr
    wait_until(lambda: not opencode_processes(world), 60, what="no process of the job's OpenCode")


def folder_state(folder):
    """Every path under ``folder`` with its kind and bytes (what a write would change)."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else "folder" for p in sorted(folder.rglob("*"))}


def test_a_job_never_installs_into_the_users_opencode_folder_yet_runs_with_its_config(world):
    """OpenCode npm-installs its plugin package into the folders it reads config from and,
    once any plugin is loaded (roost's is), waits for those installs: with no registry a
    job waited ~75 s for an install into the user's folder. The job's OpenCode reads the
    user's opencode.json (its provider and model are the only ones) through a config home
    of its own, and writes nothing into the user's folder; its shell commands still see
    the user's XDG_CONFIG_HOME."""
    seen = world.work / "xdg-config-home.txt"
    world.env["npm_config_registry"] = "http://127.0.0.1:9"  # no registry answers
    fake = world.start_fake({"default": {"steps": [{"shell": f"printf %s \"$XDG_CONFIG_HOME\" > {seen}"}, {"say": "used the user's model"}]}},
                            servers=("pingsrv", "roost"))
    world.configure(model="users-own-model", seed=False)
    world.roost_env.update({k: v for k, v in world.env.items() if k.startswith(("XDG_", "OPENCODE_", "npm_"))})
    daemon = world.daemon_factory().start()
    before = folder_state(world.config_dir)
    started = roost(world, "start", "go", "--host", "opencode", "--cwd", str(world.work), "--json")
    assert started.returncode == 0, started.stderr
    row = daemon.wait_job(json.loads(started.stdout)["id"], timeout=240)
    assert row["state"] == "done" and row["summary"] == "used the user's model", row
    assert {r["body"]["model"] for r in fake.requests() if not r["reply"].get("side")} == {"users-own-model"}
    assert seen.read_text() == world.env["XDG_CONFIG_HOME"]
    assert folder_state(world.config_dir) == before
    logs = "".join(path.read_text() for path in (world.data_dir / "log").glob("*.log"))
    assert f"dir={world.config_dir}" not in logs, [line for line in logs.splitlines() if "install" in line]


# ---------------------------------------------------------------------------- a parent's child

def asked_for(fake, path):
    """The fake's answer that ran the bash waiting for ``path`` has gone out."""
    return any(str(path) in json.dumps(r["reply"].get("tool") or "") for r in fake.requests())


def tool_messages(request):
    return [m["content"] for m in request["chat"] if m["role"] == "tool"]


def test_a_message_to_a_running_child_arrives_mid_turn_and_its_reports_reach_the_parent_once(world, tmp_path):
    gate = tmp_path / "gate"
    scenario = {
        "run": [{"steps": [{"agents": {}}, {"wait_for": str(gate)}, {"say": "Which colour, red or blue?"}]}],
        "default": {"steps": [{"say": "painted it {input}"}]},
    }
    fake, daemon = start(world, scenario)

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "paint the shed", "painter", host="opencode", cwd=str(world.work))
            await in_thread(wait_until, lambda: asked_for(fake, gate), 120, what="the child's bash waiting for the gate")
            ok, text, data = await send(lead, kid, "use the big brush")
            assert ok and data["result"] == "delivered", text
            assert daemon.received(kid, "use the big brush")["seen"] is None  # held until the tool ends
            gate.write_text("go")
            await lead.wait_for_delivery(1, timeout=120)
            ok, text, _ = await send(lead, kid, "blue")
            assert ok, text
            await lead.wait_for_delivery(2, timeout=120)
            await in_thread(daemon.wait_job, kid, timeout=60)
            # Seen (issue 42.4's receipt): the model call after each hand-over (the tool's
            # result, mid-turn; the prompt of the next turn) had it.
            for text in ("use the big brush", "blue"):
                receipt = await in_thread(daemon.wait_seen, kid, text)
                assert receipt["state"] == "seen" and receipt["seen"] >= receipt["created"], receipt
            return kid, list(lead.delivered)

    kid, delivered = run_async(story)
    requests = [r for r in fake.requests() if not r["reply"].get("side")]
    # roost_agents ran through the worker: the child sees its parent.
    assert "lead" in tool_messages(requests[1])[0] and "[parent]" in tool_messages(requests[1])[0]
    # Mid-turn: the message came with the result of the tool that was running, framed,
    # after roost's marker line, in the same turn (no new user message).
    waited = tool_messages(requests[2])[-1]
    assert "\n\n[roost seq " in waited and "use the big brush" in waited and AUTHORITY_LINE in waited
    assert [m for m in requests[2]["chat"] if m["role"] == "user"] == [m for m in requests[0]["chat"] if m["role"] == "user"]
    # Both reports reached the parent once, framed; the answer opened a turn of its own.
    assert [d["kind"] for d in delivered] == ["report", "report"]
    assert "Which colour, red or blue?" in delivered[0]["content"] and "painted it blue" in delivered[1]["content"]
    assert all(d["fromName"] == "painter" and AUTHORITY_LINE in d["content"] for d in delivered)
    assert requests[-1]["reply"]["text"].startswith("painted it") and "blue" in requests[-1]["reply"]["text"]
    # Every item once in what the model read last.
    everything = json.dumps(requests[-1]["chat"])
    assert everything.count("use the big brush") == 1 and everything.count("paint the shed") == 1
    assert daemon.job(kid)["pending"] == 0
    # OpenCode's store is what says which items it holds (the daemon reads it after a
    # worker dies): the task, the mid-turn message and the answer.
    record = daemon.record(kid)
    assert len(seqs_in_session(record["session"])) == 3
    # roost log: the conversation, the agent items as messages, no marker lines.
    shown = roost(world, "log", kid)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "› you: paint the shed"
    assert any("message from lead (parent)" in line for line in lines)
    assert "assistant: Which colour, red or blue?" in lines
    assert not any("[roost seq" in line for line in lines), lines


def test_a_worker_killed_mid_turn_does_not_hand_an_item_over_twice(world, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    scenario = {
        "run": [{"steps": [{"wait_for": str(first)}, {"wait_for": str(second), "timeout": 600}, {"say": "went on"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake, daemon = start(world, scenario)

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "slow work", "worker", host="opencode", cwd=str(world.work))
            await in_thread(wait_until, lambda: asked_for(fake, first), 120, what="the first gate")
            ok, text, _ = await send(lead, kid, "note this once")
            assert ok, text
            first.write_text("go")
            # The model read the message (in the first gate's result) and waits at the second.
            await in_thread(wait_until, lambda: asked_for(fake, second), 120, what="the second gate")
            worker = daemon.record(kid)["worker_pid"]
            before = opencode_processes(world)
            assert before
            os.kill(worker, signal.SIGKILL)
            # Nothing the killed worker's OpenCode ran outlives it.
            await in_thread(wait_until, lambda: not any(proctools.alive(p) for p in before), 60, what="the killed worker's OpenCode gone")
            await in_thread(wait_until, lambda: daemon.record(kid).get("worker_pid") != worker or daemon.job(kid)["state"] == "crashed", 60,
                            what="the killed worker seen")
            # The new worker's OpenCode goes on in the same session with the wake-up
            # message (OpenCode closes the interrupted tool call, or never stored it: then
            # the model waits at the second gate again, open by now).
            second.write_text("go")
            ok, text, _ = await send(lead, kid, "wake up")
            assert ok, text
            await in_thread(wait_until, lambda: any(r["reply"].get("text") == "went on" for r in fake.requests()), 120,
                            what="the answer to the wake-up message")
            await in_thread(daemon.wait_job, kid, timeout=60)
            return kid

    kid = run_async(story)
    last = [r for r in fake.requests() if not r["reply"].get("side")][-1]
    everything = json.dumps(last["chat"])
    assert everything.count("note this once") == 1 and everything.count("slow work") == 1
    assert everything.count("wake up") == 1
    assert daemon.job(kid)["pending"] == 0
    # roost log goes on past the turn the kill cut short (OpenCode never completes that
    # message): what it held as it stood, then everything after it. Whether the cut
    # turn's call at the second gate is in it depends on whether OpenCode had stored it
    # (it is called again after the wake-up when not), so only the turn before it and what
    # came after the kill are asked for.
    shown = roost(world, "log", kid)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    gate_one = next(n for n, line in enumerate(lines) if str(first) in line)
    wake = next((n for n, line in enumerate(lines) if "wake up" in line), None)
    assert wake is not None and wake > gate_one, lines
    assert any(str(second) in line for line in lines) and lines[-1] == "assistant: went on", lines


# ------------------------------------------------------------------ the user's own OpenCode


def install_env(world):
    """The user's environment: the kit's OpenCode world and the test daemon's home."""
    return {**world.env, "ROOST_HOME": world.roost_env["ROOST_HOME"], "ROOST_DISABLE_PLUGINS": world.roost_env["ROOST_DISABLE_PLUGINS"]}


def test_install_puts_roost_into_the_users_opencode_and_a_message_arrives_mid_turn(world, tmp_path, write_config):
    write_config({"agentExternalMessages": True})
    gate = tmp_path / "gate"
    scenario = {"run": [{"steps": [{"agents": {}}, {"wait_for": str(gate)}, {"say": "after the gate"}]}],
                "default": {"steps": [{"say": "ok: {input}"}]}}
    fake, daemon = start(world, scenario)
    env = install_env(world)
    installed = subprocess.run([roost_bin(), "opencode", "install"], env=env, capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stderr
    proc = subprocess.Popen([world.binary, "run", "--format", "json"], cwd=world.work, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        proc.stdin.write("please start")
        proc.stdin.close()

        async def story():
            async with session(daemon, tmp_path) as lead:
                await in_thread(wait_until, lambda: asked_for(fake, gate), 120, what="the user's OpenCode at the gate")
                # The session joined on its first roost tool call (roost_agents).
                peer = {row["name"]: row for row in daemon.call("agents")["agents"]}["work"]
                assert peer["host"] == "opencode"
                ok, text, data = await send(lead, peer["id"], "the build is green")
                assert ok and data["result"] == "delivered", text
                gate.write_text("go")
                await in_thread(proc.wait, 120)

        run_async(story)
        out = proc.stdout.read()
        assert proc.returncode == 0, proc.stderr.read()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "after the gate" in out
    # Mid-turn, in the result of the tool that was running, framed, after the marker line.
    requests = [r for r in fake.requests() if not r["reply"].get("side")]
    waited = tool_messages(requests[-1])[-1]
    assert "[roost seq " in waited and "the build is green" in waited and AUTHORITY_LINE in waited
    assert json.dumps(requests[-1]["chat"]).count("the build is green") == 1


def test_install_and_uninstall_keep_the_users_own_config(tmp_path):
    config_home = tmp_path / "config"
    folder = config_home / "opencode"
    (folder / "plugins").mkdir(parents=True)
    theirs = {"model": "mine/model", "mcp": {"github": {"type": "remote", "url": "https://example.invalid/mcp"}}, "plugin": ["their-plugin"]}
    (folder / "opencode.json").write_text(json.dumps(theirs))
    (folder / "plugins" / "theirs.js").write_text("export const Theirs = async () => ({});\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(config_home)}

    def roost_opencode(action):
        result = subprocess.run([roost_bin(), "opencode", action, "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    assert roost_opencode("install")["changed"] is True
    config = json.loads((folder / "opencode.json").read_text())
    assert config["model"] == "mine/model" and config["plugin"] == ["their-plugin"]
    assert set(config["mcp"]) == {"github", "roost"} and config["mcp"]["roost"]["command"][-1] == "mcp"
    assert config["mcp"]["roost"]["environment"] == {"ROOST_MCP_HOST": "opencode"}
    plugin = (folder / "plugins" / "roost.js").read_text()
    assert '"opencode", "hook", "PostToolUse"]' in plugin
    # Again: nothing changes.
    assert roost_opencode("install")["changed"] is False
    assert roost_opencode("uninstall")["changed"] is True
    assert json.loads((folder / "opencode.json").read_text()) == theirs
    assert sorted(p.name for p in (folder / "plugins").iterdir()) == ["theirs.js"]
    assert roost_opencode("uninstall")["changed"] is False
    # A broken config stops install before anything is written, naming the file and line.
    (folder / "opencode.json").write_text('{"model": \n')
    broken = subprocess.run([roost_bin(), "opencode", "install"], env=env, capture_output=True, text=True, timeout=60)
    assert broken.returncode == 1 and broken.stderr.startswith(f"roost: bad_config: {folder / 'opencode.json'}:")
    assert not (folder / "plugins" / "roost.js").exists()


@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_a_permission_opencode_asks_in_a_job_is_a_dialog_the_user_answers(world, tmp_path, answer):
    """OpenCode's ``permission.asked`` (its config says ``ask`` for bash) reaches the user
    as a roost dialog; ``roost answer`` allows the command once or refuses it."""
    made = tmp_path / "made.txt"
    _fake, daemon = start(world, {"default": {"steps": [{"shell": f"echo ran > {made}; echo two"}, {"say": "finished"}]}}, permission={"*": "allow", "bash": "ask"})
    job = daemon.start_job("make the file", host="opencode", cwd=str(world.work))
    wait_until(lambda: daemon.job(job)["dialog"], 120, what="the permission dialog")
    row = daemon.job(job)
    # The command as it runs, with its ; (not its parts joined with a comma).
    assert row["question"] == f"OpenCode asks to use bash: echo ran > {made}; echo two" and row["dialogOptions"] == ["allow", "deny"], row
    assert not made.exists()  # nothing runs before the user says so
    answered = roost(world, "answer", job, answer)
    assert answered.returncode == 0, answered.stderr
    row = daemon.wait_job(job, "done", timeout=120)
    assert not row["dialog"] and row["pending"] == 0, row
    assert made.exists() == (answer == "allow")
    if answer == "deny":
        # Not an empty summary: it says the user denied it.
        assert row["summary"] == f"the user denied OpenCode's request to use bash: echo ran > {made}; echo two; the turn ended there", row
