"""User config (``roost.json``, or ``roost.toml`` beside it) and project config.

User config is the only place that sets reach and limits. Project config (a project's
``.pi/roost.json``) may set a few defaults for jobs started in it; any other key there is
ignored, so a repository can never widen what its agents may reach.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

import attrs

#: Keys that are durations in seconds: fractions allowed, and ``inf`` (TOML) means never.
SECONDS_KEYS = frozenset({"reapAfterSeconds", "hibernateAfterSeconds"})
#: The most warm pi processes a user may ask for (each holds ~150 MB).
MAX_PI_POOL_SIZE = 8
#: Keys a project config may set; everything else in it is ignored.
PROJECT_KEYS = frozenset({"defaultHost", "defaultModel", "defaultThinking"})

#: The daemon's exit status when the user config cannot be read (sysexits' EX_CONFIG):
#: the client that started it stops waiting and reports ``bad_config`` (client.py).
EXIT_BAD_CONFIG = 78
#: What starts the line the daemon writes (to daemon.log) before it exits so.
BAD_CONFIG_LINE = "roost: bad_config: "


class ConfigError(ValueError):
    """The config file cannot be read or holds a wrong type."""


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key} must be a non-negative number")
    try:
        number = float(value)
    except OverflowError as exc:
        raise ConfigError(f"{key} is too large") from exc
    if math.isnan(number) or number < 0 or (math.isinf(number) and key not in SECONDS_KEYS):
        raise ConfigError(f"{key} must be a non-negative finite number")
    return number


@attrs.frozen
class Config:
    """The user-level config, with the spec's defaults."""

    agent_tools: bool = True
    agent_external_messages: bool = False
    reap_after_seconds: float = 600.0
    #: A settled spawned child with nothing pending is hibernated (its worker and host
    #: ended; woken from its session file by the next item) after this many seconds.
    hibernate_after_seconds: float = 30.0
    #: Keep warm pi processes for new pi jobs (``roost_core.daemon.pool``), this many.
    pi_pool: bool = True
    pi_pool_size: int = 1
    #: The most warm pi processes the pool grows to when jobs start in bursts (a
    #: fan-out of children, several wakes at once); never below ``pi_pool_size``.
    pi_pool_max: int = 4
    agent_max_depth: int = 3
    max_children_per_parent: int = 8
    max_live_per_tree: int = 16
    max_live_spawned: int = 32
    spawns_per_tree_per_minute: int = 10
    messages_per_minute: int = 30
    max_message_chars: int = 8000
    agent_max_hops: int = 8
    #: How agent messages reach a busy receiver when the sender does not say (``urgent``).
    agent_delivery: str = "steer"
    agent_max_watches: int = 8
    #: A session tree's budget; None is no cap.
    agent_tree_tokens: int | None = None
    agent_tree_cost: float | None = None
    disabled_plugins: tuple[str, ...] = ()
    #: None: ``roost start`` picks ``pi`` when it is installed (see ``JobMaker.default_host``).
    default_host: str | None = None
    #: Hosts an agent may name for a child (``roost_spawn``'s ``host``); empty: none, the
    #: child runs its parent's host and the tool has no ``host`` parameter.
    agent_spawn_hosts: tuple[str, ...] = ()
    #: What a background Claude Code job does with a permission prompt: ``ask`` (a roost
    #: dialog the user answers with ``roost answer``) or ``none`` (refused at once, as
    #: ``claude -p --permission-prompts none`` does).
    claude_permission_prompts: str = "ask"
    #: Where a spawned child works when the spawn does not say (``roost_spawn``'s
    #: ``workspace``): ``shared`` (its spawner's folder) or ``worktree`` (a git worktree of
    #: its own, on a branch of its own). ``roost start`` takes ``--worktree`` instead.
    agent_workspace: str = "shared"
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Config:
        if not isinstance(data, dict):
            raise ConfigError("config must be an object")
        plugins = data.get("plugins", {}) or {}
        if not isinstance(plugins, dict):
            raise ConfigError("plugins must be an object")
        disabled = plugins.get("disable", []) or []
        if not isinstance(disabled, list) or not all(isinstance(n, str) for n in disabled):
            raise ConfigError("plugins.disable must be a list of names")
        kwargs: dict[str, Any] = {"raw": data, "disabled_plugins": tuple(disabled)}
        for key, field in (("agentTools", "agent_tools"), ("agentExternalMessages", "agent_external_messages"), ("piPool", "pi_pool")):
            if key in data:
                if not isinstance(data[key], bool):
                    raise ConfigError(f"{key} must be true or false")
                kwargs[field] = data[key]
        numbers = {
            "reapAfterSeconds": "reap_after_seconds",
            "hibernateAfterSeconds": "hibernate_after_seconds",
            "agentMaxDepth": "agent_max_depth",
            "agentMaxChildren": "max_children_per_parent",
            "agentMaxPerTree": "max_live_per_tree",
            "agentMaxSpawned": "max_live_spawned",
            "agentSpawnsPerMinute": "spawns_per_tree_per_minute",
            "agentMessagesPerMinute": "messages_per_minute",
            "agentMaxMessageChars": "max_message_chars",
            "agentMaxHops": "agent_max_hops",
            "piPoolSize": "pi_pool_size",
            "piPoolMax": "pi_pool_max",
            "agentMaxWatches": "agent_max_watches",
            "agentTreeTokens": "agent_tree_tokens",
            "agentTreeCost": "agent_tree_cost",
        }
        for key, field in numbers.items():
            if key in data:
                number = _number(data[key], key)
                kwargs[field] = number if key in SECONDS_KEYS or field == "agent_tree_cost" else int(number)
        for key, field in (("piPoolSize", "pi_pool_size"), ("piPoolMax", "pi_pool_max")):
            if kwargs.get(field, 0) > MAX_PI_POOL_SIZE:
                raise ConfigError(f"{key} must be at most {MAX_PI_POOL_SIZE}")
        if "agentDelivery" in data:
            if data["agentDelivery"] not in ("steer", "followUp"):
                raise ConfigError('agentDelivery must be "steer" or "followUp"')
            kwargs["agent_delivery"] = data["agentDelivery"]
        if "agentSpawnHosts" in data:
            hosts = data["agentSpawnHosts"]
            if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
                raise ConfigError("agentSpawnHosts must be a list of host names")
            kwargs["agent_spawn_hosts"] = tuple(dict.fromkeys(hosts))
        if "claudePermissionPrompts" in data:
            if data["claudePermissionPrompts"] not in ("ask", "none"):
                raise ConfigError('claudePermissionPrompts must be "ask" or "none"')
            kwargs["claude_permission_prompts"] = data["claudePermissionPrompts"]
        if "agentWorkspace" in data:
            if data["agentWorkspace"] not in ("shared", "worktree"):
                raise ConfigError('agentWorkspace must be "shared" or "worktree"')
            kwargs["agent_workspace"] = data["agentWorkspace"]
        if "defaultHost" in data:
            if not isinstance(data["defaultHost"], str):
                raise ConfigError("defaultHost must be a string")
            kwargs["default_host"] = data["defaultHost"]
        return cls(**kwargs)


