"""Bad input on the real socket of a real daemon: every error code, answered with the
request's id when one was readable, and the daemon always goes on serving."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import pytest
from conftest import DaemonHandle, wait_until
from reliability.kit import Raw

from roost_core.locks import WriterLock
from roost_core.protocol import MAX_FRAME

QUICK = {"default": {"steps": [{"say": "ok: {input}"}]}}


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> DaemonHandle:
    """One daemon for the stateless bad-frame cases (a daemon per case would cost seconds)."""
    home = tmp_path_factory.mktemp("bad-input") / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM") and key != "PI_JOB_TOKEN"}
    env["ROOST_HOME"] = str(home)
    env["ROOST_WORKER_ORPHAN_SECONDS"] = "30"
    handle = DaemonHandle(home, env).start()
    yield handle
    handle.cleanup()


def connect(daemon: DaemonHandle) -> Raw:
    return Raw(daemon.paths.socket)


def assert_error(answer: dict[str, Any], code: str, request_id: Any) -> None:
    assert set(answer) == {"id", "ok", "error"}, answer
    assert answer["ok"] is False, answer
    assert answer["error"]["code"] == code, answer
    assert isinstance(answer["error"]["message"], str) and answer["error"]["message"], answer
    if request_id is None:
        assert answer["id"] is None, answer
    else:
        assert answer["id"] == request_id and type(answer["id"]) is type(request_id), answer


def still_serving(daemon: DaemonHandle) -> dict[str, Any]:
    """Another connection's ``daemon_status`` works, from the same daemon process."""
    assert daemon.process is not None and daemon.process.poll() is None, "the daemon exited"
    with connect(daemon) as conn:
        answer = conn.request({"id": "probe", "op": "daemon_status"})
    assert answer["ok"] is True and answer["id"] == "probe", answer
    assert answer["result"]["pid"] == daemon.process.pid
    return answer["result"]


def extra_connections(daemon: DaemonHandle) -> int:
    """Open connections besides this probe's and the connected workers'. A probe that
    just closed may still be counted for a moment, so callers poll for the value."""
    with connect(daemon) as conn:
        jobs = conn.request({"id": "jobs", "op": "jobs"})["result"]["jobs"]
        status = conn.request({"id": "status", "op": "daemon_status"})["result"]
    return status["connections"] - 1 - sum(1 for row in jobs if row["connected"])


def wait_no_extra_connections(daemon: DaemonHandle, what: str) -> None:
    wait_until(lambda: extra_connections(daemon) == 0, timeout=10, what=what)


def bound(daemon: DaemonHandle) -> Raw:
    """A connection registered as a no-session foreground peer (this test process)."""
    conn = connect(daemon)
    answer = conn.request({"id": "reg", "op": "peer_register", "pid": os.getpid(), "name": "tester"})
    assert answer["ok"] is True, answer
    return conn


# --------------------------------------------------------------------------- bad_json

BAD_JSON_LINES = {
    "not-json": b"this is not json",
    "truncated": b'{"id": 1, "op": "daemon_status"',
    "invalid-utf8": b"\xff\xfe\xfd",
    "invalid-utf8-in-string": b'{"id": 1, "op": "daemon_st\xc3\x28tus"}',
    "array": b'[{"id": 1, "op": "daemon_status"}]',
    "string": b'"daemon_status"',
    "number": b"42",
    "null": b"null",
    "int-past-digit-limit": b'{"id": ' + b"7" * 5000 + b', "op": "daemon_status"}',
}

DEEP_LINES = {
    "deep-arrays": b"[" * 100_000,
    "deep-arrays-closed": b"[" * 100_000 + b"]" * 100_000,
    "deep-objects": b'{"a":' * 100_000,
    "deep-inside-a-request": b'{"id": 1, "op": "start", "task": "x", "scenario": ' + b'{"a":' * 100_000,
}


