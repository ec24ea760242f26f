"""A journal for the op logic's unit tests (``tests/unit/test_delivery.py``,
``test_sending.py``): it records what the op logic buffers, and writes nothing."""

from __future__ import annotations

import json
from typing import Any

from roost_core.store import Commit


class RecordingJournal:
    """The journal as the mailroom sees it: records buffered for the next commit (each
    read back as a dict, whether it came as one or encoded). The test ends a commit
    (``commit_over``) as the writer thread would, with or without an error."""

    def __init__(self) -> None:
        self.healthy = self.steady = True
        self.records: list[dict[str, Any]] = []
        self.next = Commit()

    def add(self, *records: dict[str, Any]) -> Commit:
        self.records.extend(records)
        return self.next

    def add_line(self, line: bytes) -> Commit:
        self.records.append(json.loads(line))
        return self.next

    def commit_over(self, error: Exception | None = None) -> None:
        commit, self.next = self.next, Commit()
        commit.error = error
        commit.finish()
