"""A Gemini session kept in several files: a resume that runs in a later minute than the
session's first run starts another ``session-<minute>-<id8>.jsonl`` of the same session
(``test_gemini.py`` shows it happen). roost's readers take every file whose first line
names the session: the seqs it holds, ``roost log``'s lines, its usage. The files here are
written as Gemini CLI writes them (the shapes ``test_gemini.py`` checks on the real CLI);
no Gemini CLI needed."""

from __future__ import annotations

import json
from pathlib import Path

from roost_plugins.gemini.transcript import (
    GeminiSession,
    job_home,
    seqs_in_session,
    session_lines,
    write_header,
)

SID = "3b6af868-0a1b-4c2d-8e3f-112233445566"
OTHER = "3b6af868-ffff-4fff-8fff-ffffffffffff"  # the same first 8 characters, another session


def write_chat(path: Path, session_id: str, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"sessionId": session_id, "projectHash": "x", "startTime": "t", "lastUpdated": "t", "kind": "main"}
    path.write_text("".join(json.dumps(line) + "\n" for line in [header, *records]))


def user(text: str, key: str) -> dict:
    return {"id": key, "type": "user", "content": [{"text": text}]}


def answer(text: str, key: str, total: int = 110) -> dict:
    return {"id": key, "type": "gemini", "content": text, "tokens": {"input": total - 10, "output": 10, "total": total}}


def test_every_file_of_the_session_is_read_and_no_other_sessions(tmp_path):
    session = str(tmp_path / "sessions" / "job1.jsonl")
    write_header(session, SID, str(tmp_path))
    chats = job_home(session) / ".gemini" / "tmp" / "work" / "chats"
    write_chat(chats / "session-2026-12-06T21-10-3b6af868.jsonl", SID, [
        user("[roost seq 1]\nfirst task", "u1"), answer("", "a1"), answer("done first", "a1"), {"$set": {"lastUpdated": "t"}},
    ])
    write_chat(chats / "session-2026-12-06T21-11-3b6af868.jsonl", SID, [
        user("[roost seq 2]\nsecond task", "u2"), answer("done second", "a2"),
    ])
    write_chat(chats / "session-2026-12-06T21-12-3b6af868.jsonl", OTHER, [user("[roost seq 9]\nnot ours", "u9")])

    assert seqs_in_session(session) == {1, 2}
    lines = session_lines(session)
    # roost's header, then each file in time order; a message written twice shows once.
    assert [line.get("id") for line in lines if "id" in line] == ["u1", "a1", "u2", "a2"]
    assert next(line for line in lines if line.get("id") == "a1")["content"] == "done first"
    reader = GeminiSession(SID, job_home(session) / ".gemini")
    reader.scan()
    assert reader.seqs == {1, 2} and reader.tokens == 220 and len(reader.files) == 2
    # A third file appears later (another resume): the next scan reads it too.
    write_chat(chats / "session-2026-12-06T21-13-3b6af868.jsonl", SID, [user("[roost seq 3]\nthird", "u3"), answer("ok", "a3")])
    assert reader.scan() == {3} and reader.tokens == 330


def test_roost_log_renders_every_file_of_the_session(tmp_path):
    from roost_plugins.gemini.transcript import entries_of

    session = str(tmp_path / "job2.jsonl")
    write_header(session, SID, str(tmp_path))
    chats = job_home(session) / ".gemini" / "tmp" / "work" / "chats"
    write_chat(chats / "session-2026-12-06T21-10-3b6af868.jsonl", SID, [user("[roost seq 1]\nfirst task", "u1"), answer("done first", "a1")])
    write_chat(chats / "session-2026-12-06T21-11-3b6af868.jsonl", SID, [user("[roost seq 2]\nsecond task", "u2"), answer("done second", "a2")])
    shown = [(entry.role, entry.text) for line in session_lines(session) for entry in entries_of(line)]
    assert shown == [("user", "first task"), ("assistant", "done first"), ("user", "second task"), ("assistant", "done second")]


def test_a_users_session_file_is_read_with_the_others_of_its_session_beside_it(tmp_path):
    # What a user's own Gemini CLI's hooks name (transcript_path): roost mcp reads it with
    # this host's transcript_seqs.
    chats = tmp_path / ".gemini" / "tmp" / "work" / "chats"
    first = chats / "session-2026-12-06T21-10-3b6af868.jsonl"
    write_chat(first, SID, [user("hello", "u0"), answer("", "a0")])
    write_chat(chats / "session-2026-12-06T21-11-3b6af868.jsonl", SID, [
        {"id": "u1", "type": "user", "content": [{"functionResponse": {"id": "c", "name": "mcp_roost_roost_agents", "response": {
            "output": "<untrusted_context>\nlisting\n</untrusted_context>\n\n\n<hook_context>[roost seq 4]\n&lt;agent-message&gt;</hook_context>"}}}]},
    ])
    write_chat(chats / "session-2026-12-06T21-12-3b6af868.jsonl", OTHER, [user("[roost seq 9]\nnot ours", "u9")])
    assert seqs_in_session(str(first)) == {4}


def test_roost_log_shows_the_users_words_of_a_prompt_that_also_holds_agent_items(tmp_path):
    # Issue 49.A3: a prompt that starts a run with a user's reply and an agent message
    # (the reply first) shows both: the reply as the user's line, the message as itself,
    # its notice not as the user's words.
    from roost_core.policy import NO_USER_AUTHORITY
    from roost_plugins.envelope import frame
    from roost_plugins.gemini.transcript import entries_of

    message = frame("lead", "f1234567", "parent", "message", "check the docs")
    session = str(tmp_path / "job3.jsonl")
    write_header(session, SID, str(tmp_path))
    chats = job_home(session) / ".gemini" / "tmp" / "work" / "chats"
    write_chat(chats / "session-2026-12-06T21-10-3b6af868.jsonl", SID, [
        user(f"[roost seq 2 3]\nand tidy up\n\n{message}", "u1"), answer("ok", "a1")])
    entries = [entry for line in session_lines(session) for entry in entries_of(line)]
    assert [(entry.role, entry.text) for entry in entries[:1]] == [("user", "and tidy up")]
    assert entries[1].custom_type is not None and "check the docs" in entries[1].text
    assert NO_USER_AUTHORITY.splitlines()[0] not in " ".join(entry.text or "" for entry in entries if entry.role == "user")
    assert [entry.role for entry in entries[2:]] == ["assistant"]
