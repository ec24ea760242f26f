"""User config (JSON or TOML) with the spec's defaults, and the narrow project config."""

from __future__ import annotations

import json

import pytest

from roost_core.config import (
    PROJECT_KEYS,
    Config,
    ConfigError,
    load_project_config,
    load_user_config,
    read_mapping,
)


def test_defaults_are_the_specs():
    for config in (Config(), Config.from_mapping({}), load_user_config_missing()):
        assert config.agent_tools is True
        assert config.agent_external_messages is False
        assert config.agent_max_depth == 3
        assert config.max_children_per_parent == 8
        assert config.max_live_per_tree == 16
        assert config.max_live_spawned == 32
        assert config.spawns_per_tree_per_minute == 10
        assert config.messages_per_minute == 30
        assert config.max_message_chars == 8000
        assert config.reap_after_seconds == 600.0
        assert config.hibernate_after_seconds == 30.0
        assert config.disabled_plugins == ()
        assert config.agent_spawn_hosts == ()
        assert config.claude_permission_prompts == "ask"


def load_user_config_missing():
    from pathlib import Path

    return load_user_config(Path("/nonexistent/roost/roost.json"))


def test_every_documented_key_is_read():
    config = Config.from_mapping(
        {
            "agentTools": False,
            "agentExternalMessages": True,
            "reapAfterSeconds": 1.5,
            "hibernateAfterSeconds": 0.25,
            "agentMaxDepth": 5,
            "agentMaxChildren": 2,
            "agentMaxPerTree": 4,
            "agentMaxSpawned": 6,
            "agentSpawnsPerMinute": 7,
            "agentMessagesPerMinute": 9,
            "agentMaxMessageChars": 100,
            "agentMaxHops": 2,
            "defaultHost": "shell",
            "agentSpawnHosts": ["pi", "claude", "pi"],
            "claudePermissionPrompts": "none",
            "plugins": {"disable": ["reach", "limits"]},
        }
    )
    assert config.agent_tools is False
    assert config.agent_external_messages is True
    assert config.reap_after_seconds == 1.5
    assert config.hibernate_after_seconds == 0.25
    assert (config.agent_max_depth, config.max_children_per_parent, config.max_live_per_tree) == (5, 2, 4)
    assert (config.max_live_spawned, config.spawns_per_tree_per_minute, config.messages_per_minute) == (6, 7, 9)
    assert (config.max_message_chars, config.agent_max_hops) == (100, 2)
    assert isinstance(config.agent_max_depth, int)
    assert config.default_host == "shell"
    assert config.agent_spawn_hosts == ("pi", "claude")
    assert config.claude_permission_prompts == "none"
    assert config.disabled_plugins == ("reach", "limits")


@pytest.mark.parametrize(
    "data",
    [
        {"agentTools": "yes"},
        {"agentTools": 1},
        {"agentExternalMessages": "true"},
        {"agentMaxDepth": "3"},
        {"agentMaxDepth": True},
        {"agentMaxDepth": -1},
        {"agentMaxDepth": None},
        {"reapAfterSeconds": [1]},
        {"hibernateAfterSeconds": "30"},
        {"hibernateAfterSeconds": -1},
        {"hibernateAfterSeconds": False},
        {"agentMessagesPerMinute": {}},
        {"defaultHost": 5},
        {"agentSpawnHosts": "claude"},
        {"agentSpawnHosts": [""]},
        {"agentSpawnHosts": [1]},
        {"claudePermissionPrompts": "off"},
        {"claudePermissionPrompts": False},
        {"plugins": ["reach"]},
        {"plugins": {"disable": "reach"}},
        {"plugins": {"disable": [1]}},
    ],
)
def test_wrong_types_raise_config_error(data):
    with pytest.raises(ConfigError):
        Config.from_mapping(data)


