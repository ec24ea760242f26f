"""The wire protocol: newline-delimited JSON frames, with no I/O.

Request ``{"id": <int|str>, "op": "<name>", ...}``; answer ``{"id", "ok": true, "result"}``
or ``{"id", "ok": false, "error": {"code", "message"}}``; pushed events
``{"event": "<name>", ...}``. A frame is at most :data:`MAX_FRAME` bytes (newline
excluded); a longer one is discarded up to its newline and answered ``frame_too_large``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import attrs

_orjson: ModuleType | None
try:  # the fast codec; the json module stays the reference and the fallback
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency, but roost runs without it
    _orjson = None

MAX_FRAME = 1024 * 1024
#: Room an item keeps for its fields other than its text (seq, kind, trace...).
ITEM_RESERVE = 4096
#: The longest text (a reply, a task, a message), measured as the item carries it: its
#: JSON string in UTF-8, quotes excluded (:func:`text_bytes`: 1 byte per ASCII
#: character, 2 to 4 per other character, 2 for ``"``, ``\\`` and the usual escapes such
#: as a newline, 6 for other control characters). A longer one is refused ``too_large``
#: (``Field.max_bytes``) before anything is stored; a reply or task within it always
#: makes an item that fits in a frame (its text is carried once).
MAX_TEXT_BYTES = MAX_FRAME - ITEM_RESERVE
#: The most seqs one ``seen`` names (a host tells what one model request holds new).
MAX_SEEN = 1000

# Stable error codes. Clients match on these, never on messages.
BAD_JSON = "bad_json"
FRAME_TOO_LARGE = "frame_too_large"
UNKNOWN_OP = "unknown_op"
BAD_ARGS = "bad_args"
NOT_FOUND = "not_found"
UNAUTHORIZED = "unauthorized"
CONFLICT = "conflict"
QUEUE_FULL = "queue_full"
NOT_ACCEPTED = "not_accepted"
AMBIGUOUS = "ambiguous"
NAME_TAKEN = "name_taken"
NO_HOST = "no_host"
JOB_STOPPED = "job_stopped"
UNREACHABLE = "unreachable"
NOT_STORED = "not_stored"
#: The user config file cannot be read or holds a wrong value (file, line and column said).
BAD_CONFIG = "bad_config"
BUSY = "busy"
INTERNAL = "internal"
TOO_LARGE = "too_large"
#: ``answer``: the job has no dialog open.
NO_DIALOG = "no_dialog"
#: ``answer``: the answer names none of the dialog's options.
NOT_AN_OPTION = "not_an_option"
#: ``log`` of a foreground peer that has no session file: there is no transcript to show.
NO_SESSION = "no_session"
#: ``reply``/``answer`` from a process inside a job's process tree (an agent's tool): only
#: a person speaks as the user (:mod:`roost_core.daemon.persons`).
NOT_A_PERSON = "not_a_person"
#: A plugin's answer broke a rule the core keeps whatever the plugins (the envelope's,
#: :mod:`roost_core.envelope_rules`); also the CLI's code for a plugin that fails to load.
PLUGIN_ERROR = "plugin_error"
#: A keyed request whose key was used already for a request that asked something else
#: (another receiver, another text): a key names one request (:mod:`roost_core.daemon.ledger`).
KEY_REUSED = "key_reused"
#: ``spawn``/``start`` with ``workspace: "worktree"`` from a folder in no repository (with a
#: working tree) that the workspace plugin can make a workspace of.
NOT_A_REPO = "not_a_repo"
#: ``spawn``/``start``: the child's branch or worktree folder exists already.
WORKSPACE_TAKEN = "workspace_taken"
#: ``spawn``/``start``: the version control failed to make the workspace (its words said).
WORKSPACE_FAILED = "workspace_failed"
#: ``remove``: the job's workspace holds work no other branch holds (commits, or changes
#: never committed); ``force`` drops it, ``keepWorkspace`` keeps it.
UNMERGED_WORK = "unmerged_work"
#: ``attach``: the job's host has no interactive interface (no ``attach`` in its HostSpec).
NOT_ATTACHABLE = "not_attachable"
#: ``attach``: another ``roost attach`` holds the job (its pid is said).
ATTACHED_ELSEWHERE = "attached_elsewhere"
#: ``attach --now``: the job's host cannot interrupt a run; attach without it waits.
NOT_INTERRUPTIBLE = "not_interruptible"


class ProtocolError(Exception):
    """An error answer: a stable ``code`` and a human ``message``."""

    def __init__(self, code: str, message: str, **data: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        error = {"code": self.code, "message": self.message}
        error.update(self.data)
        return error


if _orjson is not None:
    #: Anything orjson would write differently from json (a subclass of str/int/dict/list,
    #: a dataclass, a datetime) is handed to ``default``, which has none: it raises, and
    #: json writes it (or raises) exactly as before. So do non-str keys, ints beyond 64 bits
    #: and lone surrogates.
    _ORJSON_OPTIONS = (
        _orjson.OPT_APPEND_NEWLINE
        | _orjson.OPT_PASSTHROUGH_SUBCLASS
        | _orjson.OPT_PASSTHROUGH_DATACLASS
        | _orjson.OPT_PASSTHROUGH_DATETIME
    )


class EncodedOnce(list):  # type: ignore[type-arg]
    """A list whose JSON is made once, the first time a frame holding it is encoded, and
    put as it is into every frame encoded after (orjson's ``Fragment``). For a long list
    kept unchanged and sent again and again: the peer listing, kept until the peer table
    changes, is 2 MB of JSON at 10,000 peers, and writing it anew took the daemon's loop
    5–8 ms per ``peers`` call. Everywhere else it is the list it holds; nothing may change
    it once it is shared (as for any kept listing). Without orjson, json writes it as the
    list it is."""

    __slots__ = ("_fragment",)
    _fragment: Any

    def fragment(self) -> Any:
        """Its JSON, as a fragment orjson writes as it is (made the first time)."""
        try:
            return self._fragment
        except AttributeError:
            assert _orjson is not None, "only orjson's default asks for a fragment"
            self._fragment = _orjson.Fragment(_orjson.dumps(list(self), option=_ORJSON_OPTIONS & ~_orjson.OPT_APPEND_NEWLINE))
            return self._fragment


def _encoded_once(value: Any) -> Any:
    """orjson's ``default``: an :class:`EncodedOnce` as its fragment. Anything else it
    hands here (see ``_ORJSON_OPTIONS``) raises, and json writes the frame."""
    if type(value) is EncodedOnce:
        return value.fragment()
    raise TypeError


def encode(frame: dict[str, Any]) -> bytes:
    """One frame as a line: compact UTF-8 JSON (orjson when installed, else json)."""
    if _orjson is not None:
        try:
            line: bytes = _orjson.dumps(frame, default=_encoded_once, option=_ORJSON_OPTIONS)
            return line
        except TypeError:
            pass
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def encode_string(text: str) -> bytes:
    """``text`` as a JSON string, as :func:`encode` writes one inside a frame."""
    if _orjson is not None:
        try:
            encoded: bytes = _orjson.dumps(text)
            return encoded
        except TypeError:
            pass  # what orjson refuses (a lone surrogate) goes the json way, as in encode
    return json.dumps(text, ensure_ascii=False).encode("utf-8")


def too_large(what: str, size: int, limit: int) -> ProtocolError:
    """The refusal of something that would not fit in a frame (``too_large``): it names
    the limit, and carries ``limit`` and ``size`` (in bytes) for a client to act on."""
    return ProtocolError(TOO_LARGE, f"{what} is too large: {size} bytes as JSON, the limit is {limit}; nothing was kept", limit=limit, size=size)


def request_too_large(line: bytes) -> ProtocolError | None:
    """A client's check before it writes a request: ``frame_too_large`` (with ``limit``
    and ``size``) for a line longer than :data:`MAX_FRAME`, which the daemon would
    discard and answer with no id (so a waiting client would never hear of it)."""
    size = len(line) - 1 if line.endswith(b"\n") else len(line)
    if size <= MAX_FRAME:
        return None
    return ProtocolError(
        FRAME_TOO_LARGE,
        f"request is too large: {size} bytes as JSON, a frame holds at most {MAX_FRAME}; nothing was sent",
        limit=MAX_FRAME,
        size=size,
    )


def error_of(err: Any) -> ProtocolError:
    """The :class:`ProtocolError` an error answer's ``error`` object stands for, with its
    fields beyond ``code`` and ``message`` (a ``limit``, a ``size``)."""
    err = err if isinstance(err, dict) else {}
    extra = {key: value for key, value in err.items() if key not in ("code", "message") and isinstance(key, str)}
    return ProtocolError(str(err.get("code", "unknown")), str(err.get("message", "")), **extra)


def ok(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"id": request_id, "ok": True, "result": result}


def error(request_id: Any, exc: ProtocolError) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "error": exc.to_json()}


class FrameDecoder:
    """Split a byte stream into decoded frames.

    ``feed`` returns a list holding, per complete line, a dict or a :class:`ProtocolError`
    (``bad_json`` or ``frame_too_large``); blank lines are ignored. An oversize line is
    dropped as it streams in, so memory stays bounded by :data:`MAX_FRAME`.
    """

    def __init__(self, max_frame: int = MAX_FRAME, decode: Callable[[bytes], dict[str, Any] | ProtocolError] | None = None) -> None:
        self.max_frame = max_frame
        self.decode = decode or decode_line
        self._buffer = bytearray()
        self._discarding = False

    @property
    def pending_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[dict[str, Any] | ProtocolError]:
        if not self._buffer and not self._discarding and len(data) <= self.max_frame and data.endswith(b"\n"):
            # Whole lines and nothing held (a client's usual write): no line is too long.
            decode = self.decode
            if data.find(b"\n") == len(data) - 1:
                # One line, the most usual write of all: no split, no list made to walk.
                return [] if data.isspace() else [decode(data[:-1])]
            return [decode(line) for line in data.split(b"\n")[:-1] if line.strip()]
        out: list[dict[str, Any] | ProtocolError] = []
        start = 0
        while True:
            newline = data.find(b"\n", start)
            if newline < 0:
                break
            chunk = data[start:newline]
            start = newline + 1
            if self._discarding:
                self._discarding = False
                self._buffer.clear()
                continue
            if self._buffer:
                self._buffer += chunk
                line = bytes(self._buffer)
                self._buffer.clear()
            else:
                line = chunk
            if len(line) > self.max_frame:
                out.append(ProtocolError(FRAME_TOO_LARGE, f"frame larger than {self.max_frame} bytes"))
                continue
            if line.strip():
                out.append(self.decode(line))
        rest = data[start:]
        if rest and not self._discarding:
            self._buffer += rest
            if len(self._buffer) > self.max_frame:
                self._buffer.clear()
                self._discarding = True
                out.append(ProtocolError(FRAME_TOO_LARGE, f"frame larger than {self.max_frame} bytes"))
        return out


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _not_json(constant: str) -> Any:
    # Python's json reads NaN and Infinity, which JSON has not: no strict peer sends them.
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    # 1e999 is JSON, but as a float it is infinite, and an answer holding it would not be.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


#: A run of 19+ digits may be an integer beyond 64 bits, which orjson reads as a float:
#: digits become "0", everything else ".", and a run of nineteen "0" is looked for (much
#: cheaper than a regular expression).
_DIGIT_MAP = bytes(ord("0") if chr(byte).isdigit() and byte < 128 else ord(".") for byte in range(256))
_NINETEEN = b"0" * 19


def _long_digits(line: bytes) -> bool:
    return _NINETEEN in line.translate(_DIGIT_MAP)


#: json refuses to nest about 1000 deep (RecursionError), orjson 1024: near that, json decides.
_DEEP = 900
_CONTAINERS = (dict, list)


def _shallow(value: Any, line: bytes) -> bool:
    """Whether ``value`` (read from ``line``) nests fewer than :data:`_DEEP` containers.

    A line with fewer brackets than that cannot nest deeper (the common case, two byte
    counts). A wide one, such as a listing of a thousand peers, is walked: its containers
    only, which costs far less than reading it again the json way."""
    if type(value) not in _CONTAINERS or line.count(b"[") + line.count(b"{") < _DEEP:
        return True
    stack = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth >= _DEEP:
            return False
        for item in container.values() if type(container) is dict else container:
            if type(item) in _CONTAINERS:
                stack.append((item, depth + 1))
    return True


def decode_line(line: bytes, *, checked: bool = True) -> dict[str, Any] | ProtocolError:
    if _orjson is not None:
        # orjson accepts a subset of what the json path below accepts and reads it to the
        # same values (it refuses NaN, infinite numbers, lone surrogates and invalid UTF-8);
        # whatever it refuses, or might read differently (``checked``), goes the json way,
        # which also words the error.
        try:
            frame = _orjson.loads(line)
        except _orjson.JSONDecodeError:
            pass
        else:
            if isinstance(frame, dict) and (not checked or (not _long_digits(line) and _shallow(frame, line))):
                return frame
    return _decode_line_json(line)


def decode_answer(line: bytes) -> dict[str, Any] | ProtocolError:
    """A frame the daemon wrote (what clients read): orjson's reading as it is.

    The checks of :func:`decode_line` keep a request's meaning the same whichever codec
    reads it, against any input; the daemon's frames come from :func:`encode`, which
    writes nothing they would catch that a client cares about (the one case, an integer
    beyond 64 bits, is a request id the client chose). Whatever orjson refuses still
    goes the json way, which words the error."""
    return decode_line(line, checked=False)


def _decode_line_json(line: bytes) -> dict[str, Any] | ProtocolError:
    try:
        frame = json.loads(line.decode("utf-8"), parse_constant=_not_json, parse_float=_finite)
    except UnicodeDecodeError:
        return ProtocolError(BAD_JSON, "frame is not valid UTF-8")
    except RecursionError:
        return ProtocolError(BAD_JSON, "frame nests too deeply")
    except ValueError as exc:
        return ProtocolError(BAD_JSON, f"frame is not JSON: {exc}")
    if not isinstance(frame, dict):
        return ProtocolError(BAD_JSON, "frame must be a JSON object")
    if _SURROGATE_ESCAPE.search(line):
        # A lone surrogate decodes to a str that can never be written back as UTF-8.
        try:
            json.dumps(frame, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return ProtocolError(BAD_JSON, "frame holds a lone UTF-16 surrogate")
    return frame


#: The keys of a request that are not its op's arguments.
ENVELOPE_KEYS = ("id", "op")


def request_envelope(frame: dict[str, Any]) -> tuple[int | str, str]:
    """A request's (id, op), once both are valid (else ``bad_args``)."""
    request_id = frame.get("id")
    if request_id is None or isinstance(request_id, bool) or not isinstance(request_id, (int, str)):
        raise ProtocolError(BAD_ARGS, "request needs an id (integer or string)")
    op = frame.get("op")
    if not isinstance(op, str) or not op:
        raise ProtocolError(BAD_ARGS, "request needs an op (string)")
    return request_id, op


