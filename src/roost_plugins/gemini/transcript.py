"""A Gemini CLI session as roost reads it.

**Where it is.** A job's session file (``job.session``) is roost's own: one line,
``{"type": "gemini_session", "sessionId": ID, "cwd": ...}``, written by the host when the
job first opens. Gemini CLI runs with a home of the job's own beside it
(:func:`job_home`, see :mod:`roost_plugins.gemini.host`) and keeps the session itself in
``<job home>/.gemini/tmp/<project>/chats/session-<YYYY-MM-DDTHH-MM>-<ID[:8]>.jsonl``: named after
the minute a run started it, so a resume in a later minute can start a second file of the
same session (whose header names the same ``sessionId``). The session is every such file
whose header names ID, read in name (time) order.

**What it says.** Lines are a header, ``{"$set": ...}`` patches, and messages
``{id, type: "user" | "gemini", content, tokens, toolCalls}``; an update of a message is a
new line with the same ``id`` (the last one holds). roost reads:

- the queue seqs handed over: a user text that starts with the marker line (roost's
  prompt, or the reason of an ``AfterAgent`` denial, which Gemini CLI records as a user
  message), and the ``<hook_context>`` that ends a tool's response (an ``AfterTool``
  hook's ``additionalContext``), when it starts with the marker. Tool outputs before that
  context are never read for a marker;
- the usage: each ``gemini`` message's ``tokens.total``, once per message id.
"""

from __future__ import annotations

import glob
import html
import json
import re
from pathlib import Path
from typing import Any

from roost_core.envelope_rules import NO_USER_AUTHORITY
from roost_core.hosts.handover import handed_items, marked_seqs
from roost_core.hosts.process import SessionTail
from roost_core.records import TranscriptEntry

#: The type of the header line of roost's own session file.
HEADER_TYPE = "gemini_session"
#: An ``AfterTool`` hook's context, as Gemini CLI appends it to the end of a tool's output.
_HOOK_CONTEXT = re.compile(r"<hook_context>(.*)</hook_context>\s*\Z", re.DOTALL)


def read_header(path: str) -> dict[str, Any] | None:
    """The header of roost's session file ``path`` (None: none written yet)."""
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline()
    except FileNotFoundError:
        return None
    try:
        header = json.loads(first)
    except ValueError:
        return None
    if isinstance(header, dict) and header.get("type") == HEADER_TYPE and isinstance(header.get("sessionId"), str):
        return header
    return None


