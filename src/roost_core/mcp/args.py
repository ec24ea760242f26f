"""The arguments of ``roost mcp``, in one place for the CLI and ``python -m roost_core.mcp``."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--session", help="the client's transcript file, when it has one (keys the peer on it)")
    parser.add_argument("--name", help="this session's peer name (default: the working directory's name)")
    parser.add_argument("--hooks", action="store_true",
                        help="answer the client's roost hooks over a private socket, as for Claude Code (a client whose hooks speak Claude Code's protocol)")
    parser.add_argument("--host", help="the client's host, as roost agents shows it and roost log reads its session (a registered host's name)")
    return parser
