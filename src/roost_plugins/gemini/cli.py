"""``roost gemini install | uninstall | hook EVENT``."""

from __future__ import annotations

import argparse
import json
import sys

from roost_plugins.gemini import EVENTS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost gemini``'s arguments (the gemini host's command)."""
    parser.add_argument("action", choices=["install", "uninstall", "hook"],
                        help="install or uninstall roost's MCP server and hooks; hook: run one (Gemini CLI does)")
    parser.add_argument("event", nargs="?", choices=EVENTS, help="hook: the Gemini CLI hook event")
    parser.add_argument("--bridge", help=argparse.SUPPRESS)  # a background job's hooks name its bridge
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    """Run ``roost gemini ACTION``: 0 done, 1 a settings file roost cannot edit, 2 usage."""
    if args.action == "hook":
        from roost_plugins.gemini import hook

        if not args.event:
            print("roost: bad_args: roost gemini hook needs an EVENT", file=sys.stderr)
            return 2
        return hook.main(args.event, bridge=args.bridge)
    from roost_core.cli_support import classify, error_line
    from roost_core.settingsfile import SettingsFileError, SettingsWriteError
    from roost_plugins.gemini import install

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
    """``python -m roost_plugins.gemini ...``: the same commands without the whole CLI."""
    parser = argparse.ArgumentParser(prog="roost gemini")
    add_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
