"""The ``opencode`` host: a job runs OpenCode's server (``opencode serve``) on one OpenCode
session, whose store roost reads; ``roost opencode install | uninstall`` puts roost's MCP
server into the user's own OpenCode (:mod:`roost_plugins.opencode`)."""

from __future__ import annotations

import argparse
from typing import Any

from roost_core import hookimpl
from roost_core.records import HostCommand, HostSpec, TranscriptEntry


def make_host(job: Any, services: Any) -> Any:
    """The host a worker runs (imported in the worker only)."""
    from roost_plugins.opencode.host import OpenCodeHost

    return OpenCodeHost()


def missing() -> str | None:
    """Why OpenCode cannot run here; None when it can."""
    from roost_core.hosts import program_missing

    return program_missing("ROOST_OPENCODE_BIN", "opencode", "OpenCode")


def transcript_entries(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One line of an OpenCode job's session file as the entries ``roost log`` renders."""
    from roost_plugins.opencode.transcript import entries_of

    return entries_of(raw)


def transcript_seqs(path: str) -> set[int]:
    """The queue seqs OpenCode's store holds for the job whose session file is ``path``."""
    from roost_plugins.opencode.transcript import seqs_in_session

    return seqs_in_session(path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost opencode``'s arguments."""
    from roost_plugins.opencode import install

    install.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``roost opencode ACTION``."""
    from roost_plugins.opencode import install

    return install.run(args)


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``opencode``."""
    command = HostCommand(help="put roost into OpenCode (its MCP server and plugin)", add_arguments=add_arguments, run=run)
    return [
        HostSpec(
            name="opencode",
            factory=make_host,
            unavailable=missing,
            transcript_entries=transcript_entries,
            transcript_seqs=transcript_seqs,
            command=command,
        )
    ]
