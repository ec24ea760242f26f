"""roost for Qwen Code (``@qwen-code/qwen-code``): both of its sides in one package (see
``docs/hosts.md``, "Qwen Code").

- ``host``: the background host (``--host qwen``): a worker runs headless Qwen Code
  (``qwen -p`` with stream-json in and out) on one session.
- ``transcript``: where Qwen Code keeps a session, which queue seqs it holds, and how it
  reads in ``roost log`` and the view.
- ``install`` and ``cli``: ``roost qwen install | uninstall | hook EVENT``: ``roost mcp``
  and the hooks in the user's own Qwen Code settings.

Every text roost hands to Qwen Code starts with the marker line ``[roost seq 3 4]``
(:func:`roost_core.hosts.handover.marker`, shared with the Claude Code host) naming the queue seqs
it carries, so the session file itself says what Qwen Code has taken.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path

from roost_core.agentenv import agent_home, find_program

#: The Qwen Code versions roost's tests ran (tests/qwen/package-lock.json); a job on
#: another version says so once (:attr:`roost_core.hosts.process.ProcessHost.tested_versions`).
TESTED_VERSIONS = ("0.24.4",)

#: The variable naming the Qwen Code binary (else ``qwen`` on PATH).
BINARY_ENV = "ROOST_QWEN_BIN"
#: Extra arguments for a job's Qwen Code (for example ``--yolo``).
ARGS_ENV = "ROOST_QWEN_ARGS"
#: Qwen Code's name for the roost MCP server's tools: ``mcp__<server>__<tool>``.
SERVER_NAME = "roost"
#: The events whose hooks roost answers (a job's and ``roost qwen install``'s).
EVENTS = ("UserPromptSubmit", "PostToolUse", "Stop")


class QwenError(RuntimeError):
    """Qwen Code could not be started or did not behave as expected."""


def qwen_binary() -> str:
    """The Qwen Code program: ``$ROOST_QWEN_BIN``, else ``qwen`` on PATH."""
    return find_program(BINARY_ENV, "qwen", "Qwen Code", QwenError)


def qwen_home(env: Mapping[str, str] | None = None) -> Path:
    """Qwen Code's own folder: ``$QWEN_HOME``, else ``~/.qwen``."""
    return agent_home(env, "QWEN_HOME", ".qwen")


def project_folder_name(cwd: str) -> str:
    """How Qwen Code names a working directory's folder: every character that is not a
    letter or a digit becomes ``-`` (as Claude Code does)."""
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def new_session_file(cwd: str, env: Mapping[str, str] | None = None) -> str:
    """A fresh session's file: ``<qwen home>/projects/<cwd folder>/chats/<uuid>.jsonl``.
    The host starts Qwen Code with ``--session-id <uuid>``, so Qwen Code writes there (it
    names the folder after its working directory with symbolic links resolved)."""
    folder = project_folder_name(os.path.realpath(cwd))
    return str(qwen_home(env) / "projects" / folder / "chats" / f"{uuid.uuid4()}.jsonl")


def session_id_of(session_file: str) -> str:
    """The Qwen Code session id of a session file (its name)."""
    stem = Path(session_file).stem
    try:
        return str(uuid.UUID(stem))
    except ValueError as exc:
        raise QwenError(f"{session_file} is not a Qwen Code session file (its name is not a session id)") from exc
