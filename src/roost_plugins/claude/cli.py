"""``roost claude install | uninstall | hook EVENT`` (:mod:`roost_core.installcommand`)."""

from __future__ import annotations

import argparse

from roost_core import installcommand


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost claude``'s arguments (the claude host's command, ``roost_plugins.hosts.claude``)."""
    from roost_plugins.claude.hook import EVENTS

    installcommand.add_arguments(
        parser,
        events=EVENTS,
        action_help="install or uninstall roost's MCP server and hooks; hook: run one (Claude Code does)",
        event_help="hook: the Claude Code hook event",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``roost claude ACTION``."""
    return installcommand.run(
        args,
        name="claude",
        hook="roost_core.hookrelay:main",
        actions="roost_plugins.claude.install",
        what="roost MCP server and hooks",
        where=lambda result: f"{result['settings']} and {result['mcpConfig']}",
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m roost_plugins.claude ...``: the same commands without the whole CLI (the
    hooks of a background job run this, so they start fast)."""
    return installcommand.main("claude", add_arguments, run, argv)
