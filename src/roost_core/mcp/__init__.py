"""roost for any MCP client: ``roost mcp``, a stdio MCP server on the official ``mcp`` SDK
(the optional extra ``roost[mcp]``). See ``server`` (the tools and the two modes) and
``peer`` (the client's session as a foreground peer), and ``docs/hosts.md``."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add ``roost mcp`` to the CLI's subparsers."""
    from roost_core.mcp.args import add_arguments

    return add_arguments(subparsers.add_parser("mcp", help="run roost as a stdio MCP server (Claude Code, any MCP client)"))


def run(args: argparse.Namespace) -> int:
    from roost_core.mcp.server import run as run_server

    return run_server(args)
