"""Every size of a text is either delivered, once, or refused at once with a code that
names its limit, nothing of it kept (docs/protocol.md, "Sizes"): a property over sizes
from nothing to well past the limits, in characters that JSON writes in 1 to 6 bytes,
through the socket and through the CLI (stdin and ``--file``), for a user reply, a task,
and an agent message to a job and to a foreground peer (with the limits plugin's own
message limit lifted, so only the core's bounds stand).

Before the fix a reply of 600,000 characters was answered ``delivered`` and never
arrived: its ``deliver`` event carried the text twice, passed a frame, and the worker's
decoder discarded it unseen.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from clikit import CLI
from conftest import agent_items, wait_until
from fg import in_thread, session, taken
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from roost_core.daemon.optable import TEXT
from roost_core.protocol import MAX_FRAME, MAX_TEXT_BYTES, ProtocolError, encode, text_bytes
from roost_core.queue import Item
from roost_core.transcript import content_text
from roost_plugins.envelope import parse_envelopes

pytestmark = pytest.mark.timeout(300)

#: Characters JSON writes in 1 (a, space, DEL), 2 (é, ", \, newline, tab), 3 (中, U+2028)
#: 4 (😀) and 6 bytes (control characters).
PIECES = ["a", " ", "\x7f", "é", '"', "\\", "\n", "\t", "<", "中", "\u2028", "😀", "\x01", "\x1f"]
#: Sizes in bytes at the edges: the text limit and the frame.
EDGES = (MAX_TEXT_BYTES, MAX_FRAME)


def budget(n: int) -> Any:
    # One daemon for all of a test's examples (function_scoped_fixture): each example is
    # checked against what it left, not against a fresh one.
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )


@dataclass(frozen=True)
class Sized:
    """A text as ``unit * count`` then ``pad`` ASCII characters: shown that way when an
    example fails, rather than as a megabyte of characters."""

    unit: str
    count: int
    pad: int = 0

    @property
    def text(self) -> str:
        return self.unit * self.count + "x" * self.pad

    def __repr__(self) -> str:
        return f"{self.unit!r} * {self.count} + 'x' * {self.pad}"


@st.composite
def sized_texts(draw: st.DrawFn) -> Sized:
    """A text of a chosen size in bytes (as JSON writes it): a unit of a few pieces
    repeated, then ASCII to reach the size exactly. Sizes run from 0 to half again past
    a frame, in tenths of a frame, and cluster at the limits."""
    unit = "".join(draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=3)))
    size = draw(
        st.one_of(
            st.integers(0, MAX_FRAME * 3 // 2),
            st.integers(1, 15).map(lambda tenths: tenths * MAX_FRAME // 10),
            st.sampled_from(EDGES).flatmap(lambda edge: st.integers(edge - 8, edge + 8)),
        )
    )
    count = size // text_bytes(unit)
    return Sized(unit, count, size - count * text_bytes(unit))


def text_refusal(text: str, request: dict[str, Any], empty: str = "bad_args") -> str | None:
    """The code the docs say a text gets (None: it goes through), checked in the order
    the client and the daemon check: the request's frame, the length in characters, the
    size in bytes, then the op's own check of an empty text (``empty``: its code)."""
    if len(encode({"id": 1, **request})) - 1 > MAX_FRAME:
        return "frame_too_large"
    if len(text) > TEXT:
        return "bad_args"
    if text_bytes(text) > MAX_TEXT_BYTES:
        return "too_large"
    if not text.strip():
        return empty
    return None


def check_refusal(code: str, message: str, limit: Any, expected: str) -> None:
    """A refusal as the docs promise it: the expected code, naming its limit."""
    assert code == expected, (code, message)
    wanted = {"frame_too_large": MAX_FRAME, "bad_args": TEXT, "too_large": MAX_TEXT_BYTES}.get(expected)
    if wanted is not None and not message.endswith("is empty"):
        assert str(wanted) in message, message
        assert limit in (wanted, None), limit  # the CLI prints the message alone


class Transcript:
    """A job's transcript as it grows: the user messages written since the last look."""

    def __init__(self, daemon: Any, job: str) -> None:
        self.daemon = daemon
        self.job = job
        self.path = Path(daemon.record(job)["session"])
        self.offset = 0
        self.seq = 0

    def new_user_texts(self) -> list[str]:
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        texts = []
        for line in complete.splitlines():
            entry = json.loads(line)
            message = entry.get("message") or {}
            if entry.get("type") == "message" and message.get("role") == "user":
                texts.append(content_text(message["content"]))
        return texts


