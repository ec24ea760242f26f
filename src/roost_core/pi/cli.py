"""``roost pi install | uninstall | extension-path`` and ``roost daemon socket``.

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

from roost_core.pi import EXTENSION_NAME, extension_path


def pi_agent_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    configured = env.get("PI_CODING_AGENT_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".pi" / "agent"


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    return pi_agent_dir(env) / "settings.json"


def read_settings(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    data = json.loads(text or "{}")
    if not isinstance(data, dict):
        raise TypeError(f"{path} does not hold a JSON object")
    return data


def write_settings(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def is_roost_extension(entry: Any) -> bool:
    """Ours: this install's path, or a roost extension of another (older) install."""
    if not isinstance(entry, str):
        return False
    if entry == str(extension_path()):
        return True
    parts = Path(entry).parts
    return Path(entry).name == EXTENSION_NAME and len(parts) >= 3 and parts[-3:-1] == ("roost_core", "pi")


def install(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    path = settings_path(env)
    settings = read_settings(path)
    extensions = settings.get("extensions") or []
    if not isinstance(extensions, list):
        raise TypeError(f"{path}: extensions is not a list")
    ours = str(extension_path())
    kept = [entry for entry in extensions if not is_roost_extension(entry)]
    changed = [*kept, ours] != extensions
    settings["extensions"] = [*kept, ours]
    if changed:
        write_settings(path, settings)
    return {"settings": str(path), "extension": ours, "changed": changed}


def uninstall(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    path = settings_path(env)
    settings = read_settings(path)
    extensions = settings.get("extensions") or []
    if not isinstance(extensions, list):
        raise TypeError(f"{path}: extensions is not a list")
    kept = [entry for entry in extensions if not is_roost_extension(entry)]
    changed = kept != extensions
    if changed:
        settings["extensions"] = kept
        write_settings(path, settings)
    return {"settings": str(path), "extension": str(extension_path()), "changed": changed}


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add ``roost pi ACTION`` to the CLI's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser("pi", help="install the roost extension into the pi coding agent")
    parser.add_argument("action", choices=["install", "uninstall", "extension-path"],
                        help="install or uninstall the extension in pi's settings; extension-path: print where it is")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.action == "extension-path":
        print(extension_path())
        return 0
    from roost_core.cli_support import error_line

    try:
        result = install() if args.action == "install" else uninstall()
    except (OSError, ValueError, TypeError) as exc:
        print(error_line("bad_settings", f"pi's settings cannot be updated: {exc}"), file=sys.stderr)
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


def socket_command() -> int:
    """``roost daemon socket``: print this user's daemon socket, starting the daemon if
    none answers (the pi extension runs this to find the same socket roost uses)."""
    from roost_core.cli_support import UNAVAILABLE, error_line
    from roost_core.client import DaemonUnavailable, connect
    from roost_core.paths import resolve_paths

    paths = resolve_paths()
    try:
        connect(paths).close()
    except DaemonUnavailable as exc:
        print(error_line(UNAVAILABLE, f"no daemon answers: {exc}"), file=sys.stderr)
        return 1
    print(paths.socket)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m roost_core.pi.cli`` — the same commands, for use before the CLI wires them."""
    parser = argparse.ArgumentParser(prog="roost")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    daemon = sub.add_parser("daemon")
    daemon.add_argument("action", choices=["socket"])
    args = parser.parse_args(argv)
    if args.command == "daemon":
        return socket_command()
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
