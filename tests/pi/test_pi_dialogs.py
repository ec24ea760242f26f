"""A background pi child's dialog reaches a person: ``roost jobs`` and ``roost agents`` show
its text and options, ``roost answer`` resolves it (a bad answer gets its code), and the
child's run goes on and reports. An agent's message never answers it."""

from __future__ import annotations

import json

from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn
from pikit import KIT, agent_items, message_text


def test_a_confirm_dialog_shows_in_jobs_and_agents_and_roost_answer_resolves_it(pi_kit, tmp_path):
    pi_kit.env["ROOST_PI_ARGS"] = f"-e {KIT / 'confirm-tool.ts'}"
    fake = pi_kit.fake(
        {
            "run": [{"steps": [{"dialog": "Deploy to prod?"}, {"say": "deploy step done"}]}],
            "default": {"steps": [{"say": "ok: {input}"}]},
        }
    )
    daemon = pi_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "deploy it", "deployer", host="pi")
            await in_thread(wait_until, lambda: daemon.job(kid)["dialog"], 60, what="the dialog")

            # Where a person looks: the dialog's text, its options and the command.
            jobs = pi_kit.roost("jobs").stdout
            line = next(line for line in jobs.splitlines() if kid in line)
            assert "Confirm — Deploy to prod? [yes / no]" in line and f"roost answer {kid}" in line, jobs
            agents = pi_kit.roost("agents").stdout
            assert "Confirm — Deploy to prod? [yes / no]" in agents and f"roost answer {kid}" in agents, agents
            row = next(r for r in json.loads(pi_kit.roost("jobs", "--json").stdout) if r["id"] == kid)
            assert row["dialogOptions"] == ["yes", "no"]
            shown = pi_kit.roost("answer", kid).stdout
            assert "Deploy to prod?" in shown and "1) yes  2) no" in shown, shown

            # An agent cannot answer it: its "yes" waits, the dialog stays open.
            _ok, text, data = await send(lead, kid, "yes")
            assert data["waiting"] == "waiting on a dialog", text
            assert daemon.job(kid)["dialog"]

            # A bad answer gets its code and changes nothing; so do a job that is not there.
            bad = pi_kit.roost("answer", kid, "maybe", check=False)
            assert bad.returncode == 1 and bad.stderr.startswith("roost: not_an_option:"), bad.stderr
            assert "1) yes  2) no" in bad.stderr
            missing = pi_kit.roost("answer", "no-such-job", "yes", check=False)
            assert missing.returncode == 1 and missing.stderr.startswith("roost: not_found:"), missing.stderr
            assert daemon.job(kid)["dialog"]

            answered = pi_kit.roost("answer", kid, "1")  # its number names the option
            assert "answered 'yes'" in answered.stdout, answered.stdout
            # Answered once: a second answer finds no dialog open.
            again = pi_kit.roost("answer", kid, "no", check=False)
            assert again.returncode == 1 and again.stderr.startswith("roost: no_dialog:"), again.stderr

            row = await in_thread(daemon.wait_job, kid, "done", timeout=60)
            assert not row["dialog"] and row["dialogOptions"] is None, row
            # The child went on after the answer and reported to its parent.
            await in_thread(wait_until, lambda: any(d.get("kind") == "report" for d in lead.delivered), 60, what="the report")
            return kid

    kid = run_async(story)
    entries = daemon.entries(kid)
    results = [e["message"] for e in entries if e.get("type") == "message" and e["message"]["role"] == "toolResult"]
    assert [message_text(r) for r in results if r["toolName"] == "confirm"] == ["confirmed"]
    # The model saw the answer's result, then the agent's "yes" only as an agent message.
    assert any("confirmed" in json.dumps(r["messages"]) for r in fake.requests())
    assert [i["details"]["kind"] for i in agent_items(entries)] == ["message"]


