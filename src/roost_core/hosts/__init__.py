"""Agent hosts that ship with the core: ``scripted`` (deterministic, no LLM), ``shell`` and
``pi`` (the real pi coding agent)."""

from __future__ import annotations

from roost_core.records import HostSpec


def _scripted(job, services):
    from roost_core.hosts.scripted import ScriptedHost

    return ScriptedHost()


def _shell(job, services):
    from roost_core.hosts.shell import ShellHost

    return ShellHost()


def _pi(job, services):
    from roost_core.hosts.pi import PiHost

    return PiHost()


def builtin_hosts() -> list[HostSpec]:
    return [
        HostSpec(name="scripted", factory=_scripted),
        HostSpec(name="shell", factory=_shell, takes_messages=False),
        HostSpec(name="pi", factory=_pi),
    ]
