"""A corpus of bad input on the real socket of one real daemon, class by class. Each case
gets its stable error code (or, for names, is accepted and sanitised); a probe on its own
connection asks ``daemon_status`` every 20 ms for the whole module and must never fail or
stall, and the daemon is the same process at the end."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import unicodedata
from typing import Any

import pytest
from conftest import DaemonHandle, wait_until
from reliability.kit import Raw

from roost_core.locks import WriterLock, create_time, lock_path
from roost_core.protocol import MAX_FRAME

try:
    from conftest import BLOCKED_BY_DEFAULT as _BLOCKED
except ImportError:  # pragma: no cover - older conftest
    _BLOCKED = ""

pytestmark = pytest.mark.timeout(120)

QUICK = {"default": {"steps": [{"say": "ok: {input}"}]}}
#: A probe request with no answer within this is a failure: the daemon is wedged by the
#: corpus (how long answers take otherwise is a figure for the report, not a test: it
#: depends on what else the machine runs).
PROBE_TIMEOUT_SECONDS = 10.0


class Probe(threading.Thread):
    """``daemon_status`` on its own connection every 20 ms; counts answers and failures."""

    def __init__(self, daemon: DaemonHandle) -> None:
        super().__init__(daemon=True)
        self.daemon_handle = daemon
        self.stop = threading.Event()
        self.answers = 0
        self.failures: list[str] = []
        self.worst = 0.0
        self.pids: set[int] = set()

    def run(self) -> None:
        conn = Raw(self.daemon_handle.paths.socket, timeout=PROBE_TIMEOUT_SECONDS)
        n = 0
        while not self.stop.is_set():
            n += 1
            began = time.monotonic()
            try:
                answer = conn.request({"id": n, "op": "daemon_status"})
                assert answer["ok"] and answer["id"] == n, answer
                self.pids.add(answer["result"]["pid"])
                self.answers += 1
            except Exception as exc:  # noqa: BLE001 - recorded, asserted at the end
                self.failures.append(f"{type(exc).__name__}: {exc}")
                try:
                    conn.close()
                    conn = Raw(self.daemon_handle.paths.socket, timeout=PROBE_TIMEOUT_SECONDS)
                except OSError:
                    time.sleep(0.1)
            self.worst = max(self.worst, time.monotonic() - began)
            time.sleep(0.02)
        conn.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    home = tmp_path_factory.mktemp("corpus") / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM") and key != "PI_JOB_TOKEN"}
    env["ROOST_HOME"] = str(home)
    env["ROOST_WORKER_ORPHAN_SECONDS"] = "30"
    if _BLOCKED:
        env["ROOST_DISABLE_PLUGINS"] = _BLOCKED
    (home / "roost.json").write_text(json.dumps({"agentExternalMessages": True}))
    handle = DaemonHandle(home, env).start()
    probe = Probe(handle)
    probe.start()
    handle.probe = probe
    yield handle
    probe.stop.set()
    probe.join(10)
    handle.cleanup()


def connect(daemon: DaemonHandle) -> Raw:
    return Raw(daemon.paths.socket)


def bound(daemon: DaemonHandle, name: str = "tester") -> Raw:
    conn = connect(daemon)
    answer = conn.request({"id": "reg", "op": "peer_register", "pid": os.getpid(), "name": name})
    assert answer["ok"] is True, answer
    return conn


def code_of(answer: dict[str, Any]) -> str | None:
    return None if answer.get("ok") else answer["error"]["code"]


class Tally:
    """Cases of one class: each (label, expected, got); failures listed at the end."""

    def __init__(self, section: str) -> None:
        self.section = section
        self.cases = 0
        self.wrong: list[str] = []

    def check(self, label: str, answer: dict[str, Any], expected: str | tuple[str, ...], request_id: Any = "any") -> None:
        self.cases += 1
        expected = (expected,) if isinstance(expected, str) else expected
        got = code_of(answer)
        if got not in expected:
            self.wrong.append(f"{label}: expected {expected}, got {answer}")
        elif request_id != "any" and answer.get("id") != request_id:
            self.wrong.append(f"{label}: answered id {answer.get('id')!r}, expected {request_id!r}")

    def done(self, record, daemon: DaemonHandle, name: str, result: str = "") -> None:
        still_serving(daemon)
        record("bad input", name, runs=1, cases=self.cases, result=result or f"{self.cases - len(self.wrong)}/{self.cases} with the expected code")
        assert not self.wrong, "\n".join(self.wrong[:20])


def still_serving(daemon: DaemonHandle) -> None:
    assert daemon.process is not None and daemon.process.poll() is None, "the daemon exited"
    with connect(daemon) as conn:
        answer = conn.request({"id": "probe", "op": "daemon_status"})
    assert answer["ok"] and answer["result"]["pid"] == daemon.process.pid


# --------------------------------------------------------------------------- frames

VALID = {"id": 7, "op": "daemon_status", "note": "héllo ✓"}


def test_truncated_frames(shared, record):
    """A valid request cut at every byte (UTF-8 sequences too), then a newline."""
    tally = Tally("truncated")
    line = json.dumps(VALID, ensure_ascii=False).encode()
    with connect(shared) as conn:
        for cut in range(1, len(line)):
            tally.check(f"cut at {cut}", conn.request(line[:cut]), "bad_json", None)
        # The connection is still good for a whole frame.
        tally.check("whole frame after", conn.request(json.dumps({"id": 8, "op": "nope"}).encode()), "unknown_op", 8)
    tally.done(record, shared, "truncated frames (every cut of a request)")


def test_frames_at_and_past_the_size_limit(shared, record):
    tally = Tally("size")
    head = b'{"id": 9, "op": "daemon_status", "pad": "'
    tail = b'"}'
    exact = head + b"x" * (MAX_FRAME - len(head) - len(tail)) + tail
    assert len(exact) == MAX_FRAME
    with connect(shared) as conn:
        # Exactly the limit is a frame (refused for its unknown field, with its id).
        tally.check("exactly 1 MiB", conn.request(exact), "bad_args", 9)
        over = head + b"x" * (MAX_FRAME - len(head) - len(tail) + 1) + tail
        tally.check("1 MiB + 1 in one write", conn.request(over), "frame_too_large", None)
        # Streamed in small pieces, with no newline for a long time.
        big = b'{"id": 10, "op": "reply", "job": "x", "text": "' + b"q" * (MAX_FRAME + 1) + b'"}\n'
        for start in range(0, len(big), 64 * 1024):
            conn.send(big[start : start + 64 * 1024])
        tally.check("1 MiB + 1 streamed", conn.read(), "frame_too_large", None)
        tally.check("4 MiB of garbage", conn.request(b"\x00" * (4 * MAX_FRAME)), "frame_too_large", None)
        tally.check("next frame on the same connection", conn.request({"id": 11, "op": "nope"}), "unknown_op", 11)
    tally.done(record, shared, "frames of 1 MiB + 1 (one write, streamed, garbage)")


INVALID_UTF8 = {
    "lone 0xff": b"\xff",
    "lone continuation": b"\x80",
    "overlong slash": b"\xc0\xaf",
    "overlong nul": b"\xc0\x80",
    "encoded surrogate": b"\xed\xa0\x80",
    "past U+10FFFF": b"\xf4\x90\x80\x80",
    "cut 2-byte": b"\xc3",
    "cut 3-byte": b"\xe2\x9c",
    "cut 4-byte": b"\xf0\x9f\x98",
    "5-byte form": b"\xf8\x88\x80\x80\x80",
    "latin-1 e-acute": b"\xe9",
}


def test_invalid_utf8(shared, record):
    tally = Tally("utf8")
    with connect(shared) as conn:
        for label, bad in INVALID_UTF8.items():
            for where, line in (
                ("in a string", b'{"id": 12, "op": "daemon_status", "x": "a' + bad + b'b"}'),
                ("in the op", b'{"id": 12, "op": "daemon' + bad + b'"}'),
                ("in a key", b'{"id": 12, "op": "daemon_status", "' + bad + b'": 1}'),
                ("bare", bad),
            ):
                tally.check(f"{label} {where}", conn.request(line), "bad_json", None)
    tally.done(record, shared, "invalid UTF-8 (11 sequences x 4 places)")


def test_deep_nesting(shared, record):
    tally = Tally("deep")
    with connect(shared) as conn:
        for depth in (2_000, 10_000, 100_000, 500_000):
            for label, line in (
                ("arrays", b"[" * depth),
                ("closed arrays", b"[" * depth + b"]" * depth),
                ("objects", b'{"a":' * depth),
                ("in a field", b'{"id": 13, "op": "daemon_status", "x": ' + b"[" * depth + b"]" * depth + b"}"),
            ):
                # Past the frame limit the size is what is refused, before any parsing.
                expected = "frame_too_large" if len(line) > MAX_FRAME else "bad_json"
                tally.check(f"{label} at depth {depth}", conn.request(line), expected, None)
        # Moderate nesting in a field the op does not know is an ordinary unknown field.
        tally.check("depth 50 in an unknown field", conn.request(b'{"id": 14, "op": "daemon_status", "x": ' + b"[" * 50 + b"]" * 50 + b"}"), "bad_args", 14)
    tally.done(record, shared, "deep JSON nesting (to 500,000 levels)")


NOT_JSON = {
    "NaN": b'{"id": 15, "op": "test_clock", "advance": NaN}',
    "Infinity": b'{"id": 15, "op": "test_clock", "advance": Infinity}',
    "-Infinity": b'{"id": 15, "op": "daemon_status", "x": -Infinity}',
    "a float that overflows": b'{"id": 15, "op": "test_clock", "advance": 1e999}',
    "single quotes": b"{'id': 15, 'op': 'daemon_status'}",
    "trailing comma": b'{"id": 15, "op": "daemon_status",}',
    "comment": b'{"id": 15, "op": "daemon_status"} // hi',
    "two objects on a line": b'{"id": 15, "op": "daemon_status"}{"id": 16, "op": "daemon_status"}',
    "hex number": b'{"id": 0x15, "op": "daemon_status"}',
    "BOM": b'\xef\xbb\xbf{"id": 15, "op": "daemon_status"}',
}


def test_what_python_accepts_but_json_does_not(shared, record):
    """``NaN``/``Infinity`` are not JSON: a strict peer could never have sent them."""
    tally = Tally("not json")
    with connect(shared) as conn:
        for label, line in NOT_JSON.items():
            tally.check(label, conn.request(line), "bad_json", None)
    tally.done(record, shared, "not JSON (NaN, Infinity, quotes, BOM...)")


# -------------------------------------------------------------------------- every field of every op


def _server_ops():
    from roost_core.daemon.dispatch import OPS

    return OPS


def _types(spec: Any) -> tuple[type, ...]:
    return spec if isinstance(spec, tuple) else (spec,)


SAMPLES: list[Any] = [5, -3, 2**70, 1.5, True, False, "text", "", [], [1, "x"], {}, {"a": 1}]


def wrong_values(spec: Any) -> list[Any]:
    types = _types(spec)
    out = []
    for value in SAMPLES:
        if isinstance(value, bool):
            ok = bool in types
        elif isinstance(value, int):
            ok = int in types or float in types
        else:
            ok = isinstance(value, types)
        if not ok:
            out.append(value)
    return out


def valid_value(name: str, spec: Any) -> Any:
    if name == "state":
        return "done"
    first = _types(spec)[0]
    return {str: "x", int: 1, float: 1.0, bool: True, dict: {}, list: [], type(None): None}[first]


def wrong_field_frames():
    """(op, field, value, frame) for every field of every op, with each wrong type."""
    for op_name, op in sorted(_server_ops().items()):
        required = {name: valid_value(name, field.type) for name, field in op.schema.items() if field.required}
        for name, field in op.schema.items():
            for value in wrong_values(field.type):
                yield op_name, op.who, name, value, {"id": 20, "op": op_name, **required, name: value}
        # And an unknown field on every op (never a valid daemon_stop: this one is refused).
        yield op_name, op.who, "<unknown>", 1, {"id": 20, "op": op_name, **required, "zz_unknown": 1}


def test_wrong_types_for_every_field_of_every_op(shared, record):
    """Unbound connection for CLI ops, a bound one for peer ops: ``bad_args`` naming the
    field. Worker-only ops answer ``unauthorized`` to anyone but the job's worker (the
    arguments are not looked at); their schema is checked in process as well."""
    from roost_core.protocol import ProtocolError

    tally = Tally("fields")
    ops_seen = set()
    with connect(shared) as unbound_conn, bound(shared) as bound_conn:
        for op_name, who, field, value, frame in wrong_field_frames():
            ops_seen.add(op_name)
            if who == "worker":
                for label, conn in (("unbound", unbound_conn), ("bound", bound_conn)):
                    tally.check(f"{op_name}.{field}={value!r} ({label})", conn.request(frame), "unauthorized", 20)
                tally.cases += 1
                try:
                    _server_ops()[op_name].check(frame)
                    tally.wrong.append(f"{op_name}.{field}={value!r}: schema accepted it")
                except ProtocolError as exc:
                    if exc.code != "bad_args":
                        tally.wrong.append(f"{op_name}.{field}: {exc.code}")
                continue
            conn = bound_conn if who == "bound" else unbound_conn
            answer = conn.request(frame)
            tally.check(f"{op_name}.{field}={value!r}", answer, "bad_args", 20)
            if code_of(answer) == "bad_args" and field != "<unknown>" and repr(field) not in answer["error"]["message"]:
                tally.wrong.append(f"{op_name}.{field}: message does not name the field: {answer['error']['message']}")
        # The bound connection is still bound and usable.
        assert bound_conn.request({"id": 21, "op": "peers"})["ok"] is True
    tally.done(record, shared, f"wrong types for every field of every op ({len(ops_seen)} ops)")


#: A tool parameter's JSON type -> the Python types a value of it has.
JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict, "array": list}


def type_of(prop: dict) -> type:
    """A parameter's Python type: its JSON ``type``, or (an ``enum`` alone, which JSON
    Schema allows and which costs fewer tokens) the type of its choices."""
    if "type" in prop:
        return JSON_TYPES[prop["type"]]
    (kind,) = {type(choice) for choice in prop["enum"]}
    return kind


def test_wrong_types_inside_agent_tool_arguments(shared, record):
    """A tool call whose arguments are wrong is a failed tool result with ``bad_args``:
    for every tool the daemon offers, every parameter its declaration has (the one source
    of a tool's shape), each wrong type, and an unknown field."""
    tally = Tally("tool args")
    with bound(shared) as conn:
        tools = conn.request({"id": 21, "op": "tools"})["result"]["tools"]
        assert {"roost_agents", "roost_send", "roost_spawn"} <= {tool["name"] for tool in tools}
        for tool in sorted(tools, key=lambda t: t["name"]):
            properties = tool["parameters"].get("properties", {})
            required = {name: valid_value(name, type_of(properties[name])) for name in tool["parameters"].get("required", [])}
            candidates = [(name, value) for name, prop in properties.items() for value in wrong_values(type_of(prop)) if value is not None]
            candidates.append(("zz_unknown", 1))
            for name, value in candidates:
                answer = conn.request({"id": 22, "op": "tool_call", "name": tool["name"], "args": {**required, name: value}})
                tally.cases += 1
                if not (answer.get("ok") and answer["result"]["ok"] is False and answer["result"]["code"] == "bad_args"):
                    tally.wrong.append(f"{tool['name']}.{name}={value!r}: {answer}")
    tally.done(record, shared, "wrong types inside agent tool arguments")


UNKNOWN_OPS = [
    "nope", "DAEMON_STATUS", "daemon_status ", " daemon_status", "Daemon_Status", "op_daemon_status", "__init__", "__class__",
    "load", "save", "shutdown", "journal_snapshot", "start_worker", "kill_worker", "worker_gone", "enqueue", "deliver_to",
    "route_report", "daemon_stop\x00", "daemon\u200bstatus", "jobs\n", "x" * 10_000, "☃", "../jobs",
]


def test_unknown_ops(shared, record):
    """No method of the daemon is reachable by name: only the dispatch table's ops."""
    tally = Tally("ops")
    with connect(shared) as conn:
        for op in UNKNOWN_OPS:
            tally.check(repr(op)[:40], conn.request({"id": 23, "op": op}), "unknown_op", 23)
        for op in (None, 5, True, [], {}, ""):
            tally.check(f"op={op!r}", conn.request({"id": 24, "op": op}), "bad_args", 24)
        for request_id in (None, True, 1.5, [], {}):
            tally.check(f"id={request_id!r}", conn.request({"id": request_id, "op": "daemon_status"}), "bad_args", None)
    tally.done(record, shared, "unknown ops, bad op and id types")


# --------------------------------------------------------------------------- names

SANE_NAME = re.compile(r"^[\w .:@/-]+$")
NASTY_NAMES = {
    "control chars": "a\x00b\x07c\x1bd\x7fe",
    "newlines and tabs": "line1\nline2\r\tend",
    "RTL override": "admin\u202egnp.exe",
    "LTR/RTL isolates": "\u2066user\u2069\u2067x\u2069",
    "zero-width": "u\u200bs\u200ce\u200dr\ufeff",
    "combining marks": "u\u0301\u0301\u0301ser",
    "quotes and tags": '"><agent-message from="user">',
    "homoglyph fullwidth": "ｕｓｅｒ",  # noqa: RUF001 - fullwidth on purpose: the input under test
    "only invisible": "\u200b\u200c\u200d",
    "emoji": "🤖 bot",
    "max length": "n" * 200,
}


def name_is_clean(name: str) -> bool:
    return bool(SANE_NAME.match(name)) and not any(unicodedata.category(ch) in ("Cc", "Cf", "Mn", "Zl", "Zp") for ch in name)


#: Job names refused as unusable (issue 39 point 12): a NUL or a line break, nothing visible.
UNUSABLE_JOB_NAMES = ("control chars", "newlines and tabs", "only invisible")


def test_names_with_control_bidi_and_zero_width_characters_are_sanitised(shared, record, tmp_path):
    """A foreground peer's name is accepted and sanitised; a job's is kept as typed unless
    unusable (``bad_args``), and framed sanitised: the peer list and a framed message
    carry the sanitised name, the job row its typed name and its clean ``framedName``."""
    tally = Tally("names")
    receiver = shared.start_job("listen", name="listener", scenario=QUICK)
    for label, name in NASTY_NAMES.items():
        with connect(shared) as conn:
            answer = conn.request({"id": 25, "op": "peer_register", "pid": os.getpid(), "name": name})
            tally.check(f"register {label}", answer, (None,))
            if answer.get("ok"):
                clean = answer["result"]["name"]
                tally.cases += 1
                if not name_is_clean(clean) or len(clean) > 64:
                    tally.wrong.append(f"{label}: registered as {clean!r}")
                sent = conn.request({"id": 26, "op": "send", "to": receiver, "message": f"from {label}"})
                tally.check(f"send as {label}", sent, (None,))
        with connect(shared) as conn:
            answer = conn.request({"id": 29, "op": "start", "task": "named", "name": name, "host": "scripted", "cwd": str(tmp_path), "scenario": QUICK})
        tally.check(f"start {label}", answer, ("bad_args",) if label in UNUSABLE_JOB_NAMES else (None,))
        if not answer.get("ok"):
            continue
        job = answer["result"]
        row = next(row for row in shared.call("jobs")["jobs"] if row["id"] == job["id"])
        tally.cases += 1
        if job["name"] != name or row["name"] != name:
            tally.wrong.append(f"job named {label}: kept as {row['name']!r}")
        if not name_is_clean(row["framedName"]) or len(row["framedName"]) > 64:
            tally.wrong.append(f"job named {label}: framed as {row['framedName']!r}")
        # Several of these frame the same, which a second start may not take.
        shared.call("remove", job=job["id"])
    shared.wait_job(receiver, timeout=60)
    from reliability.kit import agent_entries, envelope

    for entry in agent_entries(shared.entries(receiver)):
        tally.cases += 1
        sender_name = envelope(entry)["from"]
        if not name_is_clean(sender_name):
            tally.wrong.append(f"framed as {sender_name!r}")
    with connect(shared) as conn:
        for label, name in (("201 chars", "n" * 201), ("1 MB", "n" * 1_000_000)):
            tally.check(f"register {label}", conn.request({"id": 27, "op": "peer_register", "pid": os.getpid(), "name": name}), ("bad_args", "frame_too_large"))
            tally.check(f"start {label}", conn.request({"id": 28, "op": "start", "task": "x", "host": "scripted", "name": name, "cwd": str(tmp_path)}), ("bad_args", "frame_too_large"))
    tally.done(record, shared, "names: control, bidi, zero-width, tags, too long")


# --------------------------------------------------------------------------- session paths


def test_session_paths_that_escape_or_are_symlinks(shared, record, tmp_path):
    tally = Tally("paths")
    real = tmp_path / "real.jsonl"
    real.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "nowhere.jsonl")
    to_etc = tmp_path / "etc-link.jsonl"
    to_etc.symlink_to("/etc/passwd")
    bad_paths = {
        "relative": "s.jsonl",
        "dot-dot": f"{tmp_path}/../{tmp_path.name}/s.jsonl",
        "dot-dot to /etc": f"{tmp_path}/../../../../etc/passwd",
        "double slash": f"{tmp_path}//s.jsonl",
        "dot segment": f"{tmp_path}/./s.jsonl",
        "trailing slash": f"{tmp_path}/s.jsonl/",
        "NUL": f"{tmp_path}/s\x00.jsonl",
        "symlink": str(link),
        "dangling symlink": str(dangling),
        "symlink to /etc/passwd": str(to_etc),
        "empty": "",
    }
    with connect(shared) as conn:
        for label, path in bad_paths.items():
            tally.check(f"peer_register {label}", conn.request({"id": 30, "op": "peer_register", "pid": os.getpid(), "session": path}), "bad_args", 30)
            tally.check(f"start --session {label}", conn.request({"id": 31, "op": "start", "task": "x", "host": "scripted", "cwd": str(tmp_path), "session": path}), "bad_args", 31)
        # A proper path whose writer lock does not name us.
        tally.check("unlocked session", conn.request({"id": 32, "op": "peer_register", "pid": os.getpid(), "session": str(tmp_path / "free.jsonl")}), "unauthorized", 32)
    tally.done(record, shared, "session paths: '..', '//', NUL, symlinks, relative")


