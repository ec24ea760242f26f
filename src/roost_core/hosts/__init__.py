"""Agent hosts that ship with the core: ``scripted`` (deterministic, no LLM), ``shell``,
``pi`` (the real pi coding agent) and ``claude`` (Claude Code, ``roost_core.claude``)."""

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


def _claude(job, services):
    from roost_core.claude.host import ClaudeHost

    return ClaudeHost()


def _claude_session(cwd: str) -> str:
    from roost_core.claude import new_session_file

    return new_session_file(cwd)


def builtin_hosts() -> list[HostSpec]:
    return [
        HostSpec(name="scripted", factory=_scripted),
        HostSpec(name="shell", factory=_shell, takes_messages=False),
        HostSpec(name="pi", factory=_pi),
        HostSpec(name="claude", factory=_claude, session_file=_claude_session),
    ]
