"""Job names: kept as the user (or agent) typed them, checked for the few things that make a
name unusable, and made safe only where they are drawn on a terminal.

A name has two forms, and every lookup takes both, exactly (never partly): the name as
typed, and the name as an envelope frames it (``roost_sanitize_name``, ``[\\w .:@/-]``),
which is what agents read in ``from="..."``. The framing is the envelope plugin's
(:mod:`roost_plugins.envelope`); the terminal drawing is :func:`shown` (the CLI, the
views).
"""

from __future__ import annotations

import shlex
import unicodedata
from typing import Any

#: The longest name, in characters (the ``name`` field's limit on every op).
MAX_NAME_CHARS = 200
#: What ``str.splitlines`` breaks a line at: a name with one could not be typed as one
#: argument, nor drawn on one line, nor framed on one.
LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
#: Unicode categories drawn as escapes on a terminal: controls (ESC moves the cursor),
#: format characters (bidi overrides and marks reorder what follows them, zero-width
#: characters hide), line and paragraph separators, lone surrogates.
_UNSHOWN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_SHORT_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def check_name(name: str, what: str = "name") -> str:
    """``name`` unchanged when it is usable, else ``bad_args`` saying why: blank (no
    visible character: only whitespace, controls and invisible format characters),
    longer than :data:`MAX_NAME_CHARS`, or holding a line break or a NUL. Nothing else is
    taken out: an emoji, a right-to-left mark or a tab stays (:func:`shown` draws them
    safely, lookups take the framed form too)."""
    # Here, not at the top: the CLI draws names with this module and starts fast.
    from roost_core.protocol import BAD_ARGS, ProtocolError

    if all(ch.isspace() or _unshown(ch) for ch in name):
        raise ProtocolError(BAD_ARGS, f"{what} is blank; give a name with a visible character, or none")
    if len(name) > MAX_NAME_CHARS:
        raise ProtocolError(BAD_ARGS, f"{what} is {len(name)} characters long; at most {MAX_NAME_CHARS}")
    if "\x00" in name or any(ch in LINE_BREAKS for ch in name):
        raise ProtocolError(BAD_ARGS, f"{what} {shown(name)!r} holds a line break or a NUL; a name is one line")
    return name


def derived_name(text: str, fallback: str = "job") -> str:
    """A usable name made from ``text`` (a task, a session's folder): line breaks and NULs
    become spaces, whitespace runs one space, cut to :data:`MAX_NAME_CHARS`."""
    flat = "".join(" " if ch in LINE_BREAKS or ch == "\x00" else ch for ch in text)
    name = " ".join(flat.split())[:MAX_NAME_CHARS].strip()
    return name or fallback


def _escape(ch: str) -> str:
    if ch in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[ch]
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _unshown(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSHOWN_CATEGORIES


def shown(text: str, *, keep: str = "") -> str:
    """``text`` safe to draw on a terminal: every control, format (bidi, zero-width),
    line- or paragraph-separator character becomes a visible escape (``\\t``, ``\\x1b``,
    ``\\u202e``), so it can neither move the cursor nor reorder the line, and a reader
    sees it is there. ``keep`` names characters left as they are (``"\\n\\t"`` for a
    transcript's text)."""
    if text.isascii() and text.isprintable():
        return text  # the usual name: nothing to do
    return "".join(_escape(ch) if ch not in keep and _unshown(ch) else ch for ch in text)


def shell_word(name: str) -> str:
    """``name`` as one word a user can paste into a shell command line: quoted by
    :func:`shlex.quote`, or, when it holds characters :func:`shown` escapes, as bash's
    ``$'...'`` with the same escapes (so the line shows no raw control or bidi mark and
    still names the job)."""
    if shown(name) == name:
        return shlex.quote(name)
    body = "".join(
        "\\\\" if ch == "\\" else "\\'" if ch == "'" else _escape(ch) if _unshown(ch) else ch for ch in name
    )
    return f"$'{body}'"


def shown_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``rows`` (jobs or agents) with every text field on one line (a line
    break is a space: a question may span lines, a name cannot) and :func:`shown`, for
    drawing only: lookups take the rows as the daemon sent them."""
    return [{key: shown(_one_line(value)) if isinstance(value, str) else value for key, value in row.items()} for row in rows]


def _one_line(text: str) -> str:
    if text.isascii() and "\n" not in text and "\r" not in text:
        return text
    return "".join(" " if ch in LINE_BREAKS else ch for ch in text)


def json_text(data: Any) -> str:
    """``data`` as the indented JSON ``--json`` prints: non-ASCII text as it is (an emoji
    stays an emoji), except what :func:`shown` escapes, written as JSON's own ``\\uXXXX``
    escapes (JSON escapes only controls below 0x20), so the same data parses back and a
    terminal gets no raw bidi mark."""
    import json

    text = json.dumps(data, ensure_ascii=False, indent=2)
    if text.isascii():
        return text
    # (A raw line break is the indentation's: json.dumps escaped every one in a string.)
    return "".join(_json_escape(ch) if ch != "\n" and _unshown(ch) else ch for ch in text)


def _json_escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
