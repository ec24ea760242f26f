"""``roost claude install | uninstall | hook EVENT``."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost claude``'s arguments (the claude host's command, ``roost_plugins.hosts.claude``)."""
    from roost_core.claude.hook import EVENTS

    parser.add_argument("action", choices=["install", "uninstall", "hook"],
                        help="install or uninstall roost's MCP server and hooks; hook: run one (Claude Code does)")
    parser.add_argument("event", nargs="?", choices=EVENTS, help="hook: the Claude Code hook event")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    if args.action == "hook":
        from roost_core.claude import hook

        if not args.event:
            print("roost: bad_args: roost claude hook needs an EVENT", file=sys.stderr)
            return 2
        return hook.main(args.event)
    from roost_core.claude import install
    from roost_core.cli_support import classify, error_line
    from roost_core.settingsfile import SettingsFileError, SettingsWriteError

    try:
        result = install.install() if args.action == "install" else install.uninstall()
    except (SettingsFileError, SettingsWriteError) as exc:
        print(error_line(*(classify(exc) or ("bad_config", str(exc)))), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.action == "install":
        state = "installed in" if result["changed"] else "already in"
        print(f"roost MCP server and hooks {state} {result['settings']} and {result['mcpConfig']}")
    else:
        state = "removed from" if result["changed"] else "were not in"
        print(f"roost MCP server and hooks {state} {result['settings']} and {result['mcpConfig']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m roost_core.claude ...``: the same commands without the whole CLI (the
    hooks of a background job run this, so they start fast)."""
    parser = argparse.ArgumentParser(prog="roost")
    sub = parser.add_subparsers(dest="command", required=True)
    add_arguments(sub.add_parser("claude"))
    return run(parser.parse_args(["claude", *(sys.argv[1:] if argv is None else argv)]))
