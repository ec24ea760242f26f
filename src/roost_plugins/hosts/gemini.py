"""The ``gemini`` host: a job runs headless Gemini CLI (``gemini -p``) in Gemini CLI's
own session files; ``roost gemini install | uninstall | hook EVENT`` puts roost into the
user's own Gemini CLI. The code is in :mod:`roost_plugins.gemini`."""

from __future__ import annotations

import argparse
from typing import Any

from roost_core import hookimpl
from roost_core.records import HostCommand, HostSpec, TranscriptEntry


def make_host(job: Any, services: Any) -> Any:
    """The host a worker runs (imported in the worker only)."""
    from roost_plugins.gemini.host import GeminiHost

    return GeminiHost()


def missing() -> str | None:
    """Why Gemini CLI cannot run here; None when it can."""
    from roost_core.hosts import program_missing

    return program_missing("ROOST_GEMINI_BIN", "gemini", "Gemini CLI")


def transcript_entries(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One line of a Gemini session as the entries ``roost log`` and the view render."""
    from roost_plugins.gemini.transcript import entries_of

    return entries_of(raw)


def transcript_seqs(path: str) -> set[int]:
    """The queue seqs the Gemini session of roost's file ``path`` holds."""
    from roost_plugins.gemini.transcript import seqs_in_session

    return seqs_in_session(path)


def transcript_lines(path: str) -> list[dict[str, Any]]:
    """Every line of the Gemini session of roost's file ``path`` (all its files)."""
    from roost_plugins.gemini.transcript import session_lines

    return session_lines(path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost gemini``'s arguments."""
    from roost_plugins.gemini import cli

    cli.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``roost gemini ACTION``."""
    from roost_plugins.gemini import cli

    return cli.run(args)


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``gemini``."""
    command = HostCommand(help="put roost into Gemini CLI (MCP server and hooks), or run a hook", add_arguments=add_arguments, run=run)
    return [
        HostSpec(
            name="gemini",
            factory=make_host,
            unavailable=missing,
            transcript_entries=transcript_entries,
            transcript_seqs=transcript_seqs,
            transcript_lines=transcript_lines,
            command=command,
        )
    ]
