"""The ``opencode`` host: a job runs OpenCode's server (``opencode serve``) on one OpenCode
session, whose store roost reads; ``roost opencode install | uninstall`` puts roost's MCP
server into the user's own OpenCode (:mod:`roost_plugins.opencode`)."""

from __future__ import annotations

from roost_core import hookimpl
from roost_core.hosts.lazy import host_factory, lazy, lazy_command
from roost_core.records import HostSpec

make_host = host_factory("roost_plugins.opencode.host:OpenCodeHost")
transcript_entries = lazy("roost_plugins.opencode.transcript:entries_of")
transcript_seqs = lazy("roost_plugins.opencode.transcript:seqs_in_session")


def missing() -> str | None:
    """Why OpenCode cannot run here; None when it can."""
    from roost_core.hosts import program_missing

    return program_missing("ROOST_OPENCODE_BIN", "opencode", "OpenCode")


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``opencode``."""
    command = lazy_command("roost_plugins.opencode.install", help="put roost into OpenCode (its MCP server and plugin)")
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