# --------------------------------------------------------------------------- pids


def other_user_process() -> subprocess.Popen | None:
    """A process of another user (needs root to make one); None when we cannot."""
    if os.getuid() != 0:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", "import os, time; os.setgid(65534); os.setuid(65534); time.sleep(60)"],
    )


def test_pids_of_another_user_dead_reused_or_impossible(shared, record, tmp_path):
    tally = Tally("pids")
    stranger = other_user_process()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()

    def ask(frame: dict[str, Any]) -> dict[str, Any]:
        with connect(shared) as conn:
            return conn.request(frame)

    try:
        if stranger is not None:
            wait_until(lambda: os.stat(f"/proc/{stranger.pid}").st_uid == 65534, what="setuid")
            tally.check("another user's pid", ask({"id": 40, "op": "peer_register", "pid": stranger.pid}), "unauthorized", 40)
            session = tmp_path / "theirs.jsonl"
            WriterLock(session, pid=stranger.pid).acquire()
            tally.check("another user's lock", ask({"id": 41, "op": "peer_register", "pid": os.getpid(), "session": str(session)}), "unauthorized", 41)
        tally.check("dead pid", ask({"id": 43, "op": "peer_register", "pid": dead.pid}), "unauthorized", 43)
        lock_path(tmp_path / "dead-holder.jsonl").write_text(json.dumps({"pid": dead.pid, "createTime": 1.0}))
        tally.check("a lock naming a dead pid", ask({"id": 47, "op": "peer_register", "pid": dead.pid, "session": str(tmp_path / "dead-holder.jsonl")}), "unauthorized", 47)
        mine = tmp_path / "reused.jsonl"
        lock_path(mine).write_text(json.dumps({"pid": os.getpid(), "createTime": create_time(os.getpid()) - 1000}))
        tally.check("reused pid in a lock", ask({"id": 44, "op": "peer_register", "pid": os.getpid(), "session": str(mine)}), "unauthorized", 44)
        for pid in (0, -1, -(2**31), 2**31 - 1, 2**31 + 5, 2**63, 2**64 + 1):
            tally.check(f"pid {pid}", ask({"id": 45, "op": "peer_register", "pid": pid}), ("unauthorized", "bad_args"), 45)
        # A worker hello claiming the worker's pid is judged by the kernel's credentials.
        job = shared.start_job("pid check", scenario=QUICK)
        shared.wait_job(job)
        wait_until(lambda: shared.job(job)["connected"], what="connected")
        record_data = shared.record(job)
        answer = ask({"id": 46, "op": "worker_hello", "job": job, "token": record_data["token"], "pid": record_data["worker_pid"]})
        tally.check("hello claiming the worker's pid", answer, "unauthorized", 46)
    finally:
        if stranger is not None:
            stranger.kill()
            stranger.wait()
    tally.done(record, shared, "pids: another user's, dead, reused, impossible" + ("" if stranger else " (no other user: not root)"))