@pytest.mark.parametrize("line", BAD_JSON_LINES.values(), ids=BAD_JSON_LINES.keys())
def test_bad_json_is_answered_and_the_connection_goes_on(shared, line):
    with connect(shared) as conn:
        assert_error(conn.request(line), "bad_json", None)
        # The same connection still works after the bad frame.
        answer = conn.request({"id": 2, "op": "daemon_status"})
        assert answer["ok"] is True and answer["id"] == 2
    still_serving(shared)


@pytest.mark.parametrize("line", DEEP_LINES.values(), ids=DEEP_LINES.keys())
def test_deep_nesting_is_a_frame_error_and_the_daemon_stays_up(shared, line):
    with connect(shared) as conn:
        answer = conn.request(line)
        assert answer["ok"] is False and answer["id"] is None, answer
        assert answer["error"]["code"] in ("bad_json", "frame_too_large"), answer
        assert conn.request({"id": 3, "op": "daemon_status"})["ok"] is True
    still_serving(shared)


# --------------------------------------------------------------------------- frame_too_large


def test_a_frame_one_byte_over_the_limit_is_refused_and_the_connection_recovers(shared):
    prefix = b'{"id": 1, "op": "daemon_status", "pad": "'
    suffix = b'"}'
    line = prefix + b"x" * (MAX_FRAME + 1 - len(prefix) - len(suffix)) + suffix
    assert len(line) == MAX_FRAME + 1
    with connect(shared) as conn:
        conn.send(line + b"\n" + b'{"id": 2, "op": "daemon_status"}\n{"id": 3, "op": "daemon_status"}\n')
        assert_error(conn.read(), "frame_too_large", None)
        # Exactly one error for the big frame, then the next requests, in order.
        second, third = conn.read(), conn.read()
        assert (second["id"], second["ok"]) == (2, True)
        assert (third["id"], third["ok"]) == (3, True)
    still_serving(shared)


def test_a_frame_of_exactly_the_limit_is_parsed(shared):
    prefix = b'{"id": 5, "op": "daemon_status", "pad": "'
    suffix = b'"}'
    line = prefix + b"x" * (MAX_FRAME - len(prefix) - len(suffix)) + suffix
    assert len(line) == MAX_FRAME
    with connect(shared) as conn:
        # Parsed: it is refused for its unknown field, with its id, not for its size.
        answer = conn.request(line)
        assert_error(answer, "bad_args", 5)
        assert "pad" in answer["error"]["message"]
    still_serving(shared)


def test_a_huge_frame_streamed_in_pieces_gets_one_error(shared):
    with connect(shared) as conn:
        conn.send(b'{"id": 9, "op": "reply", "job": "x", "text": "')
        for _ in range(5):
            conn.send(b"y" * MAX_FRAME)
        conn.send(b'"}\n{"id": 10, "op": "daemon_status"}\n')
        assert_error(conn.read(), "frame_too_large", None)
        answer = conn.read()
        assert (answer["id"], answer["ok"]) == (10, True)
    still_serving(shared)


def test_a_text_field_over_its_limit_inside_a_frame_is_bad_args(shared):
    with connect(shared) as conn:
        answer = conn.request({"id": 11, "op": "reply", "job": "0badc0de", "text": "z" * 1_000_001})
        assert_error(answer, "bad_args", 11)
        assert "longer than" in answer["error"]["message"]
    still_serving(shared)


# --------------------------------------------------------------------------- unknown_op


@pytest.mark.parametrize("op", ["nope", "op_daemon_status", "__init__", "DAEMON_STATUS", "daemon_status ", "roost_send"])
@pytest.mark.parametrize("request_id", [17, "req-17"])
def test_unknown_op_echoes_the_id(shared, op, request_id):
    with connect(shared) as conn:
        assert_error(conn.request({"id": request_id, "op": op}), "unknown_op", request_id)
    still_serving(shared)


# --------------------------------------------------------------------------- bad_args


