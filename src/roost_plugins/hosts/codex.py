"""The ``codex`` host: a job runs the Codex CLI headless (``codex exec --json``, then
``codex exec resume``) in Codex's own session file; ``roost codex install | uninstall``
puts roost into the user's own Codex."""

from __future__ import annotations

import argparse
from typing import Any

from roost_core import hookimpl
from roost_core.records import HostCommand, HostSpec, TranscriptEntry


def make_host(job: Any, services: Any) -> Any:
    """The host a worker runs (imported in the worker only)."""
    from roost_plugins.codex.host import CodexHost

    return CodexHost()


def missing() -> str | None:
    """Why Codex cannot run here; None when it can."""
    from roost_core.hosts import program_missing

    return program_missing("ROOST_CODEX_BIN", "codex", "Codex")


def transcript_entries(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One rollout line as the entries ``roost log`` and the view render."""
    from roost_plugins.codex.transcript import entries_of

    return entries_of(raw)


def transcript_seqs(path: str) -> set[int]:
    """The queue seqs a Codex rollout holds."""
    from roost_plugins.codex.transcript import seqs_in_session

    return seqs_in_session(path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost codex``'s arguments (:func:`roost_plugins.codex.install.add_arguments`)."""
    from roost_plugins.codex import install

    install.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``roost codex ACTION``."""
    from roost_plugins.codex import install

    return install.run(args)


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``codex``."""
    command = HostCommand(help="put roost into Codex (MCP server and hooks)", add_arguments=add_arguments, run=run)
    return [
        HostSpec(
            name="codex",
            factory=make_host,
            unavailable=missing,
            transcript_entries=transcript_entries,
            transcript_seqs=transcript_seqs,
            command=command,
        )
    ]
