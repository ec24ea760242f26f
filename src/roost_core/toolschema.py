"""An agent tool's arguments, checked against the JSON schema its declaration gives the
model (:class:`~roost_core.records.ToolDef` ``parameters``): the one source of a tool's
shape, for what the model is shown and for what the daemon accepts.

The part of JSON Schema tools use: an object's ``properties`` (each with ``type``, and
``enum``, ``maxLength``, ``minLength``, ``maximum``, ``minimum`` where given),
``required``, and ``additionalProperties: false``. Anything else in a schema is taken as
documentation for the model, not checked. A failure is ``bad_args`` naming the field.
"""

from __future__ import annotations

from typing import Any

from roost_core.protocol import BAD_ARGS, ProtocolError

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def check_tool_args(tool: str, parameters: dict[str, Any], args: Any, absent: dict[str, str] | None = None) -> dict[str, Any]:
    """``args`` as the tool's ``parameters`` allow them (an optional one given as null counts
    as absent), or ``bad_args``; an unknown field ``absent`` names is refused with its
    reason there (the tool's :attr:`~roost_core.records.ToolDef.absent`)."""
    if not isinstance(args, dict):
        raise ProtocolError(BAD_ARGS, f"{tool}: arguments must be an object")
    properties = parameters.get("properties") or {}
    if parameters.get("additionalProperties") is False:
        unknown = sorted(set(args) - set(properties))
        absent = absent or {}
        explained = [name for name in unknown if name in absent and args[name] is not None]
        if explained:
            raise ProtocolError(BAD_ARGS, f"{tool}: field {explained[0]!r} is not offered here: {absent[explained[0]]}")
        unknown = [name for name in unknown if name not in absent]
        if unknown:
            raise ProtocolError(BAD_ARGS, f"{tool}: unknown field {unknown[0]!r}")
    required = set(parameters.get("required") or ())
    checked: dict[str, Any] = {}
    for name, value in args.items():
        schema = properties.get(name)
        if value is None and name not in required:
            continue
        if isinstance(schema, dict):
            problem = _problem(schema, value)
            if problem:
                raise ProtocolError(BAD_ARGS, f"{tool}: field {name!r} {problem}")
        checked[name] = value
    for name in sorted(required):
        if name not in checked:
            raise ProtocolError(BAD_ARGS, f"{tool}: field {name!r} is required")
    return checked


def _problem(schema: dict[str, Any], value: Any) -> str | None:
    """What is wrong with ``value`` for one property's schema, or None."""
    wanted = schema.get("type")
    if isinstance(wanted, str) and wanted in _TYPES:
        types = _TYPES[wanted]
        # JSON has one number type: true is no integer, 1.5 is none either.
        if isinstance(value, bool) and bool not in types:
            return f"must be {wanted}"
        if wanted == "integer" and isinstance(value, float):
            return "must be integer"
        if not isinstance(value, types):
            return f"must be {wanted}"
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        return f"must be one of {', '.join(map(str, enum))}"
    if isinstance(value, str):
        if isinstance(schema.get("maxLength"), int) and len(value) > schema["maxLength"]:
            return f"is longer than {schema['maxLength']} characters"
        if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
            return f"is shorter than {schema['minLength']} characters"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(schema.get("maximum"), (int, float)) and value > schema["maximum"]:
            return f"must be at most {schema['maximum']}"
        if isinstance(schema.get("minimum"), (int, float)) and value < schema["minimum"]:
            return f"must be at least {schema['minimum']}"
    return None
