"""The command host in a real daemon, used as roost's own hosts are: ``roost start --host
command``, ``roost log``, ``roost view`` (in a tmux terminal), its own ``roost command``
command, and ``roost_spawn``'s ``host`` from a scripted agent. Blocked, it is no host.

Runs from the roost checkout (``scripts/test.sh``): the daemon fixtures come from roost's
``tests/conftest.py``, the CLI runner and the terminal from ``tests/system``, all on
pytest's ``pythonpath``.
"""

from __future__ import annotations

import json

import test_view as view_kit
from clikit import Cli
from conftest import BLOCKED_BY_DEFAULT, daemon_factory, roost_env, wait_until, write_config  # noqa: F401 - fixtures

NAME = "command-host"
OTHERS_BLOCKED = ",".join(name for name in BLOCKED_BY_DEFAULT.split(",") if name != NAME)
#: The plugin on, and the program it runs: the turn's text, upper-cased.
ENABLED = {"ROOST_DISABLE_PLUGINS": OTHERS_BLOCKED, "ROOST_COMMAND": "tr a-z A-Z"}


def job_named(daemon, name: str) -> dict:
    return wait_until(lambda: next((row for row in daemon.call("jobs")["jobs"] if row["name"] == name), None), what=f"job {name}")


def test_start_log_and_its_own_command_through_the_cli(daemon_factory, tmp_path):
    daemon = daemon_factory(**ENABLED).start()
    cli = Cli(daemon.env, tmp_path)
    started = cli.json("start", "shout this", "--name", "shouter", "--host", "command")
    assert started["host"] == "command"
    daemon.wait_job(started["id"], "done")
    assert job_named(daemon, "shouter")["host"] == "command"
    # roost log reads the transcript with the host's own reader.
    log = cli("log", "shouter").stdout
    assert "› you: shout this" in log, log
    assert "assistant: SHOUT THIS" in log, log
    assert "command-in" not in log and "command-out" not in log
    # A reply is the next turn.
    cli("reply", "shouter", "and this")
    wait_until(lambda: "assistant: AND THIS" in cli("log", "shouter").stdout, what="the second answer in roost log")
    # The host's command, wired from its HostSpec.
    assert cli("command", "check").stdout.strip() == "tr a-z A-Z"
    assert "command" in cli("--help").stdout


def test_a_scripted_agent_spawns_a_child_on_the_command_host(daemon_factory, write_config, tmp_path):
    # The user lets agents choose two hosts; only the one a plugin registers is offered.
    write_config({"agentSpawnHosts": ["command", "nowhere"]})
    daemon = daemon_factory(**ENABLED).start()
    (spawn,) = [tool for tool in daemon.call("tools")["tools"] if tool["name"] == "roost_spawn"]
    assert spawn["parameters"]["properties"]["host"]["enum"] == ["command"]
    scenario = {
        "run": [{"match": "^lead", "steps": [{"spawn": {"task": "kid work", "name": "kid", "host": "command"}}, {"say": "spawned"}]}],
        "default": {"steps": [{"say": "got: {input}"}]},
    }
    lead = daemon.start_job("lead the work", name="lead", scenario=scenario)
    kid = job_named(daemon, "kid")
    assert kid["host"] == "command"
    daemon.wait_job(kid["id"], "done")
    # The child's answer came back to its parent as its report.
    wait_until(lambda: "KID WORK" in json.dumps(daemon.entries(lead)), what="the kid's report in the lead's transcript")
    daemon.wait_job(lead, "idle", "done")


@view_kit.needs_tmux
def test_the_view_shows_its_transcript(daemon_factory, tmp_path):
    daemon = daemon_factory(**ENABLED).start()
    job = daemon.start_job("look at me", name="looker", host="command")
    daemon.wait_job(job, "done")
    terminal = view_kit.Terminal(tmp_path, daemon.env)
    try:
        terminal.start_view()
        terminal.wait_for(lambda s: " done " in view_kit.line_of(s, "looker"), "the job on screen")
        terminal.keys("Enter")
        screen = terminal.wait_for(lambda s: "assistant: LOOK AT ME" in s, "its transcript, read by the host's reader")
        assert screen.splitlines()[0].startswith(f"transcript · looker ({job})")
        terminal.keys("q")
    finally:
        terminal.close()


def test_blocked_it_is_no_host(daemon_factory, tmp_path):
    daemon = daemon_factory(ROOST_COMMAND="tr a-z A-Z").start()  # roost_env blocks every example plugin
    cli = Cli(daemon.env, tmp_path)
    refused = cli("start", "x", "--host", "command", expect=1)
    assert refused.stderr.startswith("roost: bad_args: start: unknown host 'command'"), refused.stderr
    # Nor is its command there.
    assert "roost: bad_args: argument COMMAND: invalid choice: 'command'" in cli("command", "check", expect=2).stderr
