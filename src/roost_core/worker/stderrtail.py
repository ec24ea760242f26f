"""The last lines an agent CLI wrote on its stderr, to say why it failed.

A CLI that rejects roost's flags (another version) or cannot start says why on stderr
only; the worker copies that stream to its log and keeps the last few lines here, so a
run that fails when its CLI exits can name the CLI's own words in the job's error
(:meth:`StderrTail.since`). Bounded: :data:`MAX_LINES` lines of at most
:data:`MAX_LINE_CHARS` characters, and a line with no end yet is cut at
:data:`MAX_PARTIAL_BYTES`.
"""

from __future__ import annotations

import re
from collections import deque

#: How many of the last non-blank lines are kept.
MAX_LINES = 5
#: How long one kept line may be (a longer one is cut, saying so).
MAX_LINE_CHARS = 300
#: How much of a line still being written is held until its end.
MAX_PARTIAL_BYTES = 4096

#: Terminal colour and cursor sequences (CLIs colour their errors).
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def clean_line(raw: bytes) -> str:
    """One line as the error shows it: decoded, without terminal sequences or spaces
    around it, cut at :data:`MAX_LINE_CHARS`."""
    text = _ESCAPES.sub("", raw.decode("utf-8", errors="replace")).strip()
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + "…"


class StderrTail:
    """The last :data:`MAX_LINES` non-blank lines fed, each numbered, so a caller can ask
    for those written since a point (:meth:`count`, then :meth:`since`)."""

    def __init__(self) -> None:
        self._lines: deque[tuple[int, str]] = deque(maxlen=MAX_LINES)
        self._partial = b""
        self._count = 0

    def feed(self, data: bytes) -> None:
        """Take what the CLI wrote next (any piece of its stream)."""
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[:MAX_PARTIAL_BYTES]
        for raw in lines:
            self._add(raw)

    def end(self) -> None:
        """The stream ended: a last line with no line break counts too."""
        partial, self._partial = self._partial, b""
        self._add(partial)

    def _add(self, raw: bytes) -> None:
        line = clean_line(raw.rstrip(b"\r"))
        if line:
            self._count += 1
            self._lines.append((self._count, line))

    def count(self) -> int:
        """How many lines were taken so far (a point to ask :meth:`since` from)."""
        return self._count

    def since(self, point: int) -> list[str]:
        """The kept lines taken after :meth:`count` said ``point`` (the last few only)."""
        return [line for number, line in self._lines if number > point]
