"""The daemon's durable state across restarts: job records and the journal read at start
(damaged lines set aside), the journal's snapshot, the answers of keyed requests
(:class:`~roost_core.daemon.ledger.AnswerLedger`), where each job's seqs go on after a
crash, and the clean-stop marker."""

from __future__ import annotations

import logging
import os
import shutil
from typing import Any

from roost_core import locks, platform, policy
from roost_core.daemon import changes
from roost_core.daemon.hostset import HostSet
from roost_core.daemon.itemlife import Stage
from roost_core.daemon.jobs import Job
from roost_core.daemon.ledger import SECRET_FILE, AnswerLedger, KeyedIds
from roost_core.daemon.receipts import Receipts
from roost_core.daemon.registry import Registry
from roost_core.hosts import session_seqs
from roost_core.paths import Paths
from roost_core.protocol import ITEM_RESERVE, MAX_FRAME, MOST_BYTES_PER_CHAR
from roost_core.queue import Item
from roost_core.store import RESERVE_BYTES, Commit, Journal, JournalError, read_journal

log = logging.getLogger("roost.daemon")

#: After a daemon restart every job's seq counter jumps by this much, so an item that was
#: pushed to a worker but not yet durable when the daemon died can never share a seq with
#: a new one (the queue caps bound such items far below it).
SEQ_RESTART_GAP = 1000
#: Left in the state folder by a daemon whose journal closed with every commit written.
CLEAN_STOP_MARKER = "clean-stop"


def journal_reserve() -> int:
    """``ROOST_JOURNAL_RESERVE_BYTES`` when set (a test of a full disk makes the journal's
    reserve small enough to spend), else :data:`~roost_core.store.RESERVE_BYTES`."""
    return int(os.environ.get("ROOST_JOURNAL_RESERVE_BYTES", RESERVE_BYTES))


