"""roost for any MCP client: ``roost mcp``, a stdio MCP server on the official ``mcp`` SDK
(the optional extra ``roost[mcp]``). See ``server`` (the tools and the two modes) and
``peer`` (the client's session as a foreground peer), and ``docs/hosts.md``."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``roost mcp`` to the CLI's subparsers."""
    parser = subparsers.add_parser("mcp", help="run roost as a stdio MCP server (Claude Code, any MCP client)")
    parser.add_argument("--session", help="the client's transcript file, when it has one (keys the peer on it)")
    parser.add_argument("--name", help="this session's peer name (default: the working directory's name)")
    return parser


def run(args: argparse.Namespace) -> int:
    from roost_core.mcp.server import run as run_server

    return run_server(args)
