"""The ``qwen`` host: a job runs headless Qwen Code (``qwen -p``, stream-json) in Qwen
Code's own session file, which reads its own way; ``roost qwen install | uninstall | hook
EVENT`` puts roost into the user's own Qwen Code. The code is in :mod:`roost_plugins.qwen`."""

from __future__ import annotations

import argparse
from typing import Any

from roost_core import hookimpl
from roost_core.records import HostCommand, HostSpec, TranscriptEntry


def make_host(job: Any, services: Any) -> Any:
    """The host a worker runs (imported in the worker only)."""
    from roost_plugins.qwen.host import QwenHost

    return QwenHost()


def session_file(cwd: str) -> str:
    """A new job's session file: where Qwen Code keeps a session of ``cwd``."""
    from roost_plugins.qwen import new_session_file

    return new_session_file(cwd)


def missing() -> str | None:
    """Why Qwen Code cannot run here; None when it can."""
    from roost_core.hosts import program_missing
    from roost_plugins.qwen import BINARY_ENV

    return program_missing(BINARY_ENV, "qwen", "Qwen Code")


def transcript_entries(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One Qwen Code session record as the entries ``roost log`` and the view render."""
    from roost_plugins.qwen.transcript import entries_of

    return entries_of(raw)


def transcript_seqs(path: str) -> set[int]:
    """The queue seqs a Qwen Code session file holds."""
    from roost_plugins.qwen.transcript import seqs_in_session

    return seqs_in_session(path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost qwen``'s arguments."""
    from roost_plugins.qwen import cli

    cli.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``roost qwen ACTION``."""
    from roost_plugins.qwen import cli

    return cli.run(args)


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``qwen``."""
    command = HostCommand(help="put roost into Qwen Code (MCP server and hooks), or run a hook", add_arguments=add_arguments, run=run)
    return [
        HostSpec(
            name="qwen",
            factory=make_host,
            session_file=session_file,
            unavailable=missing,
            transcript_entries=transcript_entries,
            transcript_seqs=transcript_seqs,
            command=command,
        )
    ]
