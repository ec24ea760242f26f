"""The ``pi`` host: a job runs the real pi coding agent (``pi --mode rpc``), and ``roost pi
install | uninstall | extension-path`` puts roost's extension into the user's own pi."""

from __future__ import annotations

from roost_core import hookimpl
from roost_core.hosts.lazy import host_factory, lazy, lazy_command
from roost_core.records import HostSpec

make_host = host_factory("roost_core.hosts.pi:PiHost")
attach = lazy("roost_core.pi.attach:attach_plan")


def missing() -> str | None:
    """Why pi cannot run here (no ``$ROOST_PI_BIN``, no ``pi`` on PATH); None when it can."""
    from roost_core.hosts import program_missing

    return program_missing("ROOST_PI_BIN", "pi", "pi")


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute ``pi``: pi writes roost's own session format (pi's v3 JSONL)."""
    command = lazy_command("roost_core.pi.cli", help="install the roost extension into the pi coding agent")
    # The agent a `roost start` without a host runs, and the one host with warm workers.
    return [HostSpec(name="pi", factory=make_host, unavailable=missing, command=command, default_agent=True, warm_pool=True, attach=attach, attach_interrupts=True)]