@pytest.mark.parametrize(
    "frame, echoed",
    [
        ({"op": "daemon_status"}, None),
        ({"id": None, "op": "daemon_status"}, None),
        ({"id": True, "op": "daemon_status"}, None),
        ({"id": False, "op": "daemon_status"}, None),
        ({"id": 1.5, "op": "daemon_status"}, None),
        ({"id": [1], "op": "daemon_status"}, None),
        ({"id": {"n": 1}, "op": "daemon_status"}, None),
        ({"id": 21}, 21),
        ({"id": "s21"}, "s21"),
        ({"id": 22, "op": 5}, 22),
        ({"id": 23, "op": ""}, 23),
        ({"id": 24, "op": ["daemon_status"]}, 24),
    ],
    ids=repr,
)
def test_a_bad_envelope_is_bad_args(shared, frame, echoed):
    with connect(shared) as conn:
        assert_error(conn.request(frame), "bad_args", echoed)
    still_serving(shared)


BAD_FIELDS = [
    {"op": "start", "task": 5},
    {"op": "start", "task": None},
    {"op": "start"},
    {"op": "start", "task": ["do", "it"]},
    {"op": "start", "task": "   "},
    {"op": "start", "task": "x", "cwd": "relative/dir"},
    {"op": "start", "task": "x", "cwd": "/no/such/dir/anywhere"},
    {"op": "start", "task": "x", "host": "no-such-host"},
    {"op": "start", "task": "x", "name": "n" * 201},
    {"op": "start", "task": "x", "scenario": 5},
    {"op": "start", "task": "x", "colour": "blue"},
    {"op": "reply", "job": "0badc0de", "text": []},
    {"op": "reply", "job": 5, "text": "hi"},
    {"op": "reply", "job": "0badc0de"},
    {"op": "stop", "job": []},
    {"op": "remove"},
    {"op": "log", "job": "0badc0de", "entries": "yes"},
    {"op": "jobs", "all": True},
    {"op": "daemon_status", "verbose": True},
    {"op": "worker_hello", "job": "0badc0de", "token": 5},
    {"op": "worker_hello", "job": "0badc0de", "token": "t", "pid": "1"},
    {"op": "peer_register", "pid": "1"},
    {"op": "peer_register"},
    {"op": "peer_register", "pid": os.getpid(), "session": 5},
    {"op": "peer_register", "pid": os.getpid(), "session": "relative/s.jsonl"},
    {"op": "peer_register", "pid": os.getpid(), "session": "/tmp/../etc/s.jsonl"},
]


# The id leaves out this process's pid, so that every pytest-xdist worker collects the
# same test ids.
@pytest.mark.parametrize("frame", BAD_FIELDS, ids=lambda frame: json.dumps(frame).replace(str(os.getpid()), "PID")[:60])
def test_wrong_fields_are_bad_args_with_the_id(shared, frame):
    with connect(shared) as conn:
        assert_error(conn.request({"id": 31, **frame}), "bad_args", 31)
    still_serving(shared)


BOUND_BAD_FIELDS = [
    {"op": "ack", "seq": "x"},
    {"op": "ack", "seq": -1},
    {"op": "ack", "seq": True},
    {"op": "ack", "seq": 1.5},
    {"op": "ack"},
    {"op": "send", "to": 5, "message": "hi"},
    {"op": "send", "to": "someone"},
    {"op": "send", "to": "someone", "message": "hi", "priority": True},
    {"op": "send", "to": "someone", "message": "hi", "urgent": "yes"},
    {"op": "tool_call", "name": "roost_agents", "args": "x"},
    {"op": "tool_call", "args": {}},
    {"op": "peers", "all": True},
]


@pytest.mark.parametrize("frame", BOUND_BAD_FIELDS, ids=lambda frame: json.dumps(frame)[:60])
def test_wrong_fields_on_a_bound_connection_are_bad_args(shared, frame):
    with bound(shared) as conn:
        assert_error(conn.request({"id": "b1", **frame}), "bad_args", "b1")
        # The connection is still bound and usable.
        assert conn.request({"id": "b2", "op": "peers"})["ok"] is True
    still_serving(shared)


# --------------------------------------------------------------------------- not_found


