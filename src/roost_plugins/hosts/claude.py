"""The ``claude`` host: a job runs headless Claude Code (``claude -p``) in Claude Code's own
transcript, which reads its own way; ``roost claude install | uninstall | hook EVENT`` puts
roost into the user's own Claude Code."""

from __future__ import annotations

from roost_core import hookimpl
from roost_core.hosts.lazy import host_factory, lazy, lazy_command
from roost_core.records import HostSpec

make_host = host_factory("roost_plugins.claude.host:ClaudeHost")
session_file = lazy("roost_plugins.claude:new_session_file")
transcript_entries = lazy("roost_plugins.claude.transcript:entries_of")
transcript_seqs = lazy("roost_plugins.claude.transcript:seqs_in_session")


def missing() -> str | None:
    """Why Claude Code cannot run here; None when it can."""
    from roost_core.hosts import program_missing

    return program_missing("ROOST_CLAUDE_BIN", "claude", "Claude Code")


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``claude``."""
    command = lazy_command("roost_plugins.claude.cli", help="put roost into Claude Code (MCP server and hooks), or run a hook")
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
