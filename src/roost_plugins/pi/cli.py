"""``roost pi install | uninstall | extension-path | start-time``: the pi host's command.

``install`` adds the bundled extension's path to pi's ``settings.json`` (in
``$PI_CODING_AGENT_DIR``, default ``~/.pi/agent``) under ``extensions``; pi loads it from
there in every session, and the path stays the one a background pi job passes with
``-e``, so pi loads it once (pi dedupes extension paths). Nothing is copied: upgrading roost
upgrades the extension.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roost_core.installrecord import Found, forget, remember
from roost_core.settingsfile import (
    SettingsFileError,
    SettingsWriteError,
    list_at,
    read_object,
    uninstall_change,
    write_all,
)
from roost_plugins.pi import EXTENSION_NAME, extension_path


def pi_agent_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    configured = env.get("PI_CODING_AGENT_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".pi" / "agent"


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    return pi_agent_dir(env) / "settings.json"


def is_roost_extension(entry: Any) -> bool:
    """Ours: this install's path, or a roost extension of another (older) install: under
    ``roost_plugins/pi`` or, where roost kept it before, ``roost_core/pi``."""
    if not isinstance(entry, str):
        return False
    if entry == str(extension_path()):
        return True
    parts = Path(entry).parts
    return Path(entry).name == EXTENSION_NAME and len(parts) >= 3 and parts[-3:-1] in (("roost_plugins", "pi"), ("roost_core", "pi"))


def install(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Put this install's extension last in pi's ``extensions`` (an older install's is
    replaced); every other setting stays. Raises ``SettingsFileError`` for a settings file
    roost cannot edit (nothing is written), ``SettingsWriteError`` for a failed write."""
    path = settings_path(env)
    found = Found(path)
    settings = read_object(path)
    extensions = list_at(path, settings, "extensions")
    ours = str(extension_path())
    kept = [entry for entry in extensions if not is_roost_extension(entry)]
    changed = [*kept, ours] != extensions
    if changed:
        write_all([(path, {**settings, "extensions": [*kept, ours]})])
    remember(found, clean=kept == extensions, env=env)
    return {"settings": str(path), "extension": ours, "changed": changed}


def uninstall(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Take every roost extension out of pi's ``extensions``; every other setting stays
    (the file as install found it when it is as install left it)."""
    path = settings_path(env)
    settings = read_object(path)
    extensions = list_at(path, settings, "extensions")
    kept = [entry for entry in extensions if not is_roost_extension(entry)]
    stripped = {**settings, "extensions": kept} if kept != extensions else settings
    if kept != extensions and not kept:
        # A list that held only roost's entry goes with it (as it came with it).
        stripped.pop("extensions")
    changes = uninstall_change(path, settings, stripped, env)
    write_all(changes)
    forget(path, env)
    return {"settings": str(path), "extension": str(extension_path()), "changed": bool(changes)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost pi``'s arguments (the pi host's command, ``roost_plugins.hosts.pi``)."""
    parser.add_argument("action", choices=["install", "uninstall", "extension-path", "start-time"],
                        help="install or uninstall the extension in pi's settings; extension-path: print where it is; "
                        "start-time PID: print when process PID started, as writer locks record it (the extension asks)")
    parser.add_argument("pid", nargs="?", type=int, help="start-time: the process")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def start_time_command(pid: int | None) -> int:
    """``roost pi start-time PID``: print when process ``PID`` started, in seconds since the
    epoch, as roost's writer locks record it (:func:`roost_core.platform.process_start_time`),
    or ``null`` when there is no such process. The pi extension runs this for its session
    file's writer lock: node has no portable way to read another process's start time, and
    this way the extension and roost's Python read the same value on every platform."""
    from roost_core import platform
    from roost_core.cli_support import EXIT_USAGE, error_line
    from roost_core.protocol import BAD_ARGS

    if pid is None or pid <= 0:
        print(error_line(BAD_ARGS, "start-time needs a process id: roost pi start-time PID"), file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(platform.process_start_time(pid)))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "start-time":
        return start_time_command(args.pid)
    if args.action == "extension-path":
        print(extension_path())
        return 0
    from roost_core.cli_support import classify, error_line

    try:
        result = install() if args.action == "install" else uninstall()
    except (SettingsFileError, SettingsWriteError) as exc:
        print(error_line(*(classify(exc) or ("bad_config", str(exc)))), file=sys.stderr)
        return 1
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2))
    elif args.action == "install":
        state = "added to" if result["changed"] else "already in"
        print(f"{result['extension']} {state} {result['settings']}")
    else:
        state = "removed from" if result["changed"] else "was not in"
        print(f"roost extension {state} {result['settings']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m roost_plugins.pi.cli`` — the same commands, and ``daemon socket``, without
    the whole CLI."""
    from roost_core.cli_support import socket_command

    parser = argparse.ArgumentParser(prog="roost")
    sub = parser.add_subparsers(dest="command", required=True)
    add_arguments(sub.add_parser("pi"))
    daemon = sub.add_parser("daemon")
    daemon.add_argument("action", choices=["socket"])
    args = parser.parse_args(argv)
    if args.command == "daemon":
        return socket_command()
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
