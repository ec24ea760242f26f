"""Peer ids: job ids never start with 'f'; foreground ids are 'f' + 7 hex."""

from __future__ import annotations

import os
import re
import uuid

from roost_core import identity
from roost_core.identity import foreground_id, new_job_id, new_token

HEX7 = re.compile(r"^f[0-9a-f]{7}$")
#: A job id: 8 hex digits, never starting with 'f' (a foreground id's mark).
JOB_ID = re.compile(r"^[0-9a-e][0-9a-f]{7}$")


def is_job_id(value: str) -> bool:
    return bool(JOB_ID.match(value))


def is_foreground_id(value: str) -> bool:
    return bool(HEX7.match(value))


def test_job_ids_are_8_hex_and_never_start_with_f():
    ids = [new_job_id() for _ in range(3000)]
    assert all(re.fullmatch(r"[0-9a-f]{8}", job_id) for job_id in ids)
    assert not any(job_id.startswith("f") for job_id in ids)
    assert all(is_job_id(job_id) and not is_foreground_id(job_id) for job_id in ids)


def test_new_job_id_skips_f_prefixed_and_taken_candidates(monkeypatch):
    candidates = iter(["f0000000", "abcdef01", "ffffffff", "abcdef02"])
    monkeypatch.setattr(identity.secrets, "token_hex", lambda n: next(candidates))
    assert new_job_id({"abcdef01"}) == "abcdef02"


def test_foreground_id_is_f_plus_7_hex_of_a_uuid_session_id_from_its_random_tail():
    session_id = "3F2504E0-4F89-11D3-9A0C-0305E82C3301"
    assert foreground_id(session_id) == "f82c3301"
    # UUIDv7 ids made in the same minutes share their leading (time) digits, not their tail.
    assert foreground_id("019ae0f2-1c3b-7a10-8f1e-5d2c9b7a6e11") != foreground_id("019ae0f2-1c3b-7b22-9a4d-0e6f1c2b3d44")
    assert is_foreground_id(foreground_id(session_id))
    assert not is_job_id(foreground_id(session_id))


def test_foreground_id_is_deterministic_and_differs_between_sessions():
    ids = {}
    for _ in range(200):
        session_id = str(uuid.uuid4())
        first = foreground_id(session_id)
        assert first == foreground_id(session_id)
        assert HEX7.match(first)
        ids[session_id] = first
    assert len(set(ids.values())) == len(ids)


def test_foreground_id_of_a_session_id_with_few_hex_digits_is_hashed_deterministically():
    for session_id in ("my-session", "zzzz", "ab-12"):
        value = foreground_id(session_id)
        assert HEX7.match(value)
        assert value == foreground_id(session_id)
    assert foreground_id("my-session") != foreground_id("your-session")


def test_foreground_id_without_a_session_is_random():
    values = {foreground_id(None) for _ in range(50)} | {foreground_id("") for _ in range(50)}
    assert all(HEX7.match(value) for value in values)
    assert len(values) > 90


def test_foreground_ids_of_session_paths_in_one_folder_differ():
    # The daemon falls back to foreground_id(<session file path>) when a registering
    # session has no header yet (a new session file). Paths in one folder share their
    # leading hex-looking characters, so "the first 7 hex digits" of a path is the folder's,
    # and every new session there would get the same peer id and replace the others.
    folder = "/home/dave/.pi/agent/sessions/--work-main--"
    first = foreground_id(f"{folder}/2025-01-01T10-00-00-000Z_a.jsonl")
    second = foreground_id(f"{folder}/2025-01-01T10-00-00-000Z_b.jsonl")
    assert HEX7.match(first) and HEX7.match(second)
    assert first != second


def test_job_and_foreground_ids_never_collide():
    assert not any(is_foreground_id(new_job_id()) for _ in range(500))
    assert not any(is_job_id(foreground_id(str(uuid.uuid4()))) for _ in range(500))


def test_tokens_are_long_and_unique():
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(len(token) >= 40 for token in tokens)


def test_message_ids_differ_between_a_forked_child_and_its_parent():
    """Message ids come from a seeded generator (no syscall per send); a forked child (a
    worker from the fork server) is seeded anew, so it never repeats its parent's ids."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.write(write, " ".join(identity.new_message_id() for _ in range(4)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 1000).decode().split()
    os.close(read)
    parent = [identity.new_message_id() for _ in range(4)]
    assert len(child) == 4 and all(identity.is_message_id(value) for value in child + parent)
    assert child != parent
