"""An OpenCode job's session file, and what OpenCode's own store says roost items reached.

OpenCode keeps its sessions in SQLite (``$XDG_DATA_HOME/opencode/opencode.db``: tables
``session``, ``message`` and ``part``, each row's ``data`` a JSON object). roost never
writes there; a job's session file (in roost's sessions folder) is roost's own JSONL, one
object a line:

- ``{"type": "opencode-session", "id": "ses_...", "db": PATH}``: which OpenCode session
  the job runs, and where its store is;
- ``{"type": "opencode-handover", "callID": ..., "seqs": [...]}``: agent items the roost
  plugin appended to a tool's result mid-turn (written before the plugin gets them);
- ``{"type": "opencode-message", "info": {...}, "parts": [...]}``: a finished OpenCode
  message, copied from the store for ``roost log`` and the view.

Which queue seqs OpenCode holds is read from its store, never from roost's copy:

- a task, a reply or an agent item that opened a turn is a user message's text part
  whose ``metadata.roost.seq`` roost set when it sent it (OpenCode keeps a part's
  metadata; the model never sees it);
- agent items handed over mid-turn are the result of the tool call a handover line names,
  once OpenCode stored that result with roost's marker line (``[roost seq ...]``) in it.
  Only calls roost answered are read, so a tool that prints a marker fakes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roost_core import platform
from roost_core.hosts.handover import handed_items, marker
from roost_core.records import AGENT_MESSAGE_TYPE, TranscriptEntry

SESSION, HANDOVER, MESSAGE = "opencode-session", "opencode-handover", "opencode-message"


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """OpenCode's data folder: ``$XDG_DATA_HOME/opencode``, else ``~/.local/share/opencode``."""
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "share")
    return Path(base) / "opencode"


def store_path(env: Mapping[str, str] | None = None) -> Path:
    """OpenCode's SQLite store (the pinned 1.18's name for its release channel)."""
    return data_dir(env) / "opencode.db"


class SessionFile:
    """A job's session file: read whole at start, appended to as the job goes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.session_id = ""
        self.db = ""
        #: tool call id -> the seqs roost handed over in its result.
        self.handovers: dict[str, list[int]] = {}
        #: The OpenCode messages copied so far, by id.
        self.copied: set[str] = set()
        for line in read_lines(path):
            kind = line.get("type")
            if kind == SESSION:
                self.session_id, self.db = str(line.get("id") or ""), str(line.get("db") or "")
            elif kind == HANDOVER:
                self.handovers[str(line.get("callID"))] = [int(s) for s in line.get("seqs") or []]
            elif kind == MESSAGE:
                self.copied.add(str((line.get("info") or {}).get("id")))

    def append(self, line: dict[str, Any]) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
            fh.flush()
            platform.sync_file(fh.fileno())  # a handover is on disk before OpenCode gets its items

    def start(self, session_id: str, db: str) -> None:
        self.session_id, self.db = session_id, db
        self.append({"type": SESSION, "id": session_id, "db": db})

    def handover(self, call_id: str, seqs: list[int]) -> None:
        self.handovers[call_id] = list(seqs)
        self.append({"type": HANDOVER, "callID": call_id, "seqs": list(seqs)})

    def copy_finished(self, messages: list[dict[str, Any]], *, writer_gone: bool) -> None:
        """Append the finished messages not copied yet. An assistant message is finished
        once OpenCode set its ``time.completed``, or once nothing can write it any more: a
        later message follows it, or no OpenCode runs the session (``writer_gone``: its
        server was killed mid-turn, and that message is never completed); it is copied
        as it stands then. One still being written waits, and so does what follows it."""
        for index, message in enumerate(messages):
            info = message["info"]
            if info["id"] in self.copied:
                continue
            unfinished = info.get("role") == "assistant" and not (info.get("time") or {}).get("completed")
            if unfinished and not writer_gone and index == len(messages) - 1:
                break
            self.copied.add(info["id"])
            self.append({"type": MESSAGE, "info": info, "parts": message["parts"]})


def read_lines(path: str) -> list[dict[str, Any]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = []
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a line cut short by a kill
        if isinstance(line, dict):
            lines.append(line)
    return lines


# ---------------------------------------------------------------------- OpenCode's store


def connect(db: str) -> sqlite3.Connection | None:
    """The store, read-only (None when it does not exist yet)."""
    if not db or not Path(db).exists():
        return None
    connection = sqlite3.connect(f"{Path(db).as_uri()}?mode=ro", uri=True, timeout=10)
    connection.execute("pragma query_only = on")
    return connection


def messages_of(db: str, session_id: str) -> list[dict[str, Any]]:
    """The session's messages as OpenCode's API gives them, ``{"info", "parts"}``, in order."""
    connection = connect(db)
    if connection is None:
        return []
    with contextlib.closing(connection):
        rows = connection.execute("select id, data from message where session_id = ? order by id", (session_id,)).fetchall()
        part_rows = connection.execute("select id, message_id, data from part where session_id = ? order by id", (session_id,)).fetchall()
    parts: dict[str, list[dict[str, Any]]] = {}
    for part_id, message_id, data in part_rows:
        parts.setdefault(message_id, []).append({**json.loads(data), "id": part_id, "messageID": message_id, "sessionID": session_id})
    return [{"info": {**json.loads(data), "id": message_id, "sessionID": session_id}, "parts": parts.get(message_id, [])} for message_id, data in rows]


def session_stored(db: str, session_id: str) -> bool:
    """Whether OpenCode's store at ``db`` holds the session."""
    connection = connect(db)
    if connection is None:
        return False
    with contextlib.closing(connection):
        return connection.execute("select 1 from session where id = ?", (session_id,)).fetchone() is not None


