"""``roost plugins`` as a real subprocess: the table, blocked names (flag, env, config),
installed plugins that fail to load (skipped and named, or fatal when strict), and the
daemon's own set: what ``roost plugins`` shows when one runs, and that ``--disable-plugin``
on a command never changes it."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from roost_core.plugins import DEFAULT_PLUGINS

CLI = [sys.executable, "-m", "roost_core.cli"]


def roost(env: dict[str, str], *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    result = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == expect, (args, result.stdout, result.stderr)
    return result


def fake_dist(root: Path, dist: str, name: str, source: str) -> dict[str, str]:
    """A distribution on its own path entry with one ``roost`` entry point; returns env extras."""
    root.mkdir(parents=True)
    module = f"roosttest_cli_{name.replace('-', '_')}"
    (root / f"{module}.py").write_text(source)
    info = root / f"{dist.replace('-', '_')}-0.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.9\n")
    (info / "entry_points.txt").write_text(f"[roost]\n{name} = {module}\n")
    return {"PYTHONPATH": str(root)}


def test_the_table_has_name_version_source_and_hooks(roost_env):
    text = roost(roost_env, "plugins").stdout
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "VERSION", "SOURCE", "HOOKS"]
    rows = {line.split()[0]: line for line in lines[1:] if not line.startswith("blocked:")}
    assert set(DEFAULT_PLUGINS) <= set(rows)
    version = metadata.version("roost")
    assert rows["reach"].split() == ["reach", version, "roost", "(default)", "roost_decide_reach"]
    assert rows["handback"].endswith("roost_decide_report, roost_format_report, roost_report_on_end, roost_route_report")
    # The columns line up: every source starts where the header's SOURCE does.
    column = lines[0].index("SOURCE")
    assert all(line[column:].startswith("roost (default)") for name, line in rows.items() if name in DEFAULT_PLUGINS)


def test_json_lists_every_plugin_and_the_blocked_names(roost_env):
    data = json.loads(roost(roost_env, "plugins", "--json").stdout)
    rows = {row["name"]: row for row in data["plugins"]}
    assert rows["envelope"] == {"name": "envelope", "version": metadata.version("roost"), "source": "roost (default)", "hooks": ["roost_frame_item", "roost_sanitize_name"]}
    assert set(data) == {"plugins", "blocked", "unknown_blocked", "notes", "daemon", "differs"}
    assert data["daemon"] is None and data["differs"] == []
    # roost_env blocks the example plugins, so this is the default set: nothing to note.
    assert data["notes"] == []
    assert "not the default set" not in roost(roost_env, "plugins").stdout


def test_blocked_by_flag_env_and_config_with_unknown_names_called_out(roost_env):
    (Path(roost_env["ROOST_HOME"]) / "roost.json").write_text(json.dumps({"plugins": {"disable": ["render"]}}))
    env = {**roost_env, "ROOST_DISABLE_PLUGINS": "limits"}
    result = roost(env, "--disable-plugin", "envelope", "--disable-plugin", "envelop", "plugins")
    (blocked,) = [line for line in result.stdout.splitlines() if line.startswith("blocked: ")]
    assert blocked == "blocked: envelop (no such plugin), envelope, limits, render"
    data = json.loads(roost(env, "--disable-plugin", "envelop", "plugins", "--json").stdout)
    assert data["blocked"] == ["envelop", "limits", "render"] and data["unknown_blocked"] == ["envelop"]
    assert not {"limits", "render"} & {row["name"] for row in data["plugins"]}


def test_an_installed_plugin_with_its_distribution(roost_env, tmp_path):
    env = {**roost_env, **fake_dist(tmp_path / "site", "acme-roost", "acme", "from roost_core import hookimpl\n\n@hookimpl\ndef roost_format_report(report):\n    return 'acme'\n")}
    data = json.loads(roost(env, "plugins", "--json").stdout)
    (row,) = [row for row in data["plugins"] if row["name"] == "acme"]
    assert row == {"name": "acme", "version": "0.9", "source": "acme-roost", "hooks": ["roost_format_report"]}


@pytest.mark.parametrize("source", ["import roost_no_such_module\n", "from roost_core import hookimpl\n\n@hookimpl\ndef roost_frame_itme(item):\n    return 'x'\n"], ids=["import error", "misspelled hook"])
def test_a_broken_plugin_is_skipped_with_a_warning_or_fatal_when_strict(roost_env, tmp_path, source):
    env = {**roost_env, **fake_dist(tmp_path / "site", "acme-broken", "acme", source)}
    result = roost(env, "plugins", "--json")
    assert "acme" not in {row["name"] for row in json.loads(result.stdout)["plugins"]}
    assert "skipping plugin 'acme' from acme-broken" in result.stderr
    strict = roost({**env, "ROOST_STRICT_PLUGINS": "1"}, "plugins", expect=1)
    assert strict.stderr.startswith("roost: plugin_error: plugin 'acme' from acme-broken failed to load")
    assert "Traceback" not in strict.stderr


#: A third-party plugin that changes nothing: it defers every name to the defaults.
DEFERRING = "from roost_core import hookimpl\n\n@hookimpl\ndef roost_sanitize_name(name):\n    return None\n"


def test_a_third_party_plugin_is_called_out_with_its_origin_and_how_to_block_it(roost_env, tmp_path):
    site = tmp_path / "site"
    env = {**roost_env, **fake_dist(site, "acme-roost", "acme", DEFERRING)}
    config = Path(roost_env["ROOST_HOME"]) / "roost.json"
    text = roost(env, "plugins").stdout
    notes = text.split("\n\nnot the default set:\n")[1].splitlines()
    assert notes == [
        f"- plugin 'acme' (not a default) is active: from the package acme-roost 0.9, installed in {site}. "
        f'Block it with `roost --disable-plugin acme ...` or ROOST_DISABLE_PLUGINS=acme, or "plugins": {{"disable": ["acme"]}} in {config}.'
    ]
    assert json.loads(roost(env, "plugins", "--json").stdout)["notes"] == [notes[0][2:]]
    # Each way the note names works, and then there is nothing left to note.
    assert "not the default set" not in roost(env, "--disable-plugin", "acme", "plugins").stdout
    assert json.loads(roost({**env, "ROOST_DISABLE_PLUGINS": env["ROOST_DISABLE_PLUGINS"] + ",acme"}, "plugins", "--json").stdout)["notes"] == []
    config.write_text(json.dumps({"plugins": {"disable": ["acme"]}}))
    assert json.loads(roost(env, "plugins", "--json").stdout)["notes"] == []


def test_a_blocked_default_plugin_is_called_out_with_what_blocks_it(roost_env):
    config = Path(roost_env["ROOST_HOME"]) / "roost.json"
    config.write_text(json.dumps({"plugins": {"disable": ["render"]}}))
    env = {**roost_env, "ROOST_DISABLE_PLUGINS": roost_env["ROOST_DISABLE_PLUGINS"] + ",limits"}
    notes = json.loads(roost(env, "plugins", "--json").stdout)["notes"]
    assert notes == [
        "default plugin 'limits' is blocked (by --disable-plugin or ROOST_DISABLE_PLUGINS): the core does the neutral thing for its hooks.",
        f'default plugin \'render\' is blocked (by "plugins": {{"disable": [...]}} in {config}): the core does the neutral thing for its hooks.',
    ]


def test_roost_demo_says_when_its_plugins_are_not_the_default_set(roost_env, tmp_path):
    # The demo makes a home of its own: only the environment carries over, as for a user.
    env = {key: value for key, value in roost_env.items() if key != "ROOST_HOME"}
    site = tmp_path / "site"
    env.update(fake_dist(site, "acme-roost", "acme", DEFERRING))
    result = subprocess.run([*CLI, "demo"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[1:3] == [
        "note: this demo runs with a plugin set that is not roost's default, so what it prints may differ from the README:",
        f"- plugin 'acme' (not a default) is active: from the package acme-roost 0.9, installed in {site}. "
        "Block it with `roost --disable-plugin acme ...` or ROOST_DISABLE_PLUGINS=acme.",
    ]
    assert "== done: the demo ran end to end" in result.stdout


def rows_of(data: dict) -> set[str]:
    return {row["name"] for row in data["plugins"]}


def test_with_no_daemon_it_shows_its_own_set_and_starts_nothing(roost_env):
    data = json.loads(roost(roost_env, "--disable-plugin", "limits", "plugins", "--json").stdout)
    assert data["daemon"] is None and "limits" in data["blocked"]
    assert "(no daemon is running: this command's own set" in roost(roost_env, "plugins").stdout
    assert roost(roost_env, "daemon", "status", expect=1).stdout == "not running\n"


def test_a_flag_on_a_command_that_starts_the_daemon_does_not_reach_it(roost_env):
    # Issue 40: `roost --disable-plugin limits jobs` on a home with no daemon used to start
    # one with limits blocked for its whole life, while `roost plugins` listed it loaded.
    try:
        started = roost(roost_env, "--disable-plugin", "limits", "jobs")
        assert "roost: warning: --disable-plugin limits blocks it in this command only" in started.stderr
        data = json.loads(roost(roost_env, "plugins", "--json").stdout)
        pid = json.loads(roost(roost_env, "daemon", "status", "--json").stdout)["pid"]
        assert data["daemon"] == pid
        assert "limits" in rows_of(data) and "limits" not in data["blocked"]
        # The flag on `roost plugins` changes this command's set, not what is shown as the
        # daemon's, and says how the two differ.
        flagged = roost(roost_env, "--disable-plugin", "limits", "plugins")
        text = flagged.stdout
        assert f"(the set the daemon, pid {pid}, runs)" in text
        assert "limits" in {line.split()[0] for line in text.splitlines()[1:] if line and not line.startswith(("(", "-", "blocked"))}
        flagged_data = json.loads(roost(roost_env, "--disable-plugin", "limits", "plugins", "--json").stdout)
        assert "limits" in rows_of(flagged_data)
        assert flagged_data["differs"] == [
            "the daemon runs 'limits'; this command does not (blocked here by --disable-plugin or ROOST_DISABLE_PLUGINS, which change "
            "this command only). To block it in the daemon: `roost daemon stop`, then `roost --disable-plugin limits daemon`, "
            'or "plugins": {"disable": ["limits"]} in the config.'
        ]
        assert "this command's own set differs" in text
    finally:
        roost(roost_env, "daemon", "stop")


def test_a_daemon_started_with_the_flag_shows_it_blocked(daemon_factory):
    handle = daemon_factory().start("--disable-plugin", "limits")
    data = json.loads(roost(handle.env, "plugins", "--json").stdout)
    assert data["daemon"] == handle.process.pid
    assert "limits" in data["blocked"] and "limits" not in rows_of(data)
    assert any(note.startswith("default plugin 'limits' is blocked") for note in data["notes"])
    # The same flag on a command now agrees with the daemon: no warning, no difference.
    quiet = roost(handle.env, "--disable-plugin", "limits", "jobs")
    assert "warning" not in quiet.stderr
    assert json.loads(roost(handle.env, "--disable-plugin", "limits", "plugins", "--json").stdout)["differs"] == []
    # Without the flag this command runs limits and the daemon does not: said so.
    assert json.loads(roost(handle.env, "plugins", "--json").stdout)["differs"] == [
        "this command runs 'limits'; the daemon does not (it was started without it, or with it blocked): restart the daemon to run it."
    ]