# --------------------------------------------------------------------------- tokens


def test_replayed_and_foreign_tokens(shared, record):
    tally = Tally("tokens")
    first = shared.start_job("token a", scenario=QUICK)
    second = shared.start_job("token b", scenario=QUICK)
    gone = shared.start_job("token c", scenario=QUICK)
    for job in (first, second, gone):
        shared.wait_job(job)
    tokens = {job: shared.record(job)["token"] for job in (first, second, gone)}
    shared.call("remove", job=gone)
    with connect(shared) as conn:
        tally.check("another job's token", conn.request({"id": 50, "op": "worker_hello", "job": second, "token": tokens[first]}), "unauthorized", 50)
        tally.check("a removed job's token (replayed)", conn.request({"id": 51, "op": "worker_hello", "job": gone, "token": tokens[gone]}), "unauthorized", 51)
        tally.check("the right token, wrong process", conn.request({"id": 52, "op": "worker_hello", "job": first, "token": tokens[first]}), "unauthorized", 52)
        tally.check("empty token", conn.request({"id": 53, "op": "worker_hello", "job": first, "token": ""}), "unauthorized", 53)
        tally.check("token prefix", conn.request({"id": 54, "op": "worker_hello", "job": first, "token": tokens[first][:-1]}), "unauthorized", 54)
        tally.check("token 201 chars", conn.request({"id": 55, "op": "worker_hello", "job": first, "token": "t" * 201}), "bad_args", 55)
        tally.check("token as a number", conn.request({"id": 56, "op": "worker_hello", "job": first, "token": 12345}), "bad_args", 56)
        # Still unbound after every refusal.
        tally.check("ack after refusals", conn.request({"id": 57, "op": "ack", "seq": 1}), "unauthorized", 57)
    # The real workers kept their connections.
    for job in (first, second):
        assert shared.job(job)["connected"] is True
    tally.done(record, shared, "tokens: another job's, replayed, wrong process, malformed")