def test_a_non_object_config_raises_config_error():
    with pytest.raises(ConfigError):
        Config.from_mapping([])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "key, value",
    [
        ("agentMaxDepth", float("inf")),
        ("agentMaxDepth", float("nan")),
        ("agentMessagesPerMinute", float("inf")),
        ("agentMessagesPerMinute", float("nan")),
        ("reapAfterSeconds", float("nan")),
        ("hibernateAfterSeconds", float("nan")),
    ],
)
def test_non_finite_numbers_raise_config_error(key, value):
    # JSON `1e400` and TOML `inf` / `nan` reach here as floats; they must be refused as a
    # ConfigError like any bad value, not crash with OverflowError/ValueError (or, for NaN,
    # be accepted and silently disable a limit, since every comparison with NaN is false).
    with pytest.raises(ConfigError):
        Config.from_mapping({key: value})


def test_infinite_durations_mean_never():
    # TOML `inf`: never reap, never hibernate (children then live until reapAfterSeconds).
    config = Config.from_mapping({"reapAfterSeconds": float("inf"), "hibernateAfterSeconds": float("inf")})
    assert config.reap_after_seconds == config.hibernate_after_seconds == float("inf")


def test_user_config_json_file(tmp_path):
    path = tmp_path / "roost.json"
    path.write_text(json.dumps({"agentMaxDepth": 1}))
    assert load_user_config(path).agent_max_depth == 1


def test_user_config_toml_beside_the_json_path_is_accepted(tmp_path):
    (tmp_path / "roost.toml").write_text('agentMaxDepth = 2\nagentExternalMessages = true\n[plugins]\ndisable = ["render"]\n')
    config = load_user_config(tmp_path / "roost.json")
    assert config.agent_max_depth == 2
    assert config.agent_external_messages is True
    assert config.disabled_plugins == ("render",)


def test_json_wins_over_toml_when_both_exist(tmp_path):
    (tmp_path / "roost.json").write_text('{"agentMaxDepth": 4}')
    (tmp_path / "roost.toml").write_text("agentMaxDepth = 2\n")
    assert load_user_config(tmp_path / "roost.json").agent_max_depth == 4


@pytest.mark.parametrize("name, text", [("roost.json", "{not json"), ("roost.json", "[1, 2]"), ("roost.toml", "agentMaxDepth = = 3"), ("roost.json", b"\xff\xfe")])
def test_unreadable_config_files_raise_config_error(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError):
        load_user_config(path)


def test_an_empty_json_file_is_the_defaults(tmp_path):
    (tmp_path / "roost.json").write_text("")
    assert load_user_config(tmp_path / "roost.json") == Config()


def test_read_mapping_of_a_missing_file_is_empty(tmp_path):
    assert read_mapping(tmp_path / "nope.json") == {}


def test_project_config_keeps_only_job_defaults_never_reach_or_limits(tmp_path):
    (tmp_path / ".pi").mkdir()
    (tmp_path / ".pi" / "roost.json").write_text(
        json.dumps(
            {
                "defaultHost": "shell",
                "defaultModel": "m1",
                "defaultThinking": "high",
                "agentExternalMessages": True,
                "agentMaxDepth": 99,
                "agentMaxChildren": 99,
                "agentMessagesPerMinute": 10_000,
                "agentTools": False,
                "plugins": {"disable": ["reach", "limits"]},
                "reapAfterSeconds": 0,
            }
        )
    )
    assert load_project_config(tmp_path) == {"defaultHost": "shell", "defaultModel": "m1", "defaultThinking": "high"}
    assert load_project_config(str(tmp_path)) == load_project_config(tmp_path)
    assert {"defaultHost", "defaultModel", "defaultThinking"} == PROJECT_KEYS


def test_project_config_missing_or_broken_is_empty(tmp_path):
    assert load_project_config(None) == {}
    assert load_project_config("") == {}
    assert load_project_config(tmp_path) == {}
    (tmp_path / ".pi").mkdir()
    (tmp_path / ".pi" / "roost.json").write_text("{broken")
    assert load_project_config(tmp_path) == {}


def test_toml_inf_in_a_limit_is_a_config_error_not_a_crash(tmp_path):
    (tmp_path / "roost.toml").write_text("agentMaxDepth = inf\n")
    with pytest.raises(ConfigError):
        load_user_config(tmp_path / "roost.json")