@pytest.mark.parametrize("op", ["reply", "stop", "remove", "log"])
@pytest.mark.parametrize("ref", ["0badc0de", "no-such-job"])
def test_job_ops_on_an_unknown_job_are_not_found(shared, op, ref):
    frame = {"id": 41, "op": op, "job": ref}
    if op == "reply":
        frame["text"] = "hello"
    with connect(shared) as conn:
        answer = conn.request(frame)
        assert_error(answer, "not_found", 41)
        assert ref in answer["error"]["message"]
    still_serving(shared)


def test_an_unknown_tool_or_peer_is_not_found(shared):
    with bound(shared) as conn:
        assert_error(conn.request({"id": 42, "op": "tool_call", "name": "roost_nothing", "args": {}}), "not_found", 42)
        assert_error(conn.request({"id": 43, "op": "send", "to": "nobody-here", "message": "hi"}), "not_found", 43)
    still_serving(shared)


# --------------------------------------------------------------------------- unauthorized


@pytest.mark.parametrize(
    "frame",
    [
        {"op": "send", "to": "x", "message": "hi"},
        {"op": "peers"},
        {"op": "ack", "seq": 1},
        {"op": "job_status", "state": "done"},
        {"op": "tool_call", "name": "roost_agents", "args": {}},
        # Arguments are not even looked at before the caller is known.
        {"op": "ack", "seq": "x"},
        {"op": "send"},
    ],
    ids=lambda frame: json.dumps(frame)[:60],
)
def test_bound_ops_from_an_unbound_connection_are_unauthorized(shared, frame):
    with connect(shared) as conn:
        assert_error(conn.request({"id": 51, **frame}), "unauthorized", 51)
    still_serving(shared)


def test_job_status_from_a_foreground_peer_is_unauthorized(shared):
    with bound(shared) as conn:
        assert_error(conn.request({"id": 52, "op": "job_status", "state": "done"}), "unauthorized", 52)
    still_serving(shared)


def test_peer_register_for_a_process_we_do_not_descend_from_is_unauthorized(shared):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with connect(shared) as conn:
            assert_error(conn.request({"id": 53, "op": "peer_register", "pid": other.pid}), "unauthorized", 53)
    finally:
        other.kill()
        other.wait(10)
    with connect(shared) as conn:
        # Now a dead pid.
        assert_error(conn.request({"id": 54, "op": "peer_register", "pid": other.pid}), "unauthorized", 54)
    still_serving(shared)


@pytest.mark.parametrize("pid", [0, -5, 2**31 + 5, 2**63])
def test_peer_register_with_an_impossible_pid_is_refused_not_an_internal_error(shared, pid):
    with connect(shared) as conn:
        answer = conn.request({"id": 55, "op": "peer_register", "pid": pid})
        assert answer["ok"] is False and answer["id"] == 55, answer
        assert answer["error"]["code"] in ("unauthorized", "bad_args"), answer
    still_serving(shared)


def test_peer_register_for_a_session_whose_lock_names_another_pid_is_unauthorized(shared, tmp_path):
    session = tmp_path / "s.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        WriterLock(session, pid=holder.pid).acquire()
        with connect(shared) as conn:
            answer = conn.request({"id": 56, "op": "peer_register", "pid": os.getpid(), "session": str(session)})
            assert_error(answer, "unauthorized", 56)
        # With no lock at all, too.
        with connect(shared) as conn:
            answer = conn.request({"id": 57, "op": "peer_register", "pid": os.getpid(), "session": str(tmp_path / "unlocked.jsonl")})
            assert_error(answer, "unauthorized", 57)
    finally:
        holder.kill()
        holder.wait(10)
    still_serving(shared)


def worker_token(daemon: DaemonHandle, job: str) -> str:
    record = json.loads((daemon.paths.jobs_dir / f"{job}.json").read_text())
    return record["token"]


