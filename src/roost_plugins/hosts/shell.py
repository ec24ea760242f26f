"""The ``shell`` host: a job that runs a command and takes no agent messages."""

from __future__ import annotations

from typing import Any

from roost_core import hookimpl
from roost_core.records import HostSpec


def make_host(job: Any, services: Any) -> Any:
    """The host a worker runs (imported in the worker only)."""
    from roost_core.hosts.shell import ShellHost

    return ShellHost()


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``shell``: agents cannot message it; it writes roost's own session format."""
    return [HostSpec(name="shell", factory=make_host, takes_messages=False)]