def settled_with_nothing_kept(daemon: Any, transcript: Transcript) -> None:
    """Nothing waits in the job's queue, its record acks every seq it gave, and no
    dead letter names it."""
    daemon.wait_job(transcript.job)
    wait_until(
        lambda: (record := daemon.record(transcript.job))["acked"] == record["replySeq"] == transcript.seq,
        what="the job record acks every seq it gave",
    )
    assert daemon.call("dead")["dead"] == []


def reply_and_check(daemon: Any, transcript: Transcript, text: str, send: Any) -> None:
    """Send ``text`` as a reply with ``send`` (None: delivered, or the refusal's code,
    message and limit) and check what the docs promise for it."""
    expected = text_refusal(text, {"op": "reply", "job": transcript.job, "text": text})
    note(f"{len(text)} characters, {text_bytes(text)} bytes: expected {expected or 'delivered'}")
    refusal = send(text)
    if refusal is None:
        assert expected is None, f"delivered, though the docs say {expected}"
        transcript.seq += 1
        settled_with_nothing_kept(daemon, transcript)
        assert transcript.new_user_texts() == [text]
    else:
        assert expected is not None, f"refused {refusal}, though the docs say it goes through"
        check_refusal(*refusal, expected)
        # Refused at once: nothing was queued, no seq was taken (the next reply's seq
        # says so), and the transcript did not grow.
        assert daemon.job(transcript.job)["pending"] == 0
        settled_with_nothing_kept(daemon, transcript)
        assert transcript.new_user_texts() == []


def socket_reply(daemon: Any, transcript: Transcript) -> Any:
    def send(text: str) -> tuple[str, str, Any] | None:
        try:
            answer = daemon.call("reply", job=transcript.job, text=text)
        except ProtocolError as exc:
            return exc.code, exc.message, exc.data.get("limit")
        assert answer["seq"] == transcript.seq + 1, answer
        return None

    return send


def cli_reply(daemon: Any, transcript: Transcript, tmp_path: Path, how: str) -> Any:
    def send(text: str) -> tuple[str, str, Any] | None:
        data = text.encode("utf-8")
        if how == "stdin":
            args, stdin = ["reply", transcript.job, "-", "--json"], data
        else:
            path = tmp_path / "reply.txt"
            path.write_bytes(data)
            args, stdin = ["reply", transcript.job, "--file", str(path), "--json"], None
        done = subprocess.run([*CLI, *args], env=daemon.env, input=stdin, capture_output=True, timeout=60)
        if done.returncode == 0:
            assert json.loads(done.stdout)["seq"] == transcript.seq + 1, done.stdout
            return None
        stderr = done.stderr.decode()
        assert done.returncode == 1 and stderr.startswith("roost: "), (done.returncode, stderr)
        code, _, message = stderr[len("roost: ") :].strip().partition(": ")
        return code, message, None

    return send


def started_job(daemon: Any) -> Transcript:
    job = daemon.start_job("hello", name="s1")
    transcript = Transcript(daemon, job)
    transcript.seq = 1
    settled_with_nothing_kept(daemon, transcript)
    assert transcript.new_user_texts() == ["hello"]
    return transcript


# ------------------------------------------------------------------------- user replies