def test_worker_hello_with_a_wrong_token_or_job_is_unauthorized_and_tells_nothing(shared):
    job = shared.start_job("token check", scenario=QUICK)
    token = worker_token(shared, job)
    with connect(shared) as conn:
        wrong = conn.request({"id": 61, "op": "worker_hello", "job": job, "token": token[:-1] + ("A" if token[-1] != "A" else "B")})
        assert_error(wrong, "unauthorized", 61)
        unknown = conn.request({"id": 62, "op": "worker_hello", "job": "0badc0de", "token": token})
        assert_error(unknown, "unauthorized", 62)
        empty = conn.request({"id": 63, "op": "worker_hello", "job": job, "token": ""})
        assert_error(empty, "unauthorized", 63)
        # A wrong token and an unknown job read the same: no oracle for which jobs exist.
        assert wrong["error"] == unknown["error"]
        # Still unbound afterwards.
        assert_error(conn.request({"id": 64, "op": "ack", "seq": 1}), "unauthorized", 64)
    # The real worker was not disturbed (and is connected before the next test counts).
    shared.wait_job(job, "done")
    wait_until(lambda: shared.job(job)["connected"], what="worker connected")
    still_serving(shared)


def test_worker_hello_with_the_right_token_from_another_process_is_unauthorized(shared):
    job = shared.start_job("impostor check", scenario=QUICK)
    shared.wait_job(job, "done")
    wait_until(lambda: shared.job(job)["connected"], what="worker connected")
    worker_pid = shared.record(job)["worker_pid"]
    token = worker_token(shared, job)
    with connect(shared) as conn:
        assert_error(conn.request({"id": 65, "op": "worker_hello", "job": job, "token": token}), "unauthorized", 65)
        # Claiming the worker's pid does not help: the kernel's peer credentials decide.
        answer = conn.request({"id": 66, "op": "worker_hello", "job": job, "token": token, "pid": worker_pid})
        assert_error(answer, "unauthorized", 66)
        # Not bound: worker-only ops are still refused.
        assert_error(conn.request({"id": 67, "op": "job_status", "state": "failed", "error": "hijacked"}), "unauthorized", 67)
    # The real worker kept its connection and its job.
    row = shared.job(job)
    assert row["connected"] is True
    assert row["state"] == "done" and row["error"] is None
    assert shared.record(job)["worker_pid"] == worker_pid
    assert shared.call("reply", job=job, text="still mine")["result"] == "delivered"
    shared.wait_job(job, "done")
    still_serving(shared)


def test_worker_hello_on_an_already_bound_connection_is_a_conflict(shared):
    job = shared.start_job("conflict check", scenario=QUICK)
    token = worker_token(shared, job)
    with bound(shared) as conn:
        assert_error(conn.request({"id": 68, "op": "worker_hello", "job": job, "token": token}), "conflict", 68)
    shared.wait_job(job, "done")
    wait_until(lambda: shared.job(job)["connected"], what="worker connected")
    still_serving(shared)


# --------------------------------------------------------------------------- lone surrogates
# JSON may carry "\ud800"; Python decodes it into a str that cannot be encoded to UTF-8.


def test_a_lone_surrogate_in_the_id_still_gets_an_answer(shared):
    with connect(shared) as conn:
        answer = conn.request(b'{"id": "\\ud800", "op": "daemon_status"}')
        assert answer["ok"] is False, answer
        assert answer["error"]["code"] in ("bad_json", "bad_args"), answer
    still_serving(shared)


def test_a_lone_surrogate_in_a_reply_does_not_wedge_the_job(shared):
    job = shared.start_job("surrogate reply", scenario=QUICK)
    shared.wait_job(job, "done")
    wait_until(lambda: shared.job(job)["connected"], what="worker connected")
    with connect(shared) as conn:
        answer = conn.request(b'{"id": 71, "op": "reply", "job": "%s", "text": "bad \\udc00 text"}' % job.encode())
        assert answer["ok"] is False and answer["id"] in (71, None), answer
    # The next, ordinary reply must still reach the job (it must not be stuck behind an
    # item that can never be encoded for the worker).
    with connect(shared) as conn:
        follow_up = conn.request({"id": 73, "op": "reply", "job": job, "text": "a normal reply"})
    assert follow_up["ok"] is True, follow_up
    assert follow_up["result"]["result"] == "delivered"
    shared.wait_job(job, "done")
    # And the refusal says the input was bad, not that the daemon failed.
    assert answer["error"]["code"] in ("bad_json", "bad_args"), answer
    still_serving(shared)


