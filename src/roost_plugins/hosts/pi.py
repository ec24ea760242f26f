"""The ``pi`` host: a job runs the real pi coding agent (``pi --mode rpc``), and ``roost pi
install | uninstall | extension-path`` puts roost's extension into the user's own pi."""

from __future__ import annotations

import argparse
from typing import Any

from roost_core import hookimpl
from roost_core.records import HostCommand, HostSpec


def make_host(job: Any, services: Any) -> Any:
    """The host a worker runs (imported in the worker only)."""
    from roost_core.hosts.pi import PiHost

    return PiHost()


def missing() -> str | None:
    """Why pi cannot run here (no ``$ROOST_PI_BIN``, no ``pi`` on PATH); None when it can."""
    from roost_core.hosts import program_missing

    return program_missing("ROOST_PI_BIN", "pi", "pi")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost pi``'s arguments (:func:`roost_core.pi.cli.add_arguments`)."""
    from roost_core.pi import cli

    cli.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``roost pi ACTION``."""
    from roost_core.pi import cli

    return cli.run(args)


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``pi``: pi writes roost's own session format (pi's v3 JSONL)."""
    command = HostCommand(help="install the roost extension into the pi coding agent", add_arguments=add_arguments, run=run)
    return [HostSpec(name="pi", factory=make_host, unavailable=missing, command=command)]
