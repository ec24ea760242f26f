"""``roost web``: a page on 127.0.0.1 of every agent, message, receipt, dialog and cost.

:mod:`.guard` decides who may ask (Host, Origin, the secret), :mod:`.httpd` reads and
writes HTTP/1.1 on asyncio streams, :mod:`.model` turns what the daemon's ``watch``
stream says into the page's events, :mod:`.server` serves it. The page (``static/``) is
plain JavaScript reading server-sent events of JSON, drawn with ``textContent``.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``web`` command to ``roost``'s subparsers (the server is imported only
    when it runs, so ``roost --help`` stays instant)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "web", help="serve a live page of every agent, message, receipt, dialog and cost on 127.0.0.1 (prints its link)"
    )
    parser.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``roost web`` until interrupted."""
    from roost_core.web.server import run as run_server

    return run_server(args)