# --------------------------------------------------------------------------- argument checks

#: A field type: a python type, a tuple of types, or a callable check returning an error or None.
FieldType = Any


@attrs.frozen
class Field:
    type: FieldType
    required: bool = False
    #: The longest string (in characters), array or object; longer is ``bad_args``.
    max_len: int | None = None
    check: Callable[[Any], str | None] | None = None
    #: A string's limit in bytes as an item carries it (:func:`text_bytes`); longer is
    #: ``too_large``. For the texts that become queued items (a reply, a task, a message).
    max_bytes: int | None = None


#: No character takes more than this many bytes in JSON (a control character: ``\\u0000``).
MOST_BYTES_PER_CHAR = 6


def text_bytes(text: str) -> int:
    """``text``'s size as a frame (and an item) carries it: its JSON string in UTF-8,
    quotes excluded. (The daemon's encoders, orjson and msgspec, write a string alike.)"""
    return len(encode_string(text)) - 2


def check_bytes(op: str, name: str, value: Any, limit: int) -> None:
    """Refuse (``too_large``) a string argument longer than ``limit`` bytes as JSON. A
    short one is not measured: every send's message passes here."""
    if isinstance(value, str) and len(value) * MOST_BYTES_PER_CHAR > limit:
        size = text_bytes(value)
        if size > limit:
            raise too_large(f"{op}: field {name!r}", size, limit)


