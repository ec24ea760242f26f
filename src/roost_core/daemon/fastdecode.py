"""Requests of the ops that need no wait (``send`` and ``ack``: every message's path),
read and checked in one step.

msgspec reads such a line straight into a struct of its op, checking the types and
lengths of its op's schema on the way, in C; the structs are made from the schemas of
``dispatch.OPS``, so the two cannot drift apart. Any other line, and any such line that
is not a valid request, is read the general way (``protocol.decode_line``, then the op's
compiled check), which words every error. So the fast way only ever accepts what the
general way accepts, with the same arguments; it never refuses anything itself.

Without msgspec installed (or for an op whose schema it cannot express) every line goes
the general way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, Union

from roost_core.protocol import BAD_ARGS, Field, ProtocolError, check_bytes, decode_line

try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec is a dependency; the daemon runs without it
    msgspec = None  # type: ignore[assignment]
else:
    _asdict = msgspec.structs.asdict

#: The argument types a fast struct can check exactly as ``protocol.compile_args`` does
#: (msgspec takes no bool for an int, no int or float for a str, and counts a string's
#: length in code points, as ``len`` does).
_TYPES = (str, int, bool)


def _field_type(field: Field) -> Any:
    if field.type not in _TYPES:
        raise TypeError(f"no fast check for a field of type {field.type!r}")
    if field.type is str and field.max_len is not None:
        return Annotated[str, msgspec.Meta(max_length=field.max_len)]
    return field.type


def _bytes_check(op: str, name: str, limit: int) -> Callable[[Any], str | None]:
    """A field's limit in bytes as a check of :meth:`FastDecoder.args`: it raises the
    ``too_large`` that ``compile_args`` raises (msgspec counts only characters). (A
    partial: every send's text passes here, and it adds no Python frame.)"""
    return functools.partial(check_bytes, op, name, limit=limit)


class FastDecoder:
    """Reads one request line: a struct of one of ``schemas``' ops when it is a valid
    request of that op, else what ``decode_line`` reads (a frame dict, or the
    ``ProtocolError`` to answer)."""

    def __init__(self, schemas: dict[str, dict[str, Field]]) -> None:
        #: struct type -> (op name, the schema's extra checks: (field, check)).
        self.ops: dict[type, tuple[str, list[tuple[str, Callable[[Any], str | None]]]]] = {}
        self._decode: Callable[[bytes], Any] | None = None
        if msgspec is None:
            return
        for name, schema in schemas.items():
            try:
                fields = [(key, _field_type(field)) if field.required else (key, Union[_field_type(field), None], None) for key, field in schema.items()]  # noqa: UP007 - a type built at run time for msgspec, spelled as the Union below
            except TypeError:
                continue  # that op's lines go the general way
            struct = msgspec.defstruct(
                f"FastRequest_{name}",
                [("id", Union[int, str]), *fields],  # noqa: UP007 - as above
                tag_field="op",
                tag=name,
                forbid_unknown_fields=True,
                kw_only=True,
            )
            checks: list[tuple[str, Callable[[Any], str | None]]] = []
            for key, field in schema.items():
                if field.max_bytes is not None:
                    checks.append((key, _bytes_check(name, key, field.max_bytes)))
                if field.check is not None:
                    checks.append((key, field.check))
            self.ops[struct] = (name, checks)
        if self.ops:
            self._decode = msgspec.json.Decoder(Union[tuple(self.ops)]).decode  # noqa: UP007 - a Union of a computed tuple has no `|` form

    def __call__(self, line: bytes) -> Any:
        if self._decode is not None:
            try:
                return self._decode(line)
            except (msgspec.MsgspecError, RecursionError, ValueError):
                # Not a valid fast request (RecursionError: nesting too deep to skip;
                # ValueError: an integer too long to read): the general way says what it is.
                pass
        return decode_line(line)

    def args(self, request: Any) -> dict[str, Any]:
        """A fast request's checked arguments (an optional one not given is None): the
        schema's own checks run here, as ``compile_args`` runs them."""
        name, checks = self.ops[type(request)]
        args = _asdict(request)
        del args["id"]
        for key, check in checks:
            value = args[key]
            if value is not None:
                problem = check(value)
                if problem:
                    raise ProtocolError(BAD_ARGS, f"{name}: field {key!r} {problem}")
        return args
