"""The ``claude`` host: a job runs headless Claude Code (``claude -p``) in Claude Code's own
transcript, which reads its own way; ``roost claude install | uninstall | hook EVENT`` puts
roost into the user's own Claude Code."""

from __future__ import annotations

import argparse
from typing import Any

from roost_core import hookimpl
from roost_core.records import HostCommand, HostSpec, TranscriptEntry


def make_host(job: Any, services: Any) -> Any:
    """The host a worker runs (imported in the worker only)."""
    from roost_core.claude.host import ClaudeHost

    return ClaudeHost()


def session_file(cwd: str) -> str:
    """A new job's transcript: where Claude Code keeps a session of ``cwd``."""
    from roost_core.claude import new_session_file

    return new_session_file(cwd)


def missing() -> str | None:
    """Why Claude Code cannot run here; None when it can."""
    from roost_core.hosts import program_missing

    return program_missing("ROOST_CLAUDE_BIN", "claude", "Claude Code")


def transcript_entries(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One Claude Code transcript line as the entries ``roost log`` and the view render."""
    from roost_core.claude.transcript import entries_of

    return entries_of(raw)


def transcript_seqs(path: str) -> set[int]:
    """The queue seqs a Claude Code transcript holds."""
    from roost_core.claude.transcript import seqs_in_session

    return seqs_in_session(path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost claude``'s arguments (:func:`roost_core.claude.cli.add_arguments`)."""
    from roost_core.claude import cli

    cli.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``roost claude ACTION``."""
    from roost_core.claude import cli

    return cli.run(args)


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``claude``."""
    command = HostCommand(help="put roost into Claude Code (MCP server and hooks), or run a hook", add_arguments=add_arguments, run=run)
    return [
        HostSpec(
            name="claude",
            factory=make_host,
            session_file=session_file,
            unavailable=missing,
            transcript_entries=transcript_entries,
            transcript_seqs=transcript_seqs,
            command=command,
        )
    ]
