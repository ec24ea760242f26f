"""``roost qwen install | uninstall | hook EVENT`` (:mod:`roost_core.installcommand`)."""

from __future__ import annotations

import argparse

from roost_core import installcommand
from roost_plugins.qwen import EVENTS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost qwen``'s arguments (the qwen host's command, ``roost_plugins.hosts.qwen``)."""
    installcommand.add_arguments(
        parser,
        events=EVENTS,
        action_help="install or uninstall roost's MCP server and hooks; hook: run one (Qwen Code does)",
        event_help="hook: the Qwen Code hook event",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``roost qwen ACTION``: exit 0, 1 (a settings file roost cannot edit) or 2 (bad
    arguments)."""
    return installcommand.run(
        args,
        name="qwen",
        # Qwen Code's hooks speak Claude Code's protocol (event names, stdin, answers):
        # the same relay serves both, to a job's worker or a user's ``roost mcp --hooks``.
        hook="roost_core.hookrelay:main",
        actions="roost_plugins.qwen.install",
        what="roost MCP server and hooks",
        program="roost_plugins.qwen:qwen_binary",
        where=lambda result: str(result["settings"]),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m roost_plugins.qwen ...``: the same commands without the whole CLI (a
    job's hooks run this, so they start fast)."""
    return installcommand.main("qwen", add_arguments, run, argv)
