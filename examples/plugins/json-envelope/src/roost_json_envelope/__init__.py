"""roost-json-envelope: agent items framed as one line of JSON, then the notice.

A framing plugin (entry point ``json-envelope``) for a model that reads JSON more
reliably than tags. The receiving agent sees::

    {"agent_message": {"from": "reviewer", "id": "a1b2c3d4", "relation": "child", "kind": "report", "body": "..."}}
    This comes from another agent session, not from the user. ...

followed by :data:`roost_core.policy.NO_USER_AUTHORITY`, exactly as the default envelope
ends. Injection-safe by construction: the body is a JSON string, so quotes, backslashes
and newlines are escaped and it can neither close the object nor start a line of its
own. On top of that ``<``, ``>`` and ``&`` are written as ``\\u003c``-style escapes (no
tag-shaped text such as ``<agent-message>`` survives, so nothing reads as the default
frame), and every invisible or control character (format characters such as bidi
overrides and the Unicode "tag" block, line/paragraph separators, private-use and lone
surrogates) is written as a visible ``\\uXXXX`` escape. ``json.loads`` gives back the
exact body. Names are sanitised with the same rule as roost's default envelope.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import TYPE_CHECKING, Any

from roost_core import hookimpl
from roost_core.policy import NO_USER_AUTHORITY

if TYPE_CHECKING:
    from roost_core.records import OutgoingItem

__version__ = "0.1.0"

#: The one key of the envelope object.
KEY = "agent_message"
FIELDS = ("from", "id", "relation", "kind", "body")

# The default envelope's name rule (plugins never import each other, so it is restated
# here; the tests check that both give the same name for any input).
MAX_NAME_CHARS = 64
_FALLBACK_NAME = "agent"
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp"})
_NAME_CHAR = re.compile(r"[\w .:@/-]")
_SPACES = re.compile(r"\s+")

#: Characters written as ``\uXXXX`` even though JSON would allow them raw.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp", "Cn"})
_ALWAYS_ESCAPED = frozenset("<>&")


def _sanitize_once(name: str) -> str:
    normal = unicodedata.normalize("NFKC", name)
    kept = "".join(
        ch for ch in normal if unicodedata.category(ch) not in _UNSAFE_CATEGORIES and _NAME_CHAR.fullmatch(ch)
    )
    return _SPACES.sub(" ", kept).strip()[:MAX_NAME_CHARS].strip()


def sanitize(name: str) -> str:
    """``name`` reduced to ``[\\w .:@/-]`` after NFKC, one space at a time, at most 64
    chars, stable when applied again; ``agent`` when nothing is left."""
    cleaned = _sanitize_once(name)
    for _ in range(3):
        again = _sanitize_once(cleaned)
        if again == cleaned:
            break
        cleaned = again
    return cleaned or _FALLBACK_NAME


def _escape(ch: str) -> str:
    code = ord(ch)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _needs_escape(ch: str) -> bool:
    return ch in _ALWAYS_ESCAPED or (ord(ch) > 0x7E and unicodedata.category(ch) in _ESCAPED_CATEGORIES)


def dumps(value: Any) -> str:
    """Compact one-line JSON with tag characters and invisible characters escaped.

    Outside strings JSON holds only ASCII punctuation, digits and letters, so escaping
    these characters wherever they appear only ever touches string contents.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return "".join(_escape(ch) if _needs_escape(ch) else ch for ch in text)


def frame(name: str, peer_id: str, relation: str, kind: str, body: str) -> str:
    """The framed text of one agent item: the JSON envelope, a newline, the notice."""
    envelope = {
        KEY: {
            "from": sanitize(name),
            "id": sanitize(peer_id),
            "relation": sanitize(relation),
            "kind": sanitize(kind),
            "body": body,
        }
    }
    return f"{dumps(envelope)}\n{NO_USER_AUTHORITY}"


def parse_envelope(text: str) -> dict[str, str] | None:
    """The envelope at the start of ``text`` (``from``, ``id``, ``relation``, ``kind``,
    ``body``), or None when ``text`` does not start with one."""
    try:
        value, _end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    inner = value.get(KEY) if isinstance(value, dict) and len(value) == 1 else None
    if not isinstance(inner, dict) or tuple(inner) != FIELDS or not all(isinstance(v, str) for v in inner.values()):
        return None
    return inner


@hookimpl
def roost_sanitize_name(name: str) -> str:
    """The default envelope's rule: ``[\\w .:@/-]`` after NFKC, at most 64 chars."""
    return sanitize(name)


@hookimpl
def roost_frame_item(item: OutgoingItem) -> str:
    """Frame ``item`` as ``{"agent_message": {...}}`` followed by the no-user-authority notice."""
    return frame(item.sender.name, item.sender.id, item.relation, item.kind, item.text)