def test_a_reply_of_any_size_through_the_socket_arrives_once_or_is_refused_at_once(daemon):
    transcript = started_job(daemon)
    send = socket_reply(daemon, transcript)

    @budget(24)
    @given(sized_texts())
    @example(Sized("y", 600_000))  # the reply: answered delivered, never arrived
    @example(Sized("x", TEXT))
    @example(Sized("x", TEXT + 1))
    @example(Sized("\x01", MAX_TEXT_BYTES // 6))
    @example(Sized("\x01", MAX_TEXT_BYTES // 6 + 1))
    @example(Sized("😀", MAX_TEXT_BYTES // 4))
    @example(Sized("😀", MAX_TEXT_BYTES // 4 + 1))
    @example(Sized("", 0))
    @example(Sized("\n\t ", 1))
    def prop(sized: Sized) -> None:
        reply_and_check(daemon, transcript, sized.text, send)

    prop()


@pytest.mark.parametrize("how", ["stdin", "file"])
def test_a_reply_of_any_size_through_the_cli_arrives_once_or_is_refused_at_once(daemon, tmp_path, how):
    transcript = started_job(daemon)
    send = cli_reply(daemon, transcript, tmp_path, how)

    @budget(8)
    @given(sized_texts())
    @example(Sized("y", 600_000))
    @example(Sized("é", MAX_TEXT_BYTES // 2))
    @example(Sized("é", MAX_TEXT_BYTES // 2 + 1))
    @example(Sized("a line\nand a last newline\n", 1))  # kept exactly as read
    def prop(sized: Sized) -> None:
        reply_and_check(daemon, transcript, sized.text, send)

    prop()


# ------------------------------------------------------------------------- tasks


@pytest.mark.parametrize("how", ["stdin", "file"])
def test_a_task_of_any_size_through_the_cli_starts_a_job_or_is_refused_with_no_job_made(daemon, tmp_path, how):
    @budget(4)
    @given(sized_texts())
    @example(Sized("t", 700_000))
    @example(Sized("\x1f", MAX_TEXT_BYTES // 6 + 1))
    def prop(sized: Sized) -> None:
        text = sized.text
        expected = text_refusal(text, {"op": "start", "task": text, "cwd": str(daemon.home), "host": "scripted"})
        note(f"{len(text)} characters, {text_bytes(text)} bytes: expected {expected or 'started'}")
        jobs_before = {row["id"] for row in daemon.call("jobs")["jobs"]}
        path = tmp_path / "task.txt"
        path.write_bytes(text.encode("utf-8"))
        source = ["-"] if how == "stdin" else ["--file", str(path)]
        done = subprocess.run(
            [*CLI, "start", *source, "--host", "scripted", "--json"],
            env=daemon.env,
            cwd=daemon.home,
            input=text.encode("utf-8") if how == "stdin" else None,
            capture_output=True,
            timeout=60,
        )
        if done.returncode == 0:
            assert expected is None, f"started, though the docs say {expected}"
            job = json.loads(done.stdout)["id"]
            transcript = Transcript(daemon, job)
            transcript.seq = 1
            settled_with_nothing_kept(daemon, transcript)
            assert transcript.new_user_texts() == [text]
            daemon.call("remove", job=job)
        else:
            stderr = done.stderr.decode()
            assert expected is not None, f"refused ({stderr.strip()[:200]}), though the docs say it starts"
            assert done.returncode == 1 and stderr.startswith("roost: "), (done.returncode, stderr)
            code, _, message = stderr[len("roost: ") :].strip().partition(": ")
            check_refusal(code, message, None, expected)
            # No job was made, not even for a moment's record.
            assert {row["id"] for row in daemon.call("jobs")["jobs"]} == jobs_before
            assert sorted(p.stem for p in daemon.paths.jobs_dir.glob("*.json")) == sorted(jobs_before)

    prop()


# ------------------------------------------------------------------------- agent messages

#: A message the default envelope frames always fits in an item up to this size (docs).
MESSAGE_ALWAYS_FITS = 200_000


def test_a_message_of_any_size_arrives_once_or_is_refused_at_once_whatever_the_limits_plugin_allows(daemon_factory, write_config, tmp_path):
    # A team lifts the limits plugin's 8,000 characters (and its rate): only the core's
    # bounds stand between a message and its receiver.
    write_config({"agentMaxMessageChars": 10 * TEXT, "agentMessagesPerMinute": 100_000, "agentExternalMessages": True})
    daemon = daemon_factory().start()
    box = started_job(daemon)

    async def main() -> None:
        async with session(daemon, tmp_path, "lead") as lead, session(daemon, tmp_path, "peer") as peer:
            await lead.ensure_registered()
            await peer.ensure_registered()
            seen = {"box": 0}

            def check(text: str, to_job: bool) -> None:
                receiver = box.job if to_job else peer.peer_id
                expected = text_refusal(text, {"op": "send", "to": receiver, "message": text}, empty="empty_message")
                note(f"to {'the job' if to_job else 'a foreground peer'}: {len(text)} characters, {text_bytes(text)} bytes: expected {expected or 'delivered, or too_large for its item'}")
                async def send() -> dict[str, Any]:
                    return await lead.call("send", to=receiver, message=text)

                try:
                    answer = anyio.from_thread.run(send)
                except ProtocolError as exc:
                    if expected is None:
                        # Only the item may still be too large: text twice, and its envelope.
                        assert exc.code == "too_large" and exc.data["limit"] == MAX_FRAME and exc.data["size"] > MAX_FRAME, (exc.code, exc.message)
                        assert text_bytes(text) > MESSAGE_ALWAYS_FITS, "the docs promise this size fits"
                        assert str(MAX_FRAME) in exc.message
                    else:
                        check_refusal(exc.code, exc.message, exc.data.get("limit"), expected)
                    delivered = None
                else:
                    assert expected is None, f"delivered, though the docs say {expected}"
                    delivered = answer["id"]
                # What the receiver holds: this message once, or nothing new.
                if to_job:
                    daemon.wait_job(box.job)
                    items = agent_items(daemon.entries(box.job))
                    new, seen["box"] = items[seen["box"] :], len(items)
                    assert [item["details"]["id"] for item in new] == ([delivered] if delivered else [])
                    if delivered:
                        (envelope,) = parse_envelopes(new[0]["content"])
                        assert envelope["body"] == text
                else:
                    wait_until(lambda: taken(daemon, peer), what="the peer acked what it was sent")
                    got = [event for event in peer.delivered if event.get("id") == delivered] if delivered else []
                    assert len(got) == (1 if delivered else 0)
                    if delivered:
                        assert got[0]["text"] == text
                assert daemon.call("dead")["dead"] == []
                assert daemon.job(box.job)["pending"] == 0

            @budget(16)
            @given(sized_texts(), st.booleans())
            @example(Sized("m", 600_000), True)  # fits the text limit, not as an item: text twice
            @example(Sized("m", 600_000), False)
            @example(Sized("<", MESSAGE_ALWAYS_FITS), True)  # the envelope's worst case still fits
            def prop(sized: Sized, to_job: bool) -> None:
                check(sized.text, to_job)

            await in_thread(prop)

    anyio.run(main)


# ------------------------------------------------------------------------- reports

#: A team's report format that makes every report longer than a frame.
HUGE_REPORTS = "from roost_core import hookimpl\n\n@hookimpl\ndef roost_format_report(report):\n    return 'R' * (1024 * 1024 + 1)\n"


def test_a_report_too_large_for_a_frame_is_dropped_with_an_error_never_pushed(daemon_factory, tmp_path):
    """A result is cut to 6,000 characters, but a plugin's report format may make any
    report. One longer than a frame could never reach its parent: it is refused before it
    is pushed (the sender's receipt says so), the daemon logs an error, and it is not
    kept to be tried again. (It used to be pushed, and the parent's decoder dropped it.)"""
    site = tmp_path / "site"
    site.mkdir()
    (site / "roosttest_huge_reports.py").write_text(HUGE_REPORTS)
    info = site / "huge_reports-0.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: huge-reports\nVersion: 0.9\n")
    (info / "entry_points.txt").write_text("[roost]\nhuge-reports = roosttest_huge_reports\n")
    daemon = daemon_factory(PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))).start()

    async def main() -> None:
        async with session(daemon, tmp_path, "lead") as lead:
            kid = (await lead.call("spawn", task="say hello", name="kid", host="scripted"))["id"]

            def refused_report() -> list[dict[str, Any]]:
                sent = daemon.call("log", job=kid)["sent"]
                return [r for r in sent if r["kind"] == "report" and r["state"] == "refused" and r["reason"] == "too_large"]

            (receipt,) = await in_thread(wait_until, refused_report, what="the kid's report refused")
            assert receipt["to"] == lead.peer_id
            log_text = await in_thread(wait_until, lambda: (text := daemon.paths.daemon_log.read_text()) and "the report of" in text and text, what="the error line")
            (line,) = [line for line in log_text.splitlines() if f"the report of {kid} is dropped" in line]
            assert "ERROR" in line and str(MAX_FRAME) in line
            await in_thread(daemon.wait_job, kid)
            assert daemon.job(kid)["undeliveredReport"] is False  # not kept to be tried again
            assert [event for event in lead.delivered if event.get("kind") == "report"] == []
            assert daemon.call("dead")["dead"] == []

    anyio.run(main)


def test_a_run_that_fails_with_a_long_error_reports_it_cut_not_as_a_crash(daemon, tmp_path):
    """A run's error (a host's stack trace) longer than the daemon takes (8,000
    characters) made the handback and the settled status refused: the worker died, and
    the parent read "worker died during a run" instead of the error. It is cut, and says
    so, as a result is."""
    error = "E" * 20_000

    async def main() -> None:
        async with session(daemon, tmp_path, "lead") as lead:
            kid = (await lead.call("spawn", task="go", name="kid", host="scripted", scenario={"default": {"steps": [{"fail": error}]}}))["id"]
            await in_thread(wait_until, lambda: any(e.get("kind") == "report" for e in lead.delivered), what="the kid's report")
            (report,) = [e for e in lead.delivered if e.get("kind") == "report"]
            assert "E" * 6000 in report["content"] and "(cut: 20000 characters in all)" in report["content"]
            assert "worker died" not in report["content"]
            row = daemon.job(kid)
            assert row["state"] == "failed" and row["error"].startswith("E" * 6000) and row["error"].endswith("(cut: 20000 characters in all)")

    anyio.run(main)


# ------------------------------------------------------------------------- an older journal


def test_a_reply_an_older_roost_lost_arrives_after_the_upgrade_and_one_that_never_can_is_logged(daemon):
    """An older daemon journaled a reply's text twice (the 600,000 characters that never
    arrived): the new one carries it once, so it arrives. An item longer than a frame
    even so is not pushed again to be dropped unseen: the daemon says so in its log."""
    transcript = started_job(daemon)
    daemon.terminate()
    lost = "y" * 600_000
    never = "z" * (MAX_FRAME + 1)
    records = [
        {"op": "item", "job": transcript.job, "deliver": Item(2, "reply", lost, text=lost, trace=f"t-{transcript.job}-2").to_event()},
        {"op": "item", "job": transcript.job, "deliver": Item(3, "reply", never, trace=f"t-{transcript.job}-3").to_event()},
    ]
    with open(daemon.paths.journal, "ab") as journal:
        journal.write(b"".join(json.dumps(record).encode() + b"\n" for record in records))
    daemon.restart()
    daemon.wait_job(transcript.job)
    assert transcript.new_user_texts() == [lost]
    log = daemon.paths.daemon_log.read_text()
    assert f"journal: item 3 of job {transcript.job} is longer than a frame ({MAX_FRAME} bytes); it can never be delivered and is dropped" in log
    # The job is not stuck behind it: the next reply arrives.
    assert daemon.call("reply", job=transcript.job, text="after")["seq"] > 3
    daemon.wait_job(transcript.job)
    assert transcript.new_user_texts() == ["after"]


# ------------------------------------------------------------------------- the CLI's ways in


def test_the_cli_reads_a_text_from_a_file_or_stdin_and_names_what_it_cannot_read(daemon, tmp_path):
    transcript = started_job(daemon)

    def roost(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, *args], env=daemon.env, input=stdin, capture_output=True, timeout=60)

    # --file - is stdin too, as in git's -F -.
    done = roost("reply", "s1", "--file", "-", stdin="from stdin, ünïcode\n".encode())
    assert done.returncode == 0, done.stderr
    transcript.seq += 1
    settled_with_nothing_kept(daemon, transcript)
    assert transcript.new_user_texts() == ["from stdin, ünïcode\n"]
    missing = roost("reply", "s1", "--file", str(tmp_path / "nope.txt"))
    assert missing.returncode == 1 and missing.stderr.decode() == f"roost: bad_args: cannot read the reply from {tmp_path / 'nope.txt'}: No such file or directory\n"
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    latin = roost("start", "--file", str(tmp_path / "latin1.txt"), "--host", "scripted")
    assert latin.returncode == 1 and latin.stderr.decode() == f"roost: bad_args: the task in {tmp_path / 'latin1.txt'} is not UTF-8 (byte 3)\n"
    both = roost("reply", "s1", "text", "--file", str(tmp_path / "latin1.txt"))
    assert both.returncode == 2 and both.stderr.decode().endswith("roost: bad_args: argument --file: not allowed with argument text\n")
    neither = roost("reply", "s1")
    assert neither.returncode == 2 and neither.stderr.decode().endswith("roost: bad_args: one of the arguments text --file is required\n")
    # Nothing of the refused ones reached the job.
    settled_with_nothing_kept(daemon, transcript)
    assert transcript.new_user_texts() == [] and [row["name"] for row in daemon.call("jobs")["jobs"]] == ["s1"]
