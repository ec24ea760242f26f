"""The user config edited while the daemon runs (issue 49, B1), through the real ``roost``
command: a good edit is in force at the next command, with no restart; a bad one is
refused ``bad_config`` naming file, line and column, and the config read before stays in
force, for the daemon and for the workers it starts (which never read the file)."""

from __future__ import annotations

import json
import re

import pytest
from clikit import Cli

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def run(roost_env, tmp_path):
    return Cli(roost_env, tmp_path)


def started(result) -> str:
    match = re.match(r"started job ([0-9a-f]{8}) ", result.stdout)
    assert match, result.stdout
    return match[1]


def test_a_good_edit_is_in_force_without_a_restart(daemon, write_config, run):
    write_config({"defaultHost": "scripted"})
    pid = daemon.call("daemon_status")["pid"]
    job = started(run("start", "echo configured"))
    assert daemon.wait_job(job)["host"] == "scripted"
    write_config({"defaultHost": "shell"})
    job = started(run("start", "echo configured"))
    row = daemon.wait_job(job, "done")
    assert (row["host"], row["summary"]) == ("shell", "configured")
    assert run("daemon", "reload").stdout == f"config {daemon.paths.config_file} in force\n"
    assert daemon.call("daemon_status")["pid"] == pid


def test_a_bad_edit_is_refused_and_the_last_good_config_stays_in_force(daemon_factory, write_config, run):
    """The issue's case: ``agentTreeTokens: "lots"`` written while the daemon runs. A new
    shell job runs (on the last good config: its ``defaultHost``), not a worker that
    crashes until it is given up; status and reload say the file is refused, where and why."""
    config = write_config({"defaultHost": "shell"})
    daemon = daemon_factory().start()
    job = started(run("start", "echo before"))
    assert daemon.wait_job(job, "done")["summary"] == "before"
    text = json.dumps({"defaultHost": "scripted", "agentTreeTokens": "lots"})
    config.write_text(text)
    column = text.index('"agentTreeTokens"') + 1
    why = f"{config}: line 1, column {column}: agentTreeTokens must be a non-negative number"
    named = started(run("start", "echo named", "--host", "shell"))
    unnamed = started(run("start", "echo unnamed"))
    for job, said in ((named, "named"), (unnamed, "unnamed")):
        row = daemon.wait_job(job)
        assert (row["host"], row["state"], row["summary"], row["error"]) == ("shell", "done", said, None), row
    status = run("daemon", "status")
    assert f"\nconfig refused (the config read before stays in force): {why}\n" in status.stdout, status.stdout
    assert run.json("daemon", "status")["config"] == {"file": str(config), "refused": why, "atNextStart": []}
    reload = run("daemon", "reload", expect=1)
    assert reload.stderr == f"roost: bad_config: {why} (the config read before stays in force)\n", reload.stderr
    # Mended: in force again (its defaultHost now scripted).
    config.write_text(json.dumps({"defaultHost": "scripted"}))
    assert run("daemon", "reload").stdout == f"config {config} in force\n"
    job = started(run("start", "echo mended"))
    assert daemon.wait_job(job)["host"] == "scripted"


def test_a_changed_plugin_set_waits_for_the_next_start_and_says_so(daemon, write_config, run):
    write_config({"plugins": {"disable": ["settle"]}})
    config = run.json("daemon", "reload")
    assert config["atNextStart"] == ["plugins.disable"] and config["refused"] is None
    assert "settle" in {plugin["name"] for plugin in daemon.call("plugins")["plugins"]}
    assert run("daemon", "status").stdout.endswith("\nconfig: plugins.disable changed; in force at the next daemon start\n")
