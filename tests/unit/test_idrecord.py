"""The worker's record of the ids it handed its host (``roost_core.worker.idrecord``):
what a worker that starts again knows of the messages its session holds."""

from __future__ import annotations

import stat

import pytest

from roost_core import faults
from roost_core.queue import Item
from roost_core.worker.idrecord import IdRecord


def item(seq: int, msg_id: str | None) -> Item:
    return Item(seq=seq, kind="message" if msg_id else "reply", content=f"item {seq}", msg_id=msg_id)


def test_a_new_record_gives_the_ids_of_the_seqs_a_host_found(tmp_path) -> None:
    path = tmp_path / "j1.ids"
    record = IdRecord(path)
    record.note([item(1, None), item(2, "m0000000a"), item(3, "m0000000b")])
    record.note([item(2, "m0000000a")])  # handed over again (a run given back): once
    record.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().splitlines()) == 2
    again = IdRecord(path)
    # Only the seqs the transcript holds count: seq 3 was handed over, never written.
    assert again.ids_of({1, 2}) == {"m0000000a"}
    assert again.ids_of({2, 3, 4}) == {"m0000000a", "m0000000b"}


def test_a_later_line_for_a_seq_wins_and_a_torn_line_is_skipped(tmp_path) -> None:
    path = tmp_path / "j1.ids"
    path.write_bytes(b'{"seq":1,"id":"m0000000a"}\n{"seq":1,"id":"m0000000c"}\nnot json\n{"seq":true,"id":"m0000000d"}\n{"seq":2,"id":"nope"}\n{"seq":5,"i')
    record = IdRecord(path)
    assert record.ids == {1: "m0000000c"}
    record.note([item(6, "m0000000e")])  # starts on a line of its own
    record.close()
    assert IdRecord(path).ids == {1: "m0000000c", 6: "m0000000e"}


def test_a_refused_write_raises_and_records_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ROOST_HOME", str(tmp_path))
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "io.ids.write").write_text("ENOSPC")
    monkeypatch.setenv("ROOST_FAULTS", "io.ids.write")
    faults._forget()
    try:
        record = IdRecord(tmp_path / "j1.ids")
        with pytest.raises(OSError):
            record.note([item(1, "m0000000a")])
        assert record.ids == {}
        (tmp_path / "faults" / "io.ids.write").unlink()
        record.note([item(1, "m0000000a")])
        record.close()
        assert IdRecord(tmp_path / "j1.ids").ids == {1: "m0000000a"}
    finally:
        monkeypatch.delenv("ROOST_FAULTS")
        faults._forget()