class Persistence:
    """Reads what the last daemon left (:meth:`load`) and keeps the journal. ``journal``
    is None until :meth:`load`; ``ledger`` keeps the first answers of keyed requests in
    it; ``unpushed`` the keyed sends to foreground peers that the last daemon answered
    ``delivered`` and no peer acked (peer id -> (ledger slot, deliver event)), pushed
    again when the peer registers."""

    def __init__(self, paths: Paths, pm: Any, registry: Registry, hosts: HostSet, *, durable: bool, receipts: Receipts | None = None) -> None:
        self.paths = paths
        #: The senders' receipts: those seen or answered are kept in the journal.
        self.receipts = receipts
        self.pm = pm
        self.registry = registry
        self.hosts = hosts
        self.durable = durable
        self.journal: Journal | None = None
        #: The first answers of keyed requests, so a client may ask again after losing an
        #: answer (no I/O: its records go to the journal).
        self.ledger = AnswerLedger(self.write_answer, ids=KeyedIds(paths.state_dir / SECRET_FILE, durable=durable))
        self.unpushed: dict[str, list[tuple[Any, dict[str, Any]]]] = {}

    def load(self) -> Journal:
        """Job records, then the journal's items; then every seq counter jumps a gap.
        Returns the journal, written anew from what was read.

        A record or a journal line that roost could not have written (damaged, foreign,
        edited by hand) is set aside with a log line, and the rest is served: a bad job
        record is renamed ``<id>.json.bad``; the journal's unreadable lines are kept in
        ``queue.journal.bad`` (the journal itself is written anew from what was read)."""
        self.ledger.ids.load()
        jobs = self.registry.jobs
        job_files = self.registry.job_files
        for path, data in job_files.records():
            try:
                job = Job.from_json(data)
                if job.id != path.stem:
                    raise ValueError(f"its id {job.id!r} is not its file name")
            except (TypeError, ValueError) as exc:
                try:
                    moved = job_files.set_aside(path)
                except OSError as move_exc:
                    log.error("job record %s is unreadable (%s) and cannot be set aside (%s); skipped", path.name, exc, move_exc)
                else:
                    log.error("job record %s is unreadable (%s): set aside as %s, the other jobs are served", path.name, exc, moved.name)
                continue
            job.framed_name = policy.sanitize_name(self.pm, job.name)
            jobs[job.id] = job
        unreadable: list[int] = []
        torn: list[int] = []
        bad_records = 0
        for record in read_journal(self.paths.journal, unreadable, torn):
            if record.get("op") == "answer":
                try:
                    self.ledger.restore(record)
                except ValueError:
                    bad_records += 1
                continue
            if record.get("op") == "receipt":
                try:
                    if self.receipts is not None:
                        self.receipts.restore(record)
                except ValueError:
                    bad_records += 1
                continue
            job_id = record.get("job")
            if not isinstance(job_id, str):
                bad_records += 1
                continue
            found = jobs.get(job_id)
            if found is None:
                continue  # a removed job's (or one whose record was set aside, with its own line)
            try:
                apply_journal_record(found, record)
            except (TypeError, ValueError):
                bad_records += 1
        if unreadable or bad_records:
            self.set_journal_aside(len(unreadable), bad_records, unreadable[:5], len(torn))
        for slot, peer_id, event in self.ledger.unpushed():
            self.unpushed.setdefault(peer_id, []).append((slot, event))
        clean = self.took_clean_stop()
        for loaded in jobs.values():
            if not clean:
                self.resume_numbering(loaded)
            loaded.queue.durable = loaded.queue.reply_seq
            # Every item read back is durable, and this daemon has pushed it nowhere yet.
            loaded.stages = dict.fromkeys((item.seq for item in loaded.queue.items), Stage.JOURNALED)
            if self.receipts is not None:
                for item in loaded.queue.items:
                    if item.is_agent_item and item.sender:
                        self.receipts.recall(loaded.id, loaded.name, item.seq, item.sender, item.kind, item.text or item.content, item.created, item.msg_id)
            if loaded.undelivered_report is not None:
                self.registry.kept_reports[loaded.id] = None
        changes.changed()
        journal = self.journal = Journal(self.paths.journal, durable=self.durable, snapshot=self.journal_snapshot, reserve=journal_reserve())
        if self.receipts is not None:
            self.receipts.write = self.write_receipt
        try:
            journal.replace_with(journal.snapshot_bytes())
        except OSError as exc:
            # A full disk must not keep the daemon from starting: the old journal was
            # replayed and stays valid; the first commit writes it anew.
            log.warning("cannot rewrite the journal at start (%s); the first commit will", exc)
            journal.failed_to_rewrite()
        return journal

    def took_clean_stop(self) -> bool:
        """Whether the last daemon stopped cleanly (its marker, taken: a crash of this one
        must not find it). After a clean stop every item ever pushed was durable, so seqs
        go on from the journal's."""
        marker = self.paths.state_dir / CLEAN_STOP_MARKER
        try:
            marker.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("cannot take the clean-stop marker (%s): numbering as after a crash", exc)
            return False
        return True

    def resume_numbering(self, job: Job) -> None:
        """After a crash, where ``job``'s seqs go on. The dead daemon may have pushed items
        it never made durable (a push goes before its fsync): the receiver may hold seqs
        past the journal's. A worker still alive says which it holds when it says hello
        (:meth:`JobQueue.settle_seq`), and seqs go on after them; an item queued before
        that jumps :data:`SEQ_RESTART_GAP`. A worker that died with the daemon left what it
        got in its transcript: seqs go on after the transcript's. A job with no worker had
        nothing pushed."""
        if job.worker_pid is None:
            return
        if locks.is_alive(job.worker_pid, job.worker_create_time):
            job.queue.unsure = SEQ_RESTART_GAP
            return
        written = transcript_max_seq(job, self.hosts)
        if written is None:
            job.queue.unsure = SEQ_RESTART_GAP
        else:
            job.queue.reply_seq = max(job.queue.reply_seq, written)

    def settle_numbering(self, job: Job, held: int) -> None:
        """``job``'s receiver holds every seq up to ``held`` (:meth:`resume_numbering`):
        seqs go on after it, and the journal keeps the counter so (not the reservation)."""
        if job.queue.settle_seq(held) and self.journal is not None:
            try:
                self.journal.add({"op": "seq", "job": job.id, "replySeq": job.queue.reply_seq, "acked": job.queue.acked, "settled": True})
            except JournalError as exc:
                log.warning("%s: the settled seq counter was not journaled (%s); a crash now jumps it again", job.id, exc)

    def mark_clean_stop(self) -> None:
        """The journal closed with every commit written: leave the marker that lets the
        next daemon number on with no jump."""
        marker = self.paths.state_dir / CLEAN_STOP_MARKER
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                platform.sync_file(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("cannot leave the clean-stop marker (%s): the next start numbers as after a crash", exc)

    def set_journal_aside(self, unreadable: int, bad: int, first_lines: list[int], torn: int = 0) -> None:
        """Keep a copy of a journal with lines that could not be replayed, before it is
        written anew from what could, and say so in one log line (``torn`` of the
        ``unreadable`` lines were cut short: a record a crash tore in its write, whose
        item is lost if its commit had been answered)."""
        target = self.paths.journal.with_name(self.paths.journal.name + ".bad")
        try:
            shutil.copyfile(self.paths.journal, target)
            os.chmod(target, 0o600)
        except OSError as exc:
            target_text = f"not kept ({exc})"
        else:
            target_text = f"kept in {target.name}"
        torn_text = (
            f" ({torn} of them torn: cut short by zeros or the end of the file, as a crash in a write leaves a record;"
            " an item in one is lost if it was answered as stored)"
            if torn else ""
        )
        log.error(
            "journal: %d lines are not JSON (first at lines %s)%s and %d records are not ones roost writes; "
            "they are skipped, the journal as it was is %s",
            unreadable, first_lines, torn_text, bad, target_text,
        )

    def journal_snapshot(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for job in self.registry.jobs.values():
            records.append({"op": "seq", "job": job.id, "replySeq": job.queue.reserved, "acked": job.queue.acked})
            records.extend({"op": "item", "job": job.id, "deliver": item.to_event()} for item in job.queue.items)
        records.extend(self.ledger.records())
        if self.receipts is not None:
            records.extend(self.receipts.records())
        return records

    def write_answer(self, record: dict[str, Any]) -> Commit | None:
        """Hand a kept answer's record to the journal (its next commit). One the journal
        cannot take stays kept in memory: a repeat after a restart is then done anew,
        and its receiver drops the second copy by its message id."""
        journal = self.journal
        if journal is None:
            return None
        try:
            return journal.add(record)
        except JournalError as exc:
            log.warning("answer record not journaled (%s)", exc)
            return None


    def write_receipt(self, record: dict[str, Any]) -> None:
        """Hand a receipt's record to the journal (its next commit, not waited for). One
        the journal cannot take stays in memory only: a restart forgets it."""
        journal = self.journal
        if journal is None:
            return
        try:
            journal.add(record)
        except JournalError as exc:
            log.warning("receipt record not journaled (%s)", exc)


def transcript_max_seq(job: Job, hosts: HostSet) -> int | None:
    """The highest queue seq ``job``'s transcript holds (0 for none), read as its host
    writes it, or None when it cannot be told (an unreadable file)."""
    try:
        return max(session_seqs(hosts.get(job.host), job.session), default=0)
    except (OSError, ValueError):
        return None


def apply_journal_record(job: Job, record: dict[str, Any]) -> None:
    """Replay one journal record into ``job``'s queue; ``ValueError`` for one roost did
    not write (then nothing of it is applied)."""
    op = record.get("op")
    if op == "item":
        # Written as its deliver event (delivery.item_record); before, as its fields
        # (Item.from_json).
        item = Item.from_event(record["deliver"]) if "deliver" in record else Item.from_json(record.get("item"))
        if item.text and item.text == item.content:
            item.text = ""  # an older roost carried a reply's text twice: carry it once
        if (len(item.content) + len(item.text)) * MOST_BYTES_PER_CHAR + ITEM_RESERVE > MAX_FRAME and len(item.encoded()) - 1 > MAX_FRAME:
            # Only an older roost queued such an item, which its receiver could never
            # read: it is not pushed again (its seq stays used).
            log.error("journal: item %d of job %s is longer than a frame (%d bytes); it can never be delivered and is dropped", item.seq, job.id, MAX_FRAME)
            job.queue.reply_seq = max(job.queue.reply_seq, item.seq)
            return
        job.queue.add(item)
    elif op == "ack":
        seq = record.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError(f"ack of {seq!r}")
        job.queue.ack(seq)
    elif op == "seq":
        reply_seq, acked = record.get("replySeq", 0), record.get("acked", 0)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (reply_seq, acked)):
            raise ValueError(f"seq record {reply_seq!r}/{acked!r}")
        # A settled counter (the receiver said what it holds) is taken as it is: it may be
        # below the reservation a start after a crash wrote.
        job.queue.reply_seq = reply_seq if record.get("settled") is True else max(job.queue.reply_seq, reply_seq)
        job.queue.acked = max(job.queue.acked, acked)
    elif op != "drop":
        raise ValueError(f"unknown journal op {op!r}")
