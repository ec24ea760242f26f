"""The table of ops: each op's argument schema, who may call it and how it is done. No
I/O and no daemon: the daemon pairs each op with the service method that does it
(``Daemon.routes``), :mod:`~roost_core.daemon.dispatch` does requests by that, and the
agent tools' services (:mod:`~roost_core.daemon.tools`) check an op's arguments by it, so
every limit of an op is written once, here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from roost_core.daemon.ledger import KEY_CHARS
from roost_core.protocol import MAX_SEEN, MAX_TEXT_BYTES, Field, compile_args
from roost_core.records import WORKSPACE_BASES, WORKSPACE_KINDS

NAME = 200
#: A text that becomes a queued item (a reply, a task, a message) is at most TEXT
#: characters and MAX_TEXT_BYTES bytes as JSON (docs/protocol.md, "Sizes").
TEXT = 1_000_000
PATH = 4096


@attrs.frozen
class Op:
    schema: dict[str, Field]
    #: "any" (CLI), "bound" (worker or foreground peer), "worker"
    who: str = "any"
    #: The op is done with no wait (its route has an ``accept`` method, which may return a
    #: ``Pending`` result): the connection's next requests go on while it waits for its
    #: journal commit. Its requests are read in one step (``daemon.fastdecode``).
    accept: bool = False
    #: The op changes something and takes a ``key``: asked again with the same key, it is
    #: answered with the first answer instead of done twice (``daemon.ledger``).
    keyed: bool = False
    #: ``schema`` compiled (``protocol.compile_args``): the arguments, checked, from the frame.
    check: Callable[[dict[str, Any]], dict[str, Any]] = attrs.field(init=False, eq=False, repr=False)

    def bind(self, name: str) -> Op:
        """This op with its schema compiled for op ``name`` (a keyed op's with ``key``, and
        ``again``: the client asks again with that key, its first answer lost)."""
        if self.keyed:
            object.__setattr__(self, "schema", {**self.schema, "key": Field(str, max_len=KEY_CHARS, check=_check_key), "again": Field(bool)})
        object.__setattr__(self, "check", compile_args(self.schema, name))
        return self


#: A worker names at most this many background processes (``roost_core.worker.background``).
BACKGROUND_SHOWN = 5
#: ... each with a command line of at most this many characters.
BACKGROUND_COMMAND = 200


def _check_background(shown: list[Any]) -> str | None:
    for entry in shown:
        if not (isinstance(entry, dict) and type(entry.get("pid")) is int and isinstance(entry.get("command"), str)):
            return "holds an entry that is not {pid, command}"
        if len(entry["command"]) > BACKGROUND_COMMAND:
            return f"holds a command longer than {BACKGROUND_COMMAND} characters"
    return None


#: What a worker's ``progress`` names as its run's last sign of work.
PROGRESS_WHAT = ("item delivered", "tool boundary", "model call")


def _check_progress(progress: dict[str, Any]) -> str | None:
    at, what, steps = progress.get("at"), progress.get("what"), progress.get("steps")
    if set(progress) != {"at", "what", "steps"} or type(at) not in (int, float) or type(steps) is not int or steps < 0 or what not in PROGRESS_WHAT:
        return "must be {at: a time, what: " + " | ".join(PROGRESS_WHAT) + ", steps: an integer >= 0}"
    return None


def _check_key(key: str) -> str | None:
    return None if key else "must not be empty"


OPS: dict[str, Op] = {
    "daemon_status": Op({}),
    "daemon_reload": Op({}),
    "daemon_stop": Op({"jobs": Field(bool)}),
    "plugins": Op({}),
    "tools": Op({}),
    "test_clock": Op({"advance": Field(float, required=True, check=lambda v: None if v >= 0 else "must be >= 0")}),
    "start": Op(
        {
            "task": Field(str, required=True, max_len=TEXT, max_bytes=MAX_TEXT_BYTES),
            "name": Field(str, max_len=NAME),
            "cwd": Field(str, max_len=PATH),
            "host": Field(str, max_len=NAME),
            "scenario": Field((str, dict), max_len=TEXT),
            "model": Field(str, max_len=NAME),
            "thinking": Field(str, max_len=NAME),
            "trace": Field(str, max_len=NAME),
            "session": Field(str, max_len=PATH),
            "workspace": Field(str, check=lambda v: None if v in WORKSPACE_KINDS else f"must be one of {', '.join(WORKSPACE_KINDS)}"),
            "base": Field(str, check=lambda v: None if v in WORKSPACE_BASES else f"must be one of {', '.join(WORKSPACE_BASES)}"),
        },
        keyed=True,
    ),
    "jobs": Op({}),
    "agents": Op({}),
    "watch": Op({"receipts": Field(bool)}),
    "dead": Op({}),
    "reply": Op({"job": Field(str, required=True, max_len=NAME), "text": Field(str, required=True, max_len=TEXT, max_bytes=MAX_TEXT_BYTES), "restart": Field(bool)}, keyed=True),
    "answer": Op({"job": Field(str, required=True, max_len=NAME), "text": Field(str, max_len=TEXT, max_bytes=MAX_TEXT_BYTES)}, keyed=True),
    "stop": Op({"job": Field(str, required=True, max_len=NAME)}),
    "remove": Op({"job": Field(str, required=True, max_len=NAME), "force": Field(bool), "keepWorkspace": Field(bool)}),
    "log": Op({"job": Field(str, required=True, max_len=NAME), "entries": Field(bool)}),
    # ``roost attach``: the connection holds the job until it closes or says ``detach``.
    "attach": Op({"job": Field(str, required=True, max_len=NAME), "now": Field(bool)}),
    "detach": Op({"job": Field(str, required=True, max_len=NAME)}),
    "worker_hello": Op(
        {
            "job": Field(str, required=True, max_len=NAME),
            "token": Field(str, required=True, max_len=NAME),
            "pid": Field(int),
            "held": Field(int, check=lambda v: None if v >= 0 else "must be >= 0"),
        },
    ),
    "warm_hello": Op({"job": Field(str, required=True, max_len=NAME), "token": Field(str, required=True, max_len=NAME), "pid": Field(int)}),
    "warm_ready": Op({}),
    "job_status": Op(
        {
            "state": Field(str, check=lambda v: None if v in ("running", "idle", "needs_input", "done", "failed") else "is not a job state"),
            "status": Field((str, type(None)), max_len=NAME * 5),
            "summary": Field((str, type(None)), max_len=2000),
            "question": Field((str, type(None)), max_len=8000),
            "error": Field((str, type(None)), max_len=8000),
            "dialog": Field(bool),
            "dialogOptions": Field((list, type(None)), max_len=50),
            "settled": Field(bool),
            "trace": Field((str, type(None)), max_len=NAME),
            "hops": Field(int, check=lambda v: None if v >= 0 else "must be >= 0"),
            "causes": Field(list, max_len=1000),
            "hostPid": Field((int, type(None)), check=lambda v: None if v is None or 0 < v < 2**31 else "is not a process id"),
            "broadcastChain": Field(bool),
            "writeFailing": Field(bool),
            "usage": Field(dict, max_len=10),
            "background": Field(int, check=lambda v: None if v >= 0 else "must be >= 0"),
            "backgroundShown": Field(list, max_len=BACKGROUND_SHOWN, check=_check_background),
            "progress": Field(dict, max_len=3, check=_check_progress),
        },
        who="worker",
    ),
    "ack": Op({"seq": Field(int, required=True, check=lambda v: None if v >= 0 else "must be >= 0")}, who="bound", accept=True),
    "seen": Op({"seqs": Field(list, required=True, max_len=MAX_SEEN, check=lambda v: None if all(type(s) is int and s >= 0 for s in v) else "must be seqs (integers >= 0)")}, who="bound"),
    "peer_register": Op(
        {
            "session": Field((str, type(None)), max_len=PATH),
            "name": Field(str, max_len=NAME),
            "cwd": Field((str, type(None)), max_len=PATH),
            "pid": Field(int, required=True, check=lambda v: None if 0 < v < 2**31 else "is not a process id"),
            "sessionId": Field(str, max_len=NAME),
            "lastSeq": Field(int, check=lambda v: None if v >= 0 else "must be >= 0"),
            "host": Field(str, max_len=NAME),
            # ``roost attach``'s one-time token: the registration is the attached job's.
            "attach": Field(str, max_len=NAME),
        },
    ),
    "peers": Op({"watch": Field(str, max_len=NAME)}, who="bound"),
    "tool_call": Op(
        {
            "name": Field(str, required=True, max_len=NAME),
            "args": Field(dict, required=True),
            "hops": Field(int, check=lambda v: None if v >= 0 else "must be >= 0"),
            "broadcastChain": Field(bool),
        },
        who="bound",
        keyed=True,
    ),
    "spawn": Op(
        {
            "task": Field(str, required=True, max_len=TEXT, max_bytes=MAX_TEXT_BYTES),
            "name": Field(str, max_len=NAME),
            "cwd": Field(str, max_len=PATH),
            "model": Field(str, max_len=NAME),
            "thinking": Field(str, max_len=NAME),
            "host": Field(str, max_len=NAME),
            "scenario": Field((str, dict), max_len=TEXT),
            "workspace": Field(str, check=lambda v: None if v in WORKSPACE_KINDS else f"must be one of {', '.join(WORKSPACE_KINDS)}"),
            "base": Field(str, check=lambda v: None if v in WORKSPACE_BASES else f"must be one of {', '.join(WORKSPACE_BASES)}"),
        },
        who="bound",
        keyed=True,
    ),
    "handback": Op(
        {
            "result": Field((str, type(None)), max_len=TEXT),
            "state": Field(str, required=True, check=lambda v: None if v in ("done", "idle", "needs_input", "failed") else "is not a settled state"),
            "question": Field((str, type(None)), max_len=8000),
            "error": Field((str, type(None)), max_len=8000),
            "causes": Field(list, required=True, max_len=1000),
            "run": Field(int, check=lambda v: None if v >= 0 else "must be >= 0"),
        },
        who="worker",
    ),
    "send": Op(
        {
            "to": Field(str, required=True, max_len=NAME),
            "message": Field(str, required=True, max_len=TEXT, max_bytes=MAX_TEXT_BYTES),
            "reply_to": Field(str, max_len=NAME),
            "urgent": Field(bool),
        },
        who="bound",
        accept=True,
        keyed=True,
    ),
}


OPS = {name: op.bind(name) for name, op in OPS.items()}