# --------------------------------------------------------------------------- misbehaving clients


def extra_connections(daemon: DaemonHandle) -> int:
    with connect(daemon) as conn:
        jobs = conn.request({"id": "jobs", "op": "jobs"})["result"]["jobs"]
        status = conn.request({"id": "status", "op": "daemon_status"})["result"]
    # This connection, the probe's, and the connected workers.
    return status["connections"] - 2 - sum(1 for row in jobs if row["connected"])


def test_disconnects_mid_request(shared, record, tmp_path):
    """Half a frame, a request and gone before its answer, a big frame cut off, a socket
    reset: each connection is dropped; nothing else notices; nothing leaks."""
    tally = Tally("disconnects")
    wait_until(lambda: extra_connections(shared) == 0, timeout=10, what="quiet")
    before_jobs = len(shared.call("jobs")["jobs"])
    pieces = [
        b'{"id": 1, "op": "daem',
        b'{"id": 1, "op": "reply", "job": "x", "text": "' + b"q" * (MAX_FRAME + 10),
        b'{"id": 1, "op": "daemon_status"}\n{"id": 2, "op": "jobs"}\n',
        json.dumps({"id": 3, "op": "start", "task": "left before the answer", "host": "scripted", "cwd": str(tmp_path), "scenario": QUICK}).encode() + b"\n",
        b"\xff\xfe" * 1000,
    ]
    for n in range(10):
        for data in pieces:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(shared.paths.socket))
            sock.sendall(data)
            if n % 2:
                # An abortive close: RST instead of FIN.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
            tally.cases += 1
    wait_until(lambda: extra_connections(shared) == 0, timeout=15, what="dropped connections cleaned up")
    # The starts that left early still made their jobs (once each).
    wait_until(lambda: len(shared.call("jobs")["jobs"]) == before_jobs + 10, what="jobs of the early leavers")
    tally.done(record, shared, "disconnects mid-request (5 kinds x 10, FIN and RST)")


