"""The ``codex`` host: a job runs the Codex CLI headless (``codex exec --json``, then
``codex exec resume``) in Codex's own session file; ``roost codex install | uninstall``
puts roost into the user's own Codex."""

from __future__ import annotations

from roost_core import hookimpl
from roost_core.hosts.lazy import host_factory, lazy, lazy_command
from roost_core.records import HostSpec

make_host = host_factory("roost_plugins.codex.host:CodexHost")
transcript_entries = lazy("roost_plugins.codex.transcript:entries_of")
transcript_seqs = lazy("roost_plugins.codex.transcript:seqs_in_session")


def missing() -> str | None:
    """Why Codex cannot run here; None when it can."""
    from roost_core.hosts import program_missing

    return program_missing("ROOST_CODEX_BIN", "codex", "Codex")


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``codex``."""
    command = lazy_command("roost_plugins.codex.install", help="put roost into Codex (MCP server and hooks)")
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
