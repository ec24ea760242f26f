"""Peer ids.

A job id is 8 hex characters that never starts with ``f``; a foreground peer's id is
``f`` + 7 hex characters taken from its session id (random for a no-session peer). The
first character alone therefore tells the two apart, and they can never collide.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import secrets

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_HEXISH = re.compile(r"^[0-9a-fA-F]{7}[0-9a-fA-F-]*$")


def new_job_id(taken: set[str] | frozenset[str] = frozenset()) -> str:
    while True:
        candidate = secrets.token_hex(4)
        if candidate[0] != "f" and candidate not in taken:
            return candidate


def foreground_id(session_id: str | None) -> str:
    """``f`` + 7 hex from the session id; random when there is none (``--no-session``)."""
    if not session_id:
        return "f" + secrets.token_hex(4)[:7]
    if _UUID.match(session_id):
        # pi's session ids are UUIDv7, whose leading digits are a timestamp shared by every
        # session of the same minutes: take the random tail.
        return "f" + session_id.replace("-", "").lower()[-7:]
    if _HEXISH.match(session_id):
        return "f" + session_id.replace("-", "").lower()[:7]
    # Anything else (a path, a name) is hashed, so similar strings do not collide.
    return "f" + hashlib.sha256(session_id.encode()).hexdigest()[:7]


_MESSAGE_ID = re.compile(r"^m[0-9a-f]{8}$")


#: Message ids name a message for replies and quotes; they grant nothing, so they come
#: from a generator seeded by the system's randomness (and seeded again in each forked
#: child, so two processes never share its sequence), not from a syscall per message.
_MESSAGE_IDS = random.Random()
#: Ids made ahead, a batch at a time (one draw and one format for all of them).
_NEXT_IDS: list[str] = []
_ID_BATCH = 256


def _forked() -> None:
    _MESSAGE_IDS.seed()
    _NEXT_IDS.clear()  # the parent's ids stay the parent's


os.register_at_fork(after_in_child=_forked)


def new_message_id() -> str:
    """A message id: ``m`` + 8 hex (one per ``send`` call, so every receiver of a
    broadcast holds the same id and a reply to any of them names it)."""
    if not _NEXT_IDS:
        digits = f"{_MESSAGE_IDS.getrandbits(32 * _ID_BATCH):0{8 * _ID_BATCH}x}"
        _NEXT_IDS.extend("m" + digits[start : start + 8] for start in range(0, 8 * _ID_BATCH, 8))
    return _NEXT_IDS.pop()


def is_message_id(value: str) -> bool:
    return bool(_MESSAGE_ID.match(value))


def new_token() -> str:
    return secrets.token_urlsafe(32)
