"""Default envelope: sanitised names and the ``<agent-message>`` frame with the
no-user-authority notice.

The body is *neutralised* so it cannot open or close a frame of its own, and the
neutralising is exactly reversible (:func:`restore`), so :func:`parse_envelopes` gives back
the body as sent.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import TYPE_CHECKING

from roost_core import hookimpl
from roost_core.policy import NO_USER_AUTHORITY

if TYPE_CHECKING:
    from roost_core.records import OutgoingItem

MAX_NAME_CHARS = 64
_FALLBACK_NAME = "agent"
#: Categories dropped from names even where ``\w`` might not already exclude them.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp"})
_NAME_CHAR = re.compile(r"[\w .:@/-]")
_SPACES = re.compile(r"\s+")
#: A name that sanitising leaves as it is: ASCII name characters, single inner spaces.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.:@/-]+(?: [A-Za-z0-9_.:@/-]+)*")

# What a lenient reader may skip inside a tag: any whitespace (``\s``: Unicode's, line
# breaks included) and every invisible format character (Unicode category Cf: zero-width
# spaces and joiners, bidi controls, soft hyphen, BOM, tag characters...; the set of
# Unicode 14, Python 3.11's, checked by the envelope tests). ``< /Agent-Message>`` reads as
# a closing tag to such a reader, so a ``<`` is a tag's when, with those skipped, ``/`` and
# the name follow it in any case (Unicode simple case folding included).
_INVISIBLE = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
# Possessive (``*+``): no backtracking into a gap, so a ``<`` before a long run of spaces
# costs one pass, not one per space (a plain ``*`` made that quadratic).
_GAP = rf"[\s{_INVISIBLE}]*+"
_NAME = _GAP.join(re.escape(ch) for ch in "agent-message")
_TAG = rf"{_GAP}/?{_GAP}(?i:{_NAME})"
# Step 1 of neutralising: an ``&`` that already spells an escaped tag gets one more ``amp;``,
# so the ``&lt;`` made in step 2 can be told apart from one that was in the body.
_ESCAPED_TAG_AMP = re.compile(rf"&(?=(?:amp;)*lt;{_TAG})")
_ESCAPED_TAG_AMP_ONCE_MORE = re.compile(rf"&amp;(?=(?:amp;)*lt;{_TAG})")
_RAW_TAG = re.compile(rf"<(?={_TAG})")
_NEUTRAL_TAG = re.compile(rf"&lt;(?={_TAG})")

_ENVELOPE = re.compile(
    r'<agent-message from="([^"<>]*)" id="([^"<>]*)" relation="([^"<>]*)" kind="([^"<>]*)"'
    r'(?: msg="([^"<>]*)")?(?: reply-to="([^"<>]*)")?>\n'
    r"(.*?)\n</agent-message>",
    re.DOTALL,
)


def _sanitize_once(name: str) -> str:
    normal = unicodedata.normalize("NFKC", name)
    kept = "".join(
        ch for ch in normal if unicodedata.category(ch) not in _UNSAFE_CATEGORIES and _NAME_CHAR.fullmatch(ch)
    )
    return _SPACES.sub(" ", kept).strip()[:MAX_NAME_CHARS].strip()


@functools.lru_cache(maxsize=4096)
def sanitize(name: str) -> str:
    """``name`` reduced to ``[\\w .:@/-]``, one space at a time, at most 64 chars."""
    if len(name) <= MAX_NAME_CHARS and _PLAIN_NAME.fullmatch(name):
        # Nothing to take out (NFKC leaves ASCII as it is): message ids, usual names.
        return name
    return sanitize_in_full(name)


def sanitize_id(value: str) -> str:
    """:func:`sanitize` for a message id: each is new, so it is not cached (it would only
    push the names, which repeat, out of the cache)."""
    if len(value) <= MAX_NAME_CHARS and value.isascii() and value.isalnum():
        return value  # (ASCII letters and digits, as the daemon's ids are: kept as they are)
    return sanitize.__wrapped__(value)


def sanitize_in_full(name: str) -> str:
    """:func:`sanitize` with no shortcut for a name that needs no change."""
    cleaned = _sanitize_once(name)
    # Dropping a character can let its neighbours compose under NFKC; repeat so the result
    # is stable when the core sanitises a name that was sanitised before.
    for _ in range(3):
        again = _sanitize_once(cleaned)
        if again == cleaned:
            break
        cleaned = again
    return cleaned or _FALLBACK_NAME


def neutralise(body: str) -> str:
    """``body`` with every ``<agent-message`` / ``</agent-message`` made inert (reversibly),
    in every spelling a lenient reader might take for one (see ``_TAG``)."""
    if "<" not in body and "&" not in body:
        return body  # no tag and no escaped tag can start without one of them
    return _RAW_TAG.sub("&lt;", _ESCAPED_TAG_AMP.sub("&amp;", body))


def restore(body: str) -> str:
    """The exact inverse of :func:`neutralise`."""
    return _ESCAPED_TAG_AMP_ONCE_MORE.sub("&", _NEUTRAL_TAG.sub("<", body))


def frame(name: str, peer_id: str, relation: str, kind: str, body: str, msg: str | None = None, reply_to: str | None = None) -> str:
    """The framed text of one agent item (the spec's Envelope), with the message's id
    (``msg``) and the id it answers (``reply-to``) when it has them."""
    ids = f' msg="{sanitize_id(msg)}"' if msg else ""
    if reply_to:
        # The sender wrote this id: sanitised like a name, so it cannot close the tag.
        ids += f' reply-to="{sanitize_id(reply_to)}"'
    return f"{_opening(name, peer_id, relation, kind)}{ids}>\n{neutralise(body)}\n</agent-message>\n{NO_USER_AUTHORITY}"


@functools.lru_cache(maxsize=4096)
def _opening(name: str, peer_id: str, relation: str, kind: str) -> str:
    """The envelope's opening tag up to its ids: the same for every item of one sender
    and kind to one relation, so it is made once."""
    return f'<agent-message from="{sanitize(name)}" id="{sanitize(peer_id)}" relation="{sanitize(relation)}" kind="{sanitize(kind)}"'


def parse_envelopes(text: str) -> list[dict[str, str | None]]:
    """Every envelope in ``text``: ``from``, ``id``, ``relation``, ``kind``, ``msg`` and
    ``reply_to`` (None when absent) and the restored ``body``."""
    return [
        {
            "from": match[1],
            "id": match[2],
            "relation": match[3],
            "kind": match[4],
            "msg": match[5],
            "reply_to": match[6],
            "body": restore(match[7]),
        }
        for match in _ENVELOPE.finditer(text)
    ]


@hookimpl(trylast=True)
def roost_sanitize_name(name: str) -> str:
    """Keep ``[\\w .:@/-]`` after NFKC; no quotes, brackets, controls or invisible marks."""
    return sanitize(name)


@hookimpl(trylast=True)
def roost_frame_item(item: OutgoingItem) -> str:
    """Frame ``item`` in ``<agent-message ...>`` (with ``msg`` and ``reply-to`` ids)
    followed by the no-user-authority notice."""
    return frame(item.sender.name, item.sender.id, item.relation, item.kind, item.text, item.id, item.reply_to)
