"""The ``qwen`` host: a job runs headless Qwen Code (``qwen -p``, stream-json) in Qwen
Code's own session file, which reads its own way; ``roost qwen install | uninstall | hook
EVENT`` puts roost into the user's own Qwen Code. The code is in :mod:`roost_plugins.qwen`."""

from __future__ import annotations

from roost_core import hookimpl
from roost_core.hosts.lazy import host_factory, lazy, lazy_command
from roost_core.records import HostSpec

make_host = host_factory("roost_plugins.qwen.host:QwenHost")
session_file = lazy("roost_plugins.qwen:new_session_file")
transcript_entries = lazy("roost_plugins.qwen.transcript:entries_of")
transcript_seqs = lazy("roost_plugins.qwen.transcript:seqs_in_session")


def missing() -> str | None:
    """Why Qwen Code cannot run here; None when it can."""
    from roost_core.hosts import program_missing
    from roost_plugins.qwen import BINARY_ENV

    return program_missing(BINARY_ENV, "qwen", "Qwen Code")


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``qwen``."""
    command = lazy_command("roost_plugins.qwen.cli", help="put roost into Qwen Code (MCP server and hooks), or run a hook")
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
