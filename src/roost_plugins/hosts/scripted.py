"""The ``scripted`` host: an agent loop with no model, playing a scenario (tests, demos)."""

from __future__ import annotations

from typing import Any

from roost_core import hookimpl
from roost_core.records import HostSpec


def make_host(job: Any, services: Any) -> Any:
    """The host a worker runs (imported in the worker only)."""
    from roost_core.hosts.scripted import ScriptedHost

    return ScriptedHost()


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``scripted``: it writes roost's own session format."""
    return [HostSpec(name="scripted", factory=make_host)]