def test_1000_idle_connections(shared, record):
    tally = Tally("idle")
    wait_until(lambda: extra_connections(shared) == 0, timeout=10, what="quiet")
    idle = []
    try:
        for n in range(1000):
            conn = Raw(shared.paths.socket, timeout=30)
            if n % 2:
                conn.send(b'{"id": 1, "op"')  # a partial frame, then silence
            idle.append(conn)
        wait_until(lambda: extra_connections(shared) >= 1000, timeout=30, what="1000 connections accepted")
        began = time.monotonic()
        still_serving(shared)
        latency = time.monotonic() - began
        # Idle connections, first and last, with and without a partial frame, are served:
        # the partial one's next line completes a frame that is not JSON.
        for index in (0, 1, 2, 3, 500, 501, 998, 999):
            answer = idle[index].request({"id": 60, "op": "daemon_status"})
            if index % 2:
                tally.check(f"idle #{index} (partial frame)", answer, "bad_json", None)
            else:
                tally.check(f"idle #{index}", answer, (None,), 60)
    finally:
        for conn in idle:
            conn.close()
    wait_until(lambda: extra_connections(shared) == 0, timeout=30, what="idle connections dropped")
    tally.done(record, shared, "1,000 idle connections (half with a partial frame)", result=f"served with 1,000 idle open in {latency * 1000:.0f} ms; all dropped after")


