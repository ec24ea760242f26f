"""``roost attach JOB``: open a background job's session in its own CLI's interactive
interface in this terminal, as the same peer; on exit it goes back to the background.

This process holds the attachment for as long as it runs: its daemon connection asks
``attach`` (answered once the job's worker has let go of the session), runs the command
the job's host declares (``HostSpec.attach``) with ``ROOST_ATTACH_JOB`` and
``ROOST_ATTACH_TOKEN`` in its environment, and says ``detach`` when it exits (the
connection closing says it too). The daemon's side: :mod:`roost_core.daemon.attach`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from typing import Any

#: The environment the interactive CLI's roost side reads (pi's extension, ``roost mcp``).
ATTACH_JOB_ENV = "ROOST_ATTACH_JOB"
ATTACH_TOKEN_ENV = "ROOST_ATTACH_TOKEN"


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add ``attach`` to ``roost``'s subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "attach", help="open a job's session in its own CLI in this terminal (same peer); exit it to send the job back to the background"
    )
    parser.add_argument("id", help="the job: its id, or its exact name")
    parser.add_argument("--now", action="store_true", help="interrupt a run under way (as the CLI's own interrupt does) instead of waiting for it to settle")
    return parser


def run(args: argparse.Namespace) -> int:
    """Attach, run the host's interactive command, detach; the command's exit status."""
    from roost_core.cli_support import CommandError, client, local_hosts
    from roost_core.hosts.base import JobInfo
    from roost_core.names import shown

    with client() as conn:
        # The attach waits for a run under way to settle: as long as that takes.
        conn.sock.settimeout(None)
        print(f"roost: attaching to {shown(args.id)}{' now' if args.now else ' (once its run, if any, settles)'}…", file=sys.stderr, flush=True)
        answer = conn.call("attach", job=args.id, **({"now": True} if args.now else {}))
        job = JobInfo.from_hello(answer["job"])
        spec = local_hosts().get(job.host)
        if spec is None or spec.attach is None:
            conn.call("detach", job=job.id)
            raise CommandError("not_attachable", f"host {job.host!r} has no interactive interface here (its plugin is blocked or not installed)")
        plan = spec.attach(job)
        env = dict(os.environ, **plan.env)
        env[ATTACH_JOB_ENV] = job.id
        env[ATTACH_TOKEN_ENV] = answer["token"]
        cwd = job.cwd if os.path.isdir(job.cwd) else None
        print(f"roost: {job.id} ({shown(job.name)}) is attached; exit {job.host} to send it back to the background", file=sys.stderr, flush=True)
        # Ctrl-C belongs to the CLI in the terminal: this process only waits for it (a
        # handler, not SIG_IGN, so the CLI does not inherit an ignored SIGINT).
        previous = signal.signal(signal.SIGINT, _ignore)
        try:
            code = subprocess.call(plan.argv, env=env, cwd=cwd)
        finally:
            signal.signal(signal.SIGINT, previous)
        result = conn.call("detach", job=job.id)
    waiting = result.get("pending") or 0
    print(f"roost: {job.id} is back in the background ({result['state']}; {waiting} item(s) waiting)", file=sys.stderr, flush=True)
    return code


def _ignore(signum: int, frame: Any) -> None:
    """SIGINT while the attached CLI runs: it is the CLI's."""
