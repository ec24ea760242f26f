"""The config home a job's OpenCode runs with (``XDG_CONFIG_HOME``).

OpenCode runs ``npm install @opencode-ai/plugin`` in every folder it reads config from,
its global folder (``$XDG_CONFIG_HOME/opencode``) first, and a server that loads any
plugin waits for those installs before it answers anything. roost's plugin is a local
file that imports nothing, yet it made a job wait for an install into the user's own
folder: about 75 s of npm retries when no registry answers, where the bare CLI (no
plugin) does not wait.

So a job's OpenCode gets a config home of its own in the job's private folder
(:func:`job_config_home`). Its ``opencode`` folder links every entry of the user's
(``opencode.json``, agents, commands, themes, ``AGENTS.md``, ...) except what npm keeps
there, and holds a lock naming the package beside an empty ``node_modules``: OpenCode
skips the install when ``node_modules`` exists and the lock's root lists every package
it would add, and nothing the job loads from that folder imports the package. Every
other entry of the user's config home is linked as well, so the programs the agent runs
read their own config; roost's plugin gives the agent's shell commands the user's
``XDG_CONFIG_HOME`` back. Nothing is written into the user's folders. OpenCode keeps
credentials (``auth.json``) and sessions under ``XDG_DATA_HOME``, which stays the user's.

A user whose folder holds plugins or tools of their own keeps it as the job's config
folder: their code may import the package, which OpenCode installs there (their own
OpenCode waits for that install too).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from roost_plugins.opencode.install import PLUGIN_HEADER

#: The variable that hands the user's own config home to roost's plugin.
USER_CONFIG_HOME_ENV = "ROOST_OPENCODE_USER_CONFIG_HOME"
#: What npm and OpenCode keep in a config folder: never linked into a job's.
NPM_ENTRIES = frozenset({"node_modules", "package.json", "package-lock.json", "bun.lock", "bun.lockb", ".gitignore"})
#: The folders of a config folder whose files OpenCode loads as code.
CODE_FOLDERS = ("plugin", "plugins", "tool", "tools")
#: The lock OpenCode itself writes once the package is in place (its root lists it).
SEED_LOCK = {"name": "opencode-config", "lockfileVersion": 3, "requires": True, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}


def user_config_home(env: Mapping[str, str]) -> Path:
    """The user's config home: ``$XDG_CONFIG_HOME``, else ``~/.config`` (as OpenCode)."""
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base)


def is_roosts_copy(path: Path) -> bool:
    """``path`` is the plugin ``roost opencode install`` wrote (it imports nothing)."""
    try:
        with path.open() as file:
            return file.readline().rstrip("\n") == PLUGIN_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def holds_own_code(folder: Path) -> bool:
    """Whether the config folder ``folder`` holds plugins or tools other than roost's."""
    for name in CODE_FOLDERS:
        try:
            files = [path for path in (folder / name).rglob("*") if path.is_file()]
        except OSError:
            continue
        if any(not is_roosts_copy(path) for path in files):
            return True
    return False


def link_entries(source: Path, target: Path, skip: frozenset[str]) -> None:
    """Link into ``target`` every entry of ``source`` not named in ``skip``."""
    try:
        entries = list(source.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name not in skip:
            (target / entry.name).symlink_to(entry)


def job_config_home(home: Path, user_home: Path) -> Path | None:
    """Make ``home`` (a path in the job's private folder) a config home for the job's
    OpenCode from the user's ``user_home`` (see the module), anew on each start so that
    it shows the user's folder as it is now; None when the user's OpenCode folder holds
    code of its own (the job uses the user's config home)."""
    user_folder = user_home / "opencode"
    if holds_own_code(user_folder):
        return None
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True, mode=0o700)
    folder = home / "opencode"
    folder.mkdir(mode=0o700)
    link_entries(user_home, home, frozenset({"opencode"}))
    link_entries(user_folder, folder, NPM_ENTRIES)
    (folder / "package-lock.json").write_text(json.dumps(SEED_LOCK))
    (folder / "node_modules").mkdir()
    return home