def read_mapping(path: Path) -> dict[str, Any]:
    """Read a JSON (or, for ``.toml``, TOML) config file; a missing file is empty. A file
    that cannot be parsed is a :class:`ConfigError` naming the file, line and column."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from exc
    try:
        if path.suffix == ".toml":
            return tomllib.loads(text.decode("utf-8"))
        data = json.loads(text or b"{}")
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    except tomllib.TOMLDecodeError as exc:
        # tomllib puts the place at the end of its message: "... (at line 3, column 5)".
        match = re.fullmatch(r"(.*) \(at line (\d+), column (\d+)\)", str(exc), re.S)
        where = f"line {match[2]}, column {match[3]}: {match[1]}" if match else str(exc)
        raise ConfigError(f"{path}: {where}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: config must be an object")
    return data


def key_place(path: Path, key: str) -> tuple[int, int] | None:
    """The line and column (both from 1) where ``path`` first sets ``key`` (``"key":`` in
    JSON, ``key =`` in TOML), to point a user at the value a :class:`ConfigError` is
    about; None if none."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    pattern = re.compile(rf"^\s*({re.escape(key)})\s*=" if path.suffix == ".toml" else rf'("{re.escape(key)}")\s*:')
    for number, line in enumerate(lines, 1):
        match = pattern.search(line)
        if match:
            return number, match.start(1) + 1
    return None


def load_user_config(config_file: Path) -> Config:
    """The user config from ``config_file``, or ``roost.toml`` beside it. Any error names
    the file it is in, and the line and column of the key it is about when there is one."""
    path = config_file
    data = read_mapping(config_file)
    if not data and config_file.suffix == ".json":
        path = config_file.with_suffix(".toml")
        data = read_mapping(path)
    try:
        return Config.from_mapping(data)
    except ConfigError as exc:
        # Each message of from_mapping starts with the key it is about ("agentMaxDepth
        # must be ...", "plugins.disable must be ...").
        key = str(exc).split(" ", 1)[0].rsplit(".", 1)[-1]
        place = key_place(path, key)
        raise ConfigError(f"{path}: {f'line {place[0]}, column {place[1]}: ' if place else ''}{exc}") from exc


def load_project_config(cwd: str | Path | None) -> dict[str, Any]:
    """The allowed keys of ``<cwd>/.pi/roost.json``; reach and limit keys are dropped (a
    file that cannot be read counts as empty: :func:`read_project_config` says why)."""
    return read_project_config(cwd)[0]


def read_project_config(cwd: str | Path | None) -> tuple[dict[str, Any], str | None]:
    """The allowed keys of ``<cwd>/.pi/roost.json``, and a warning when the file is there
    but cannot be read (it is then ignored: a job must not fail for a project's broken
    defaults, but its user must learn that they are not used)."""
    if not cwd:
        return {}, None
    path = Path(cwd) / ".pi" / "roost.json"
    try:
        data = read_mapping(path)
    except ConfigError as exc:
        return {}, f"the project config is ignored: {exc}"
    return {key: value for key, value in data.items() if key in PROJECT_KEYS and isinstance(value, str)}, None
