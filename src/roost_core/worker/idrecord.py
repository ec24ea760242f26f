"""The worker's record of the message ids it handed to its host: ``seq -> id`` of every
item that has an id, appended before the host gets the item, in a file only roost writes
(``jobs/<job id>.ids``, beside the job's record and log).

A worker that starts again must know which messages its session holds already, so that a
second copy of one (a sender's keyed send asked again of a daemon that died before the
first copy was durable) is dropped. It learns which *seqs* the session holds from its
host (each host reads them from the structured fields roost wrote in its transcript
format), and their *ids* from this record: never from a transcript's text, where a
message body may name any id it likes (a body holding ``msg="m..."`` of a message not
sent yet would make the receiver drop that message when it comes).

One JSON line per item, ``{"seq": N, "id": "m..."}``; a later line for a seq wins (a
daemon that lost an item it had pushed may number another item with its seq). The record
is written as the transcript is (no fsync), and a line torn by a crash or a full disk is
skipped.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from roost_core import faults, identity
from roost_core.queue import Item
from roost_core.store import write_all

log = logging.getLogger("roost.worker")


class IdRecord:
    """The ``seq -> id`` record of one job, at ``path`` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ids: dict[int, str] = {}
        self._fd: int | None = None
        #: The file ends in a torn line (a crash, a refused write): the next line starts
        #: on a line of its own.
        self._torn = False
        self._read()

    def _read(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            # Unreadable: ids of items written before are not known (a second copy of
            # one may be written again), none is made up.
            log.warning("the message-id record %s cannot be read (%s)", self.path, exc)
            return
        self._torn = bool(data) and not data.endswith(b"\n")
        for line in data.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict):
                continue
            seq, msg_id = entry.get("seq"), entry.get("id")
            if type(seq) is int and isinstance(msg_id, str) and identity.is_message_id(msg_id):
                self.ids[seq] = msg_id

    def ids_of(self, seqs: Iterable[int]) -> set[str]:
        """The message ids of the items ``seqs`` (those the record names)."""
        return {self.ids[seq] for seq in seqs if seq in self.ids}

    def note(self, items: Iterable[Item]) -> None:
        """Record the ids of ``items`` not recorded yet, before the host gets them.
        ``OSError`` when the file refuses them (the caller does not hand them over)."""
        fresh = [(item.seq, item.msg_id) for item in items if item.msg_id is not None and self.ids.get(item.seq) != item.msg_id]
        if not fresh:
            return
        lines = b"".join(json.dumps({"seq": seq, "id": msg_id}, separators=(",", ":")).encode() + b"\n" for seq, msg_id in fresh)
        if self._torn:
            lines = b"\n" + lines
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            faults.io("io.ids.write")
            write_all(self._fd, lines)
        except OSError:
            self._torn = True  # a part of it may be written
            raise
        self._torn = False
        self.ids.update(fresh)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