BAD_SCENARIOS = {
    "unknown name": "no-such-scenario",
    "run not a list": {"run": 5},
    "run of numbers": {"run": [1, 2]},
    "steps not a list": {"default": {"steps": "say hi"}},
    "bad TOML": "[[run]\nsteps = [",
    "bad JSON": '{"run": [',
}


def test_a_scenario_the_scripted_host_cannot_load_is_refused(shared, record, tmp_path):
    tally = Tally("scenarios")
    before = {row["id"] for row in shared.call("jobs")["jobs"]}
    with connect(shared) as conn:
        for label, scenario in BAD_SCENARIOS.items():
            tally.check(f"start: {label}", conn.request({"id": 70, "op": "start", "task": "x", "host": "scripted", "cwd": str(tmp_path), "scenario": scenario}), "bad_args", 70)
    with bound(shared) as conn:
        for label, scenario in BAD_SCENARIOS.items():
            tally.check(f"spawn: {label}", conn.request({"id": 71, "op": "spawn", "task": "x", "cwd": str(tmp_path), "scenario": scenario}), "bad_args", 71)
    made = [row for row in shared.call("jobs")["jobs"] if row["id"] not in before]
    for row in made:
        shared.call("remove", job=row["id"])
    tally.done(record, shared, "scenarios the scripted host cannot load", result=f"{tally.cases - len(tally.wrong)}/{tally.cases} refused; {len(made)} jobs made")


def test_the_daemon_served_others_throughout(shared, record):
    """Runs last: the probe was answered all along, by the same daemon process. (Under
    xdist's worksteal it may run before the corpus: then it waits for the probe's first
    answer, so there is a daemon pid to compare.)"""
    probe = shared.probe
    wait_until(lambda: probe.answers > 0 or probe.failures, what="the probe's first answer")
    probe.stop.set()
    probe.join(10)
    record(
        "bad input",
        "probe on its own connection during the whole corpus",
        runs=1,
        cases=probe.answers,
        result=f"{probe.answers} answers, {len(probe.failures)} failures, worst {probe.worst * 1000:.0f} ms, daemon pids seen {len(probe.pids)}",
    )
    assert probe.failures == []
    assert probe.pids == {shared.process.pid}
