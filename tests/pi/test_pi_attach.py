"""``roost attach`` with the pinned real pi in a real terminal (tmux), issue 51 part 1.

A pi child of a foreground lead settles; the user attaches it (interactive pi on the job's
session file, in tmux): the whole conversation is on screen, ``roost agents`` says it is
attached, and it is still the same peer. The lead's message reaches it mid-session and the
run it starts reports to the lead, as the background job's would; the user types a prompt;
Ctrl+D detaches; the lead's next message wakes the job as before. Nothing is lost or
doubled across attach and detach: the session file holds each item once, every receipt
is acknowledged, the lead has one report per run.
"""

from __future__ import annotations

import json

from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn
from pikit import agent_items, message_text, user_messages

SCENARIO = {"default": {"steps": [{"say": "noted: {input}"}]}}


def attach_command(pi_kit, job: str, *extra: str) -> list[str]:
    """``roost attach JOB`` in a shell that stays after it exits (its status on screen)."""
    roost = pi_kit.env["ROOST_BIN"]
    return ["bash", "-c", f"{roost} attach {' '.join(extra)} {job}; echo ATTACH-EXIT=$?; read"]


def attached(daemon, job: str) -> dict | None:
    row = daemon.job(job)
    return row["attached"] if row["attached"] and row["attached"]["connected"] else None


def test_attach_a_pi_job_in_a_terminal_message_type_detach_and_wake(pi_kit, tmp_path):
    pi_kit.fake(SCENARIO)
    daemon = pi_kit.daemon()
    pi_kit.require_socket_command()
    workdir = tmp_path / "work"
    workdir.mkdir()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first task", "kid", host="pi", cwd=str(workdir))
            await lead.wait_for_delivery(1, timeout=90)
            await in_thread(daemon.wait_job, kid, timeout=60)

            screen = pi_kit.tmux_start("attach", attach_command(pi_kit, kid), workdir)
            # The whole conversation is there: the task and the answer the job gave.
            await in_thread(pi_kit.wait_screen, screen, "noted: first task", 90)
            await in_thread(wait_until, lambda: attached(daemon, kid), 60, what="the attached pi registered as the job")
            agents = pi_kit.roost("agents").stdout
            assert "kid" in agents and "attached" in agents, agents
            # The job's worker let go of the session: none runs while it is attached.
            assert daemon.job(kid)["workerPid"] is None

            # An agent's message reaches the attached session as the same peer; its run
            # reports to the lead as the background job's would.
            ok, text, data = await send(lead, kid, "hello while attached")
            assert ok and data["result"] == "delivered", text
            await in_thread(pi_kit.wait_screen, screen, "noted: hello while attached", 90)
            await lead.wait_for_delivery(2, timeout=90)

            # The user types as the user.
            await in_thread(pi_kit.type_line, screen, "typed by the user")
            await in_thread(pi_kit.wait_screen, screen, "noted: typed by the user", 90)

            # A second attach is refused, naming who holds it.
            second = pi_kit.roost("attach", kid, check=False)
            assert second.returncode == 1 and "attached_elsewhere" in second.stderr and "pid" in second.stderr, second.stderr

            # Detach: Ctrl+D on pi's empty editor; the job is back in the background.
            await in_thread(pi_kit.tmux_keys, screen, "C-d")
            await in_thread(pi_kit.wait_screen, screen, "ATTACH-EXIT=0", 60)
            assert daemon.job(kid)["attached"] is None

            # A message after detach wakes the job as before.
            ok, text, data = await send(lead, kid, "hello after detach")
            assert ok and data["result"] in ("started", "queued", "delivered"), text
            await lead.wait_for_delivery(3, timeout=90)
            await in_thread(daemon.wait_job, kid, timeout=60)
            reports = [e for e in lead.delivered if e["kind"] == "report"]
            return kid, reports

    kid, reports = run_async(story)
    # One report per run that an agent caused (the task, the two messages); none twice.
    assert len(reports) == 3
    assert ["noted: first task" in r["content"] for r in reports] == [True, False, False]
    assert "noted: hello while attached" in reports[1]["content"]
    assert "noted: hello after detach" in reports[2]["content"]
    # The session file: each item once, the typed prompt once, one header.
    entries = daemon.entries(kid)
    assert sum(1 for e in entries if e.get("type") == "session") == 1
    items = agent_items(entries)
    assert [i["content"].count("hello while attached") for i in items] == [1, 0]
    assert [i["content"].count("hello after detach") for i in items] == [0, 1]
    assert [i["details"]["seq"] for i in items] == sorted({i["details"]["seq"] for i in items})
    texts = [message_text(e["message"]) for e in user_messages(entries)]
    assert sum("first task" in t for t in texts) == 1 and sum("typed by the user" in t for t in texts) == 1
    # Every receipt of the lead's messages says the job took it (acknowledged, or further).
    log = json.loads(pi_kit.roost("log", "--json", kid).stdout)
    states = {r["preview"]: r["state"] for r in log["received"]}
    assert set(states) >= {"hello while attached", "hello after detach"}, states
    assert all(state in ("acknowledged", "seen", "answered") for state in states.values()), states


def test_attach_refuses_a_host_with_no_interactive_interface(pi_kit, tmp_path):
    daemon = pi_kit.daemon()
    started = pi_kit.roost("start", "echo hi", "--host", "shell", "--name", "sh", "--json")
    job = json.loads(started.stdout)["id"]
    daemon.wait_job(job, timeout=60)
    refused = pi_kit.roost("attach", job, check=False)
    assert refused.returncode == 1 and "roost: not_attachable:" in refused.stderr, refused.stderr
    assert daemon.job(job)["attached"] is None

