"""Agent hosts that ship with the core: ``scripted`` (deterministic, no LLM), ``shell``,
``pi`` (the real pi coding agent) and ``claude`` (Claude Code, ``roost_core.claude``)."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

from roost_core.records import HostSpec

if TYPE_CHECKING:
    from roost_core.hosts.base import AgentHost, JobInfo, WorkerServices


def _scripted(job: JobInfo, services: WorkerServices) -> AgentHost:
    from roost_core.hosts.scripted import ScriptedHost

    return ScriptedHost()


def _shell(job: JobInfo, services: WorkerServices) -> AgentHost:
    from roost_core.hosts.shell import ShellHost

    return ShellHost()


def _pi(job: JobInfo, services: WorkerServices) -> AgentHost:
    from roost_core.hosts.pi import PiHost

    return PiHost()


def _claude(job: JobInfo, services: WorkerServices) -> AgentHost:
    from roost_core.claude.host import ClaudeHost

    return ClaudeHost()


def _claude_session(cwd: str) -> str:
    from roost_core.claude import new_session_file

    return new_session_file(cwd)


def program_missing(variable: str, program: str, what: str) -> str | None:
    """Why a host's program cannot be found where its workers will look (``$variable``,
    else ``program`` on this process's PATH, which the workers inherit); None when it is
    there. Checked when a job is made, so a missing agent is a refusal at once, not a
    worker that crashes until it is given up."""
    configured = os.environ.get(variable)
    if configured:
        return None if shutil.which(configured) else f"{what} is not installed: {variable}={configured!r} is not an executable"
    if shutil.which(program):
        return None
    return f"{what} is not installed: no `{program}` on the daemon's PATH and no {variable}; install it or set {variable}"


def _pi_missing() -> str | None:
    return program_missing("ROOST_PI_BIN", "pi", "pi")


def _claude_missing() -> str | None:
    return program_missing("ROOST_CLAUDE_BIN", "claude", "Claude Code")


def builtin_hosts() -> list[HostSpec]:
    return [
        HostSpec(name="scripted", factory=_scripted),
        HostSpec(name="shell", factory=_shell, takes_messages=False),
        HostSpec(name="pi", factory=_pi, unavailable=_pi_missing),
        HostSpec(name="claude", factory=_claude, session_file=_claude_session, unavailable=_claude_missing),
    ]
