"""Where an agent CLI roost runs is on this machine: its program and its own folder.

Standard library only: a job's hooks import the hosts' packages that use it, and a hook
must start fast.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def find_program(variable: str, program: str, what: str, error: type[Exception]) -> str:
    """The agent's program: ``$variable``, else ``program`` on PATH; ``error`` (a
    sentence saying how to install it) when it is neither."""
    configured = os.environ.get(variable)
    if configured:
        return configured
    import shutil  # only here: the hooks that import this module never look a program up

    found = shutil.which(program)
    if not found:
        raise error(f"{what} is not installed: put `{program}` on PATH or set {variable}")
    return found


def agent_home(env: Mapping[str, str] | None, variable: str, folder: str) -> Path:
    """The agent's own folder: ``$variable``, else ``~/FOLDER`` (``env`` defaults to this
    process's environment; its ``HOME`` is the home)."""
    env = os.environ if env is None else env
    configured = env.get(variable)
    if configured:
        return Path(configured).expanduser()
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / folder