def test_a_lone_surrogate_in_a_task_leaves_no_half_made_job(shared):
    before = {row["id"] for row in shared.call("jobs")["jobs"]}
    with connect(shared) as conn:
        frame = b'{"id": 72, "op": "start", "task": "bad \\ud800 task", "host": "scripted", "cwd": "%s"}' % str(shared.home).encode()
        answer = conn.request(frame)
        assert answer["ok"] is False, answer
    after = {row["id"] for row in shared.call("jobs")["jobs"]}
    assert after == before, f"a job was left behind: {[shared.job(j) for j in after - before]}"
    assert answer["error"]["code"] in ("bad_json", "bad_args"), answer
    still_serving(shared)


# --------------------------------------------------------------------------- ids and ordering


@pytest.mark.parametrize("request_id", [0, -1, 10**30, "", "ünï", "x" * 200])
def test_the_answer_echoes_any_integer_or_string_id(shared, request_id):
    with connect(shared) as conn:
        answer = conn.request({"id": request_id, "op": "daemon_status"})
        assert answer["ok"] is True and answer["id"] == request_id
        assert_error(conn.request({"id": request_id, "op": "nope"}), "unknown_op", request_id)
    still_serving(shared)


def test_pipelined_good_and_bad_frames_are_answered_in_order(shared):
    lines = []
    expected: list[tuple[Any, str | None]] = []
    for n in range(60):
        kind = n % 4
        if kind == 0:
            lines.append(json.dumps({"id": n, "op": "daemon_status"}).encode())
            expected.append((n, None))
        elif kind == 1:
            lines.append(json.dumps({"id": n, "op": "nope"}).encode())
            expected.append((n, "unknown_op"))
        elif kind == 2:
            lines.append(b"{broken")
            expected.append((None, "bad_json"))
        else:
            lines.append(json.dumps({"id": n, "op": "stop", "job": "0badc0de"}).encode())
            expected.append((n, "not_found"))
    with connect(shared) as conn:
        conn.send(b"\n".join(lines) + b"\n")
        got = []
        for _ in expected:
            answer = conn.read()
            got.append((answer["id"], None if answer["ok"] else answer["error"]["code"]))
    assert got == expected
    still_serving(shared)


# --------------------------------------------------------------------------- misbehaving clients


def test_a_client_that_disconnects_mid_frame_is_dropped(shared):
    wait_no_extra_connections(shared, "a quiet daemon")
    for data in (b'{"id": 1, "op": "daem', b'{"id": 1, "op": "reply", "job": "x", "text": "' + b"q" * (MAX_FRAME + 10)):
        conn = connect(shared)
        conn.send(data)
        conn.close()
        still_serving(shared)
    wait_no_extra_connections(shared, "half-frame clients dropped")


def test_a_client_that_leaves_before_its_answer_does_no_harm(shared):
    wait_no_extra_connections(shared, "a quiet daemon")
    for _ in range(20):
        conn = connect(shared)
        conn.send(b'{"id": 1, "op": "daemon_status"}\n{"id": 2, "op": "jobs"}\n')
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
    still_serving(shared)
    wait_no_extra_connections(shared, "early leavers dropped")


def test_200_idle_connections_do_not_block_a_request(shared):
    wait_no_extra_connections(shared, "a quiet daemon")
    idle = [connect(shared) for _ in range(200)]
    try:
        # Half of them sent a partial frame and went quiet.
        for conn in idle[::2]:
            conn.send(b'{"id": 1, "op"')
        wait_until(lambda: extra_connections(shared) >= 200, timeout=15, what="200 connections accepted")
        status = still_serving(shared)
        assert status["connections"] >= 201
        # The idle ones are served too, first and last alike.
        for conn in (idle[1], idle[-1]):
            assert conn.request({"id": "late", "op": "daemon_status"})["ok"] is True
    finally:
        for conn in idle:
            conn.close()
    wait_no_extra_connections(shared, "idle connections dropped")