def _type_name(spec: FieldType) -> str:
    if isinstance(spec, tuple):
        return " or ".join(_type_name(t) for t in spec)
    return {str: "string", int: "integer", bool: "boolean", dict: "object", list: "array", float: "number", type(None): "null"}.get(spec, str(spec))


def _is_instance(value: Any, spec: FieldType) -> bool:
    types = spec if isinstance(spec, tuple) else (spec,)
    if isinstance(value, bool) and bool not in types:
        return False
    if float in types and isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, types)


_MISSING = object()


def compile_args(schema: dict[str, Field], op: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """:func:`validate_args` for one op, reading the arguments straight from the request
    frame (its ``id`` and ``op`` are not arguments): the same checks, in the same order,
    with the same errors, with what depends only on the schema worked out once."""
    assert not set(schema) & set(ENVELOPE_KEYS), "an argument cannot be named id or op"
    allowed = frozenset(schema) | frozenset(ENVELOPE_KEYS)
    plan = []
    for name, field in schema.items():
        types = field.type if isinstance(field.type, tuple) else (field.type,)
        plan.append(
            (
                name,
                field.required,
                types,
                bool in types,
                float in types,
                type(None) in types,
                field.max_len,
                field.check,
                _type_name(field.type),
                field.max_bytes,
            )
        )

    def check(frame: dict[str, Any]) -> dict[str, Any]:
        if not frame.keys() <= allowed:
            unknown = sorted(set(frame) - allowed)
            raise ProtocolError(BAD_ARGS, f"{op}: unknown field(s) {', '.join(unknown)}")
        clean: dict[str, Any] = {}
        for name, required, types, bool_ok, float_ok, none_ok, max_len, extra, type_name, max_bytes in plan:
            value = frame.get(name, _MISSING)
            if value is _MISSING or (value is None and not none_ok):
                if required:
                    raise ProtocolError(BAD_ARGS, f"{op}: missing field {name!r}")
                continue
            if value.__class__ is bool:
                fits = bool_ok
            else:
                fits = isinstance(value, types) or (float_ok and isinstance(value, int))
            if not fits:
                raise ProtocolError(BAD_ARGS, f"{op}: field {name!r} must be {type_name}")
            if max_len is not None and isinstance(value, (str, list, dict)) and len(value) > max_len:
                raise ProtocolError(BAD_ARGS, f"{op}: field {name!r} is longer than {max_len}", limit=max_len)
            if max_bytes is not None:
                check_bytes(op, name, value, max_bytes)
            if extra is not None:
                problem = extra(value)
                if problem:
                    raise ProtocolError(BAD_ARGS, f"{op}: field {name!r} {problem}")
            clean[name] = value
        return clean

    return check


def validate_args(schema: dict[str, Field], args: dict[str, Any], op: str) -> dict[str, Any]:
    """Check ``args`` against ``schema``; unknown fields are refused so typos surface."""
    if not args.keys() <= schema.keys():
        unknown = sorted(set(args) - set(schema))
        raise ProtocolError(BAD_ARGS, f"{op}: unknown field(s) {', '.join(unknown)}")
    clean: dict[str, Any] = {}
    for name, field in schema.items():
        if name not in args or (args[name] is None and not _is_instance(None, field.type)):
            if field.required:
                raise ProtocolError(BAD_ARGS, f"{op}: missing field {name!r}")
            continue
        value = args[name]
        if not _is_instance(value, field.type):
            raise ProtocolError(BAD_ARGS, f"{op}: field {name!r} must be {_type_name(field.type)}")
        if field.max_len is not None and isinstance(value, (str, list, dict)) and len(value) > field.max_len:
            raise ProtocolError(BAD_ARGS, f"{op}: field {name!r} is longer than {field.max_len}", limit=field.max_len)
        if field.max_bytes is not None:
            check_bytes(op, name, value, field.max_bytes)
        if field.check is not None:
            problem = field.check(value)
            if problem:
                raise ProtocolError(BAD_ARGS, f"{op}: field {name!r} {problem}")
        clean[name] = value
    return clean
