"""``roost gemini install | uninstall | hook EVENT``."""

from __future__ import annotations

import argparse
import sys

from roost_core import installcommand
from roost_plugins.gemini import EVENTS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost gemini``'s arguments (the gemini host's command)."""
    installcommand.add_arguments(
        parser,
        events=EVENTS,
        action_help="install or uninstall roost's MCP server and hooks; hook: run one (Gemini CLI does)",
        event_help="hook: the Gemini CLI hook event",
    )
    parser.add_argument("--bridge", help=argparse.SUPPRESS)  # a background job's hooks name its bridge


def run(args: argparse.Namespace) -> int:
    """Run ``roost gemini ACTION``: 0 done, 1 a settings file roost cannot edit, 2 usage."""
    if args.action == "hook":
        from roost_plugins.gemini import hook

        if not args.event:
            print("roost: bad_args: roost gemini hook needs an EVENT", file=sys.stderr)
            return 2
        return hook.main(args.event, bridge=args.bridge)
    return installcommand.run_action(
        args,
        actions="roost_plugins.gemini.install",
        what="roost MCP server and hooks",
        where=lambda result: str(result["settings"]),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m roost_plugins.gemini ...``: the same commands without the whole CLI."""
    parser = argparse.ArgumentParser(prog="roost gemini")
    add_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