def write_header(path: str, session_id: str, cwd: str) -> None:
    """Start roost's session file ``path`` for Gemini session ``session_id``."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": HEADER_TYPE, "sessionId": session_id, "cwd": cwd}) + "\n")


def job_home(session: str) -> Path:
    """The home Gemini CLI runs with (``GEMINI_CLI_HOME``) for roost's session file
    ``session``: a folder beside it."""
    path = Path(session)
    return path.parent / f"{path.stem}.gemini-home"


def session_files(session_id: str, folder: Path, *, beside: bool = False) -> list[str]:
    """Gemini CLI's files of session ``session_id`` in its folder ``folder`` (a
    ``.gemini``; with ``beside``, a ``chats`` folder itself), oldest first: every
    ``tmp/*/chats/session-*-<id8>.jsonl`` whose header names the session."""
    chats = folder if beside else folder / "tmp" / "*" / "chats"
    pattern = str(chats / f"session-*-{glob.escape(session_id[:8])}.jsonl")
    found = []
    for path in glob.glob(pattern):
        try:
            with open(path, encoding="utf-8") as fh:
                header = json.loads(fh.readline() or "{}")
        except (OSError, ValueError):
            continue
        if isinstance(header, dict) and header.get("sessionId") == session_id:
            found.append(path)
    return sorted(found, key=lambda p: (Path(p).name, p))


def user_seqs(message: dict[str, Any]) -> list[int]:
    """The seqs a ``user`` message of Gemini CLI's session carries (see the module)."""
    seqs: list[int] = []
    for part in message.get("content") or []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            seqs.extend(marked_seqs(part["text"]))
        elif isinstance(part.get("functionResponse"), dict):
            seqs.extend(marked_seqs(hook_context(part["functionResponse"])))
    return seqs


def hook_context(response: dict[str, Any]) -> str:
    """The ``<hook_context>`` that ends a function response's output ("" when none), as
    the hook wrote it: Gemini CLI escapes ``<``, ``>`` and ``&`` in it (the model reads
    ``&lt;agent-message ...&gt;``)."""
    output = (response.get("response") or {}).get("output")
    match = _HOOK_CONTEXT.search(output) if isinstance(output, str) else None
    return html.unescape(match[1]) if match else ""


class GeminiSession:
    """A Gemini session read as it grows, across its files: ``seqs`` (every queue seq
    found), ``tokens`` (every answer's tokens), ``files`` (the files found)."""

    def __init__(self, session_id: str, folder: Path, *, beside: bool = False) -> None:
        self.session_id = session_id
        self.folder = folder
        self.beside = beside
        self.tails: dict[str, SessionTail] = {}
        self.seqs: set[int] = set()
        self._answers: dict[str, int] = {}
        self.tokens = 0

    @property
    def files(self) -> list[str]:
        return list(self.tails)

    def scan(self) -> set[int]:
        """Read what was appended (a new file of the session too); the seqs found."""
        for path in session_files(self.session_id, self.folder, beside=self.beside):
            self.tails.setdefault(path, SessionTail(path))
        found: set[int] = set()
        for tail in self.tails.values():
            entries, _from_start = tail.read()
            for entry in entries:
                if entry.get("type") == "user":
                    found.update(user_seqs(entry))
                elif entry.get("type") == "gemini" and isinstance(entry.get("id"), str):
                    tokens = (entry.get("tokens") or {}).get("total")
                    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
                        self.tokens += tokens - self._answers.get(entry["id"], 0)
                        self._answers[entry["id"]] = tokens
        self.seqs |= found
        return found


def seqs_in_session(path: str) -> set[int]:
    """The queue seqs a session holds: ``path`` is roost's file of a job (none before its
    first run), or one of Gemini CLI's own files of a user's session (what its hooks name
    as ``transcript_path``: every file of that session beside it is read)."""
    header = read_header(path)
    if header is not None:
        session = GeminiSession(header["sessionId"], job_home(path) / ".gemini")
    else:
        with open(path, encoding="utf-8") as fh:
            first = json.loads(fh.readline() or "{}")
        if not isinstance(first, dict) or not isinstance(first.get("sessionId"), str):
            raise ValueError(f"{path} is not a Gemini CLI session file")
        session = GeminiSession(first["sessionId"], Path(path).parent, beside=True)
    session.scan()
    return session.seqs


def session_lines(path: str) -> list[dict[str, Any]]:
    """Every line of the session of roost's file ``path``: roost's header, then each file's
    lines in order, a message updated later shown once, where it first appeared, as its
    last line says."""
    header = read_header(path)
    if header is None:
        return []
    lines: list[dict[str, Any]] = [header]
    where: dict[str, int] = {}
    for file in session_files(header["sessionId"], job_home(path) / ".gemini"):
        tail = SessionTail(file)
        entries, _ = tail.read()
        for entry in entries:
            key = entry.get("id")
            if isinstance(key, str) and key in where:
                lines[where[key]] = entry
                continue
            if isinstance(key, str):
                where[key] = len(lines)
            lines.append(entry)
    return lines


# ---------------------------------------------------------------------- for people (roost log)


def strip_marker(text: str) -> str:
    """``text`` without roost's marker line."""
    if marked_seqs(text):
        return text.split("\n", 1)[1] if "\n" in text else ""
    return text


def prompt_entries(text: str, raw: dict[str, Any]) -> list[TranscriptEntry]:
    """A user text: the user's own words (a prompt, a task, a reply) as the user's
    message, then roost's agent items (each framed, its notice after it) as agent
    messages; roost's marker line is not shown."""
    agents = handed_items(text)
    words = strip_marker(text)
    for entry in agents:
        words = words.replace(f"{entry.text}\n{NO_USER_AUTHORITY}", "").replace(entry.text, "")
    words = words.strip() if agents else words
    own = [TranscriptEntry(type="message", role="user", text=words, raw=raw)] if words else []
    return [*own, *agents]


def entries_of(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One line of a Gemini session as the entries the render plugin knows (pi's shapes):
    prompts, answers with their tool calls, tool results, and roost's hand-overs as agent
    messages. Headers, patches and the CLI's own session context are not shown."""
    kind = raw.get("type")
    if kind == "user":
        out: list[TranscriptEntry] = []
        for part in raw.get("content") or []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                text = part["text"]
                if not marked_seqs(text) and text.lstrip().startswith("<session_context>"):
                    continue
                out.extend(prompt_entries(text, raw))
            elif isinstance(part.get("functionResponse"), dict):
                response = part["functionResponse"]
                output = (response.get("response") or {}).get("output")
                shown = _HOOK_CONTEXT.sub("", output).strip() if isinstance(output, str) else json.dumps(response.get("response"))
                shaped = {"message": {"role": "toolResult", "toolName": str(response.get("name") or "tool"), "isError": False}}
                out.append(TranscriptEntry(type="message", role="toolResult", text=shown, raw=shaped))
                out.extend(handed_items(hook_context(response)))
        return out
    if kind == "gemini":
        calls = [{"type": "toolCall", "name": call.get("name"), "arguments": call.get("args")}
                 for call in raw.get("toolCalls") or [] if isinstance(call, dict)]
        content = raw.get("content")
        text = content if isinstance(content, str) else ""
        if not text and not calls:
            return []
        return [TranscriptEntry(type="message", role="assistant", text=text, raw={"message": {"role": "assistant", "content": calls}})]
    return []
