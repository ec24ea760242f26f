"""Session files: the writer's id chain, torn tails, and the restore check's seqs."""

from __future__ import annotations

import json
import os
import stat

from roost_core.transcript import (
    AGENT_MESSAGE_TYPE,
    SessionWriter,
    content_text,
    parse_entry,
    read_entries,
    seqs_in,
)


def test_a_new_session_file_starts_with_a_v3_header(tmp_path):
    path = tmp_path / "sessions" / "s.jsonl"
    writer = SessionWriter(path, cwd="/work", session_id="sess-1")
    writer.close()
    entries = read_entries(path)
    assert len(entries) == 1
    header = entries[0]
    assert header["type"] == "session" and header["version"] == 3
    assert header["id"] == "sess-1" and header["cwd"] == "/work"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_entries_chain_parent_ids(tmp_path):
    path = tmp_path / "s.jsonl"
    writer = SessionWriter(path)
    first = writer.message("user", [{"type": "text", "text": "hi"}], roost={"seq": 1, "kind": "reply"})
    second = writer.message("assistant", [{"type": "text", "text": "hello"}])
    third = writer.append("custom", customType="roost-run", data={})
    writer.close()
    assert first["parentId"] is None
    assert second["parentId"] == first["id"]
    assert third["parentId"] == second["id"]
    assert len({first["id"], second["id"], third["id"]}) == 3
    assert [e.get("id") for e in read_entries(path)[1:]] == [first["id"], second["id"], third["id"]]


def test_reopening_continues_the_chain_without_a_second_header(tmp_path):
    path = tmp_path / "s.jsonl"
    writer = SessionWriter(path)
    last = writer.message("user", "one")
    session_id = writer.session_id
    writer.close()
    again = SessionWriter(path, session_id="ignored")
    assert again.session_id == session_id
    entry = again.message("user", "two")
    again.close()
    entries = read_entries(path)
    assert sum(1 for e in entries if e["type"] == "session") == 1
    assert entry["parentId"] == last["id"]


def test_a_torn_tail_is_skipped_on_read_and_repaired_before_the_next_write(tmp_path):
    path = tmp_path / "s.jsonl"
    writer = SessionWriter(path)
    kept = writer.message("user", "kept")
    writer.close()
    with open(path, "ab") as fh:
        fh.write(b'{"type":"message","id":"torn","mess')  # a crash mid-write
    assert [e.get("id") for e in read_entries(path)][-1] == kept["id"]
    writer = SessionWriter(path)
    new = writer.message("user", "after the crash")
    writer.close()
    entries = read_entries(path)
    assert [e.get("id") for e in entries[1:]] == [kept["id"], new["id"]]
    assert new["parentId"] == kept["id"]
    assert path.read_bytes().endswith(b"\n")
    # Every line but the torn one is whole JSON.
    lines = path.read_bytes().split(b"\n")[:-1]
    broken = [line for line in lines if not _is_json(line)]
    assert broken == [b'{"type":"message","id":"torn","mess']


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def test_read_entries_of_a_missing_file_is_empty(tmp_path):
    assert read_entries(tmp_path / "none.jsonl") == []


def test_seqs_in_finds_agent_items_and_user_replies():
    entries = [
        {"type": "session", "id": "s"},
        {"type": "custom_message", "customType": AGENT_MESSAGE_TYPE, "details": {"seq": 3, "from": "a1b2c3d4"}},
        {"type": "message", "message": {"role": "user", "content": "x"}, "roost": {"seq": 1, "kind": "reply"}},
        {"type": "message", "message": {"role": "user", "content": "y"}, "roost": {"seq": 7, "kind": "reply"}},
        # Not ours, or not a seq:
        {"type": "custom_message", "customType": "other-extension", "details": {"seq": 99}},
        {"type": "custom_message", "customType": AGENT_MESSAGE_TYPE, "details": {"seq": True}},
        {"type": "custom_message", "customType": AGENT_MESSAGE_TYPE, "details": {"seq": "4"}},
        {"type": "custom_message", "customType": AGENT_MESSAGE_TYPE},
        {"type": "custom_message", "customType": AGENT_MESSAGE_TYPE, "details": None},
        {"type": "message", "message": {"role": "user", "content": "z"}, "roost": "5"},
        {"type": "message", "message": {"role": "user", "content": "z"}},
    ]
    assert seqs_in(entries) == {1, 3, 7}


def test_seqs_in_a_written_transcript(tmp_path):
    path = tmp_path / "s.jsonl"
    writer = SessionWriter(path)
    writer.message("user", [{"type": "text", "text": "task"}], roost={"seq": 1, "kind": "reply"})
    writer.append("custom_message", customType=AGENT_MESSAGE_TYPE, content="m", display=True, details={"seq": 2, "kind": "message"})
    writer.close()
    assert seqs_in(read_entries(path)) == {1, 2}


def test_content_text_and_parse_entry():
    assert content_text("plain") == "plain"
    assert content_text([{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}, "junk"]) == "ab"
    assert content_text(None) == ""
    entry = parse_entry({"type": "message", "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}})
    assert (entry.type, entry.role, entry.text) == ("message", "assistant", "hi")
    custom = parse_entry({"type": "custom_message", "customType": AGENT_MESSAGE_TYPE, "content": "c", "details": {"seq": 1}})
    assert (custom.custom_type, custom.text, custom.details) == (AGENT_MESSAGE_TYPE, "c", {"seq": 1})