def test_the_foreground_pi_parent_footer_says_a_child_waits_for_the_user(pi_kit, write_config, tmp_path):
    write_config({"defaultHost": "pi"})
    pi_kit.env["ROOST_PI_ARGS"] = f"-e {KIT / 'confirm-tool.ts'}"  # the children's pi
    pi_kit.fake(
        {
            "run": [
                {"kind": "reply", "steps": [{"spawn": {"task": "deploy it", "name": "deployer", "model": "kid"}}, {"say": "spawned the deployer"}]},
                {"kind": "report", "steps": [{"say": "thanks, deployer"}]},
            ],
            "default": {"steps": [{"say": "ok"}]},
            "models": {"kid": {"default": {"steps": [{"dialog": "Deploy to prod?"}, {"say": "deployed"}]}}},
        }
    )
    daemon = pi_kit.daemon()
    pi_kit.require_socket_command()
    pi_kit.roost("pi", "install")
    work = tmp_path / "work"
    work.mkdir()
    tmux = pi_kit.tmux_start("fg", [pi_kit.pi, "--session", str(tmp_path / "fg" / "main.jsonl")], cwd=work, width=220)
    pi_kit.wait_screen(tmux, "✉ roost")
    pi_kit.type_line(tmux, "please deploy through a child")

    screen = pi_kit.wait_screen(tmux, "deployer waits for you", timeout=60)
    (kid,) = [row["id"] for row in daemon.call("jobs")["jobs"] if row["name"] == "deployer"]
    assert f"Confirm — Deploy to prod? [yes / no] — /roost-answer, or roost answer {kid} CHOICE" in screen, screen
    # The user answers in this pi: /roost-answer opens pi's own select with the options.
    pi_kit.type_line(tmux, "/roost-answer")
    pi_kit.wait_screen(tmux, "deployer asks: Confirm — Deploy to prod?", timeout=30)
    pi_kit.tmux_keys(tmux, "Enter")  # the first option, yes
    screen = pi_kit.wait_screen(tmux, "thanks, deployer", timeout=60)
    assert "waits for you" not in screen  # answered: the footer no longer asks
    assert daemon.job(kid)["state"] == "done"
    entries = daemon.entries(kid)
    results = [e["message"] for e in entries if e.get("type") == "message" and e["message"]["role"] == "toolResult"]
    assert [message_text(r) for r in results if r["toolName"] == "confirm"] == ["confirmed"]


def test_a_select_dialog_takes_one_of_its_options_and_pi_gets_it_as_it_listed_it(pi_kit):
    pi_kit.env["ROOST_PI_ARGS"] = f"-e {KIT / 'choose-tool.ts'}"
    # An option with a double space: roost shows it on one line ("Postgres 16"), pi gets its own.
    options = ["Postgres  16", "sqlite"]
    pi_kit.fake({"default": {"steps": [{"tool": "choose", "args": {"question": "Which db?", "options": options}}, {"say": "chose"}]}})
    daemon = pi_kit.daemon()
    job = daemon.start_job("pick a db", host="pi", name="picker")
    wait_until(lambda: daemon.job(job)["dialog"], timeout=60, what="the select dialog")
    row = daemon.job(job)
    assert row["question"] == "Which db?" and row["dialogOptions"] == ["Postgres 16", "sqlite"], row
    bad = pi_kit.roost("answer", job, "mysql", check=False)
    assert bad.returncode == 1 and bad.stderr.startswith("roost: not_an_option:") and "1) Postgres 16  2) sqlite" in bad.stderr
    assert "answered 'Postgres 16'" in pi_kit.roost("answer", job, "postgres 16").stdout
    assert daemon.wait_job(job, "done", timeout=60)["summary"] == "chose"
    results = [e["message"] for e in daemon.entries(job) if e.get("type") == "message" and e["message"]["role"] == "toolResult"]
    assert [message_text(r) for r in results if r["toolName"] == "choose"] == ["picked <Postgres  16>"]