def usage_of(db: str, session_id: str) -> tuple[int, float]:
    """``(tokens, cost)`` the session spent: OpenCode adds each model call's tokens (input,
    output, reasoning, both cache counts) and cost up in its ``session`` row."""
    connection = connect(db)
    if connection is None:
        return 0, 0.0
    with contextlib.closing(connection):
        row = connection.execute(
            "select tokens_input + tokens_output + tokens_reasoning + tokens_cache_read + tokens_cache_write, cost from session where id = ?",
            (session_id,),
        ).fetchone()
    return (int(row[0] or 0), float(row[1] or 0.0)) if row else (0, 0.0)


def roost_meta(part: dict[str, Any]) -> dict[str, Any]:
    meta = part.get("metadata")
    roost = meta.get("roost") if isinstance(meta, dict) else None
    return roost if isinstance(roost, dict) else {}


def seqs_of(messages: list[dict[str, Any]], handovers: dict[str, list[int]]) -> set[int]:
    """The queue seqs OpenCode's store shows (see the module's docstring)."""
    seqs: set[int] = set()
    for message in messages:
        for part in message["parts"]:
            if part.get("type") == "text" and message["info"].get("role") == "user":
                seq = roost_meta(part).get("seq")
                if isinstance(seq, int) and not isinstance(seq, bool):
                    seqs.add(seq)
            elif part.get("type") == "tool" and part.get("callID") in handovers:
                handed = handovers[part["callID"]]
                state = part.get("state") or {}
                if marker(handed) in str(state.get("output") or "").split("\n"):
                    seqs.update(handed)
    return seqs


def seqs_in_session(path: str) -> set[int]:
    """The queue seqs OpenCode holds for the job whose session file is ``path``."""
    session = SessionFile(path)
    if not session.session_id:
        return set()
    return seqs_of(messages_of(session.db, session.session_id), session.handovers)


# ---------------------------------------------------------------------- for people (roost log)


def entries_of(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One line of a job's session file as the entries ``roost log`` and the view render:
    the user's words, roost's agent items (as agent messages), the answers and tool calls,
    and tool results (with any agent items handed over in them)."""
    if raw.get("type") != MESSAGE:
        return []
    info = raw.get("info") or {}
    parts = [part for part in raw.get("parts") or [] if isinstance(part, dict)]
    if info.get("role") == "user":
        out = []
        for part in parts:
            if part.get("type") != "text" or part.get("synthetic"):
                continue
            meta = roost_meta(part)
            text = str(part.get("text") or "").strip("\n")
            if meta.get("kind") not in (None, "reply"):
                details = {key: meta[key] for key in ("seq", "kind", "from", "fromName", "relation", "id", "replyTo") if meta.get(key) is not None}
                out.append(TranscriptEntry(type="custom_message", text=text, custom_type=AGENT_MESSAGE_TYPE, details=details, raw={}))
            else:
                out.append(TranscriptEntry(type="message", role="user", text=text, raw=raw))
        return out
    if info.get("role") != "assistant":
        return []
    calls = [{"type": "toolCall", "name": part.get("tool"), "arguments": (part.get("state") or {}).get("input")} for part in parts if part.get("type") == "tool"]
    text = "".join(str(part.get("text") or "") for part in parts if part.get("type") == "text")
    out = []
    if text or calls:
        out.append(TranscriptEntry(type="message", role="assistant", text=text, raw={"message": {"role": "assistant", "content": calls}}))
    for part in parts:
        if part.get("type") != "tool":
            continue
        state = part.get("state") or {}
        output = str(state.get("output") or state.get("error") or "")
        own, _, handed = output.partition("\n\n[roost seq ")
        shaped = {"message": {"role": "toolResult", "toolName": part.get("tool"), "isError": state.get("status") == "error"}}
        out.append(TranscriptEntry(type="message", role="toolResult", text=own, raw=shaped))
        if handed:
            out.extend(handed_items("[roost seq " + handed))
    return out
