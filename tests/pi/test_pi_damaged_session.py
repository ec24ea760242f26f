"""The real pi resuming a damaged session file under a roost worker (host ``pi``).

pi 0.73 starts a session file afresh when its first entry is not a session header (every
entry in it is gone, acknowledged items included), and appends its next entry right after
a torn last line (so that entry is torn too). The pi host puts a header first and ends a
torn last line before it starts pi; pi skips lines that are not JSON. What the resume
skipped is in the job's log."""

from __future__ import annotations

import json
from pathlib import Path

from pikit import message_text, user_messages

from roost_core.transcript import read_entries


def test_pi_resumes_a_session_file_with_no_header_first_a_torn_tail_and_garbage(pi_kit, write_config):
    write_config({"reapAfterSeconds": 0.5})
    fake = pi_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = pi_kit.daemon()
    job = daemon.start_job("first task", host="pi", name="keeper")
    daemon.wait_job(job, "done", timeout=60)
    daemon.wait_reaped(job)
    path = Path(daemon.record(job)["session"])
    lines = [line for line in path.read_bytes().split(b"\n") if line]
    # The header goes last, a line of garbage in the middle, and a torn last line.
    damaged = [*lines[1:2], b"\x00\xff not json at all", *lines[2:], lines[0], b'{"type":"message","id":"torn","message":{"ro']
    path.write_bytes(b"\n".join(damaged))
    daemon.call("reply", job=job, text="after the damage")
    row = daemon.wait_job(job, "done", timeout=60)
    entries = read_entries(path)
    texts = [message_text(e["message"]) for e in user_messages(entries)]
    raw = [line for line in path.read_bytes().split(b"\n") if line]
    log = (daemon.paths.jobs_dir / f"{job}.log").read_text()
    assert row["state"] == "done" and row["summary"] == "ok: after the damage", row
    # Nothing was wiped: the first task and its answer are still there, and pi's new
    # entries stand on lines of their own.
    assert texts == ["first task", "after the damage"], texts
    assert all(line in raw for line in damaged), "a line that was in the file is gone"
    assert sum(1 for line in raw if not _json(line)) == 2  # the garbage and the torn line, as they were
    # pi resumed with its history: the model saw the first task again.
    last = fake.requests()[-1]
    assert any("first task" in message_text(m) for m in last["messages"])
    assert "no session header first" in log and "its last line is torn" in log and "skipped (not JSON" in log
    assert "a copy of its header now leads it" in log


def _json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True
