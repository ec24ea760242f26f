"""The ``gemini`` host: a job runs headless Gemini CLI (``gemini -p``) in Gemini CLI's
own session files; ``roost gemini install | uninstall | hook EVENT`` puts roost into the
user's own Gemini CLI. The code is in :mod:`roost_plugins.gemini`."""

from __future__ import annotations

from roost_core import hookimpl
from roost_core.hosts.lazy import host_factory, lazy, lazy_command
from roost_core.records import HostSpec

make_host = host_factory("roost_plugins.gemini.host:GeminiHost")
transcript_entries = lazy("roost_plugins.gemini.transcript:entries_of")
transcript_seqs = lazy("roost_plugins.gemini.transcript:seqs_in_session")
# A Gemini session is kept in several files: its lines are read as one.
transcript_lines = lazy("roost_plugins.gemini.transcript:session_lines")


def missing() -> str | None:
    """Why Gemini CLI cannot run here; None when it can."""
    from roost_core.hosts import program_missing

    return program_missing("ROOST_GEMINI_BIN", "gemini", "Gemini CLI")


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``gemini``."""
    command = lazy_command("roost_plugins.gemini.cli", help="put roost into Gemini CLI (MCP server and hooks), or run a hook")
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
