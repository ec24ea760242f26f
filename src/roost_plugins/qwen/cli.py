"""``roost qwen install | uninstall | hook EVENT``."""

from __future__ import annotations

import argparse
import json
import sys

from roost_plugins.qwen import EVENTS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost qwen``'s arguments (the qwen host's command, ``roost_plugins.hosts.qwen``)."""
    parser.add_argument("action", choices=["install", "uninstall", "hook"],
                        help="install or uninstall roost's MCP server and hooks; hook: run one (Qwen Code does)")
    parser.add_argument("event", nargs="?", choices=EVENTS, help="hook: the Qwen Code hook event")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    """Run ``roost qwen ACTION``: exit 0, 1 (a settings file roost cannot edit) or 2 (bad
    arguments)."""
    if args.action == "hook":
        if not args.event:
            print("roost: bad_args: roost qwen hook needs an EVENT", file=sys.stderr)
            return 2
        # Qwen Code's hooks speak Claude Code's protocol (event names, stdin, answers):
        # the same relay serves both, to a job's worker or a user's ``roost mcp --hooks``.
        from roost_core.claude import hook

        return hook.main(args.event)
    from roost_core.cli_support import classify, error_line
    from roost_core.settingsfile import SettingsFileError, SettingsWriteError
    from roost_plugins.qwen import install

    try:
        result = install.install() if args.action == "install" else install.uninstall()
    except (SettingsFileError, SettingsWriteError) as exc:
        print(error_line(*(classify(exc) or ("bad_config", str(exc)))), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.action == "install":
        print(f"roost MCP server and hooks {'installed in' if result['changed'] else 'already in'} {result['settings']}")
    else:
        print(f"roost MCP server and hooks {'removed from' if result['changed'] else 'were not in'} {result['settings']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m roost_plugins.qwen ...``: the same commands without the whole CLI (a
    job's hooks run this, so they start fast)."""
    parser = argparse.ArgumentParser(prog="roost")
    sub = parser.add_subparsers(dest="command", required=True)
    add_arguments(sub.add_parser("qwen"))
    return run(parser.parse_args(["qwen", *(sys.argv[1:] if argv is None else argv)]))
