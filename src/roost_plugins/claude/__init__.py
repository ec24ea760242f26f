"""roost for Claude Code: both of its sides in one package (see ``docs/hosts.md``).

- ``host``: the background host (``--host claude``): a worker runs headless Claude Code
  (``claude -p`` with stream-json in and out) on one session.
- ``hook``: ``roost claude hook EVENT``, the command Claude Code runs for its hooks; it
  hands over what waits for the session (mid-turn on ``PostToolUse``, at the end of a run
  on ``Stop``, on the next prompt on ``UserPromptSubmit``).
- ``install``: ``roost claude install | uninstall``: the MCP server (``roost mcp``) and
  the hooks in the user's Claude Code settings.
- ``transcript``: where Claude Code keeps a session's transcript, and which queue seqs it
  already holds (the restore check, and "taken" for acks).

Agent items never reach Claude Code as user input: they arrive as hook context (a
``system`` entry after a tool result), as the reason of a blocked stop, or as the result of
``roost_inbox``. Each such text starts with a marker line, ``[roost seq 3 4]``, that names
the queue seqs it carries, so the transcript itself says what Claude Code has taken
(:mod:`roost_core.hosts.handover`, which the bridged hosts share).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from pathlib import Path

from roost_core.agentenv import agent_home, find_program

#: The Claude Code versions roost's tests ran (tests/claude/package-lock.json); a job on
#: another version says so once (:attr:`roost_core.hosts.process.ProcessHost.tested_versions`).
TESTED_VERSIONS = ("2.1.332",)

#: The user message that opens a turn for agent items when the session is idle. It is
#: roost's own fixed text; the items themselves come as that prompt's hook context.
WAKE_PROMPT = "[roost] Agent items arrived; they are in the context below. They are not from the user."
#: Claude Code's name for the roost MCP server's tools: ``mcp__<server>__<tool>``.
SERVER_NAME = "roost"
#: The MCP tool a job's Claude Code asks for permission (``--permission-prompt-tool``):
#: roost opens a dialog that the user answers (``roost answer JOB allow|deny``).
PERMISSION_TOOL = "roost_permission"
#: Claude Code makes a session's first model call without waiting for the MCP servers of
#: ``~/.claude.json`` (it waits only for those given with ``--mcp-config``, as a job's
#: are), so a server slow to start (Python and the MCP SDK on a loaded machine) leaves its
#: tools out of that call. ``roost claude install`` sets two things that make it wait:
#: ``alwaysLoad`` on roost's server entry (never deferred behind tool search; the first
#: call waits for it, but at most 5 s) and this variable in the settings' ``env``: how
#: long the first call waits for the MCP servers, in milliseconds (Claude Code's own
#: connect timeout is 30 s).
STARTUP_WAIT_ENV = "CLAUDE_CODE_MCP_STARTUP_WAIT_MS"
STARTUP_WAIT_MS = "30000"


class ClaudeError(RuntimeError):
    """Claude Code could not be started or did not behave as expected."""


def claude_binary() -> str:
    """The Claude Code program: ``$ROOST_CLAUDE_BIN``, else ``claude`` on PATH."""
    return find_program("ROOST_CLAUDE_BIN", "claude", "Claude Code", ClaudeError)


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """Claude Code's own folder: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    return agent_home(env, "CLAUDE_CONFIG_DIR", ".claude")


def project_folder_name(cwd: str) -> str:
    """How Claude Code names a working directory's transcript folder: every character
    that is not a letter or a digit becomes ``-``."""
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def new_session_file(cwd: str, env: Mapping[str, str] | None = None) -> str:
    """A fresh session's transcript path: ``<config>/projects/<cwd folder>/<uuid>.jsonl``.
    The host starts Claude Code with ``--session-id <uuid>``, so Claude Code writes there."""
    return str(config_dir(env) / "projects" / project_folder_name(cwd) / f"{uuid.uuid4()}.jsonl")


def session_id_of(session_file: str) -> str:
    """The Claude Code session id of a transcript path (its file name)."""
    stem = Path(session_file).stem
    try:
        return str(uuid.UUID(stem))
    except ValueError as exc:
        raise ClaudeError(f"{session_file} is not a Claude Code transcript (its name is not a session id)") from exc


def _prompt_prefix(session_id: str) -> str:
    digest = hashlib.sha256(f"roost:{session_id}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-a{digest[17:20]}-"


def prompt_uuid(session_id: str, seq: int) -> str:
    """The uuid of the user message that carries queue item ``seq`` (a task or a user
    reply). Claude Code keeps a stream-json message's ``uuid`` as its transcript entry's,
    so the transcript says which replies it holds."""
    return f"{_prompt_prefix(session_id)}{seq:012x}"


def seq_of_prompt_uuid(session_id: str, value: str) -> int | None:
    prefix = _prompt_prefix(session_id)
    if not isinstance(value, str) or not value.startswith(prefix):
        return None
    try:
        return int(value[len(prefix):], 16)
    except ValueError:
        return None
