"""The per-user daemon: ``roost daemon`` runs it in the foreground."""

from __future__ import annotations

import logging
import os
import sys

import anyio

from roost_core.config import BAD_CONFIG_LINE, EXIT_BAD_CONFIG, ConfigError, load_user_config
from roost_core.paths import Paths, resolve_paths

#: Seconds the loop keeps the GIL while the journal thread waits for it (see run_daemon).
#: 20 µs, not 0.2 ms: under load the journal thread waits for the GIL twice per commit
#: (after the write, and when the next records are handed over), and those waits set
#: the pace of commits, so of every send's answer (bench/HISTORY.md, issue 18's eighth
#: round: 10 alternating pairs of the durable row, 8 faster).
SWITCH_INTERVAL = 0.00002


def loop_options() -> dict[str, object]:
    """The event loop the daemon runs on: uvloop when it is installed (its loop does the
    same work with less CPU per wake-up; a dependency), asyncio's own without it or with
    ``ROOST_UVLOOP=0``: the daemon runs on either."""
    if os.environ.get("ROOST_UVLOOP", "1") == "0":
        return {}
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def run_daemon(paths: Paths | None = None, *, disabled: tuple[str, ...] = (), durable: bool = True) -> int:
    """Run the daemon in this process until it is told to stop. Returns an exit code."""
    from roost_core.daemon.server import DaemonRunning, serve
    from roost_core.plugins import disabled_from_env, make_plugin_manager
    from roost_core.worker.proctree import MARK_VARIABLE

    # A daemon started from a job's tool must not hand that job's process mark on to its
    # workers and fork server (each worker start gets a mark of its own).
    os.environ.pop(MARK_VARIABLE, None)
    paths = paths or resolve_paths()
    paths.ensure()
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        config = load_user_config(paths.config_file)
    except ConfigError as exc:
        # One line, no traceback: the client that started this daemon reads it back.
        print(f"{BAD_CONFIG_LINE}{exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_CONFIG
    disabled = tuple(disabled) + disabled_from_env()
    pm = make_plugin_manager(config, disabled=disabled)
    # ROOST_DURABLE=0 skips fsync (benchmarks of the non-durable path; never the default).
    durable = durable and os.environ.get("ROOST_DURABLE", "1") != "0"
    # The journal's thread needs the GIL back after each fsync to hand the commit to the
    # loop; a busy loop holds it for up to the switch interval (5 ms by default) first,
    # which made that wait, not the disk, the length of every commit under load. (Only a
    # thread waiting for the GIL makes the loop give it up: with none, this costs nothing.)
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        anyio.run(lambda: serve(paths, config, pm, durable=durable), backend_options=loop_options())
    except DaemonRunning as exc:
        print(f"roost: conflict: {exc}", file=sys.stderr)
        return 1
    return 0
