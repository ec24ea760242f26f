"""A roost host plugin: ``--host command`` runs any command-line program once per turn.

``ROOST_COMMAND`` (in the daemon's environment, which its workers inherit) is the program
and its arguments, as shell words. A turn's text (the items of a run, one after another:
the task or a user reply as it is, an agent message in its envelope) goes to the program
on stdin, or in place of an argument that is exactly ``{}``. Its stdout is the reply; exit
0 settles the run ``done`` (``idle`` when only agent messages came in), any other status
fails it. stderr goes to the job's log.

The transcript is this host's own JSONL (the job's session file), one line per item that
came in and one per answer::

    {"type": "command-in", "seq": 3, "kind": "reply", "text": "...", ...}
    {"type": "command-out", "exit": 0, "text": "..."}

and this plugin reads it for roost (:func:`entries_of`, :func:`seqs_in_file`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio

from roost_core import hookimpl, locks
from roost_core.records import AGENT_MESSAGE_TYPE, HostCommand, HostSpec, TranscriptEntry
from roost_core.transcript import read_entries

#: The host's name (``--host command``).
NAME = "command"
#: The variable that names the program.
COMMAND_ENV = "ROOST_COMMAND"
#: The argument that stands for the turn's text.
TEXT_SLOT = "{}"
IN, OUT = "command-in", "command-out"


def command_argv(env: Any = None) -> list[str]:
    """The program and its arguments (``$ROOST_COMMAND``); [] when it is not set."""
    env = os.environ if env is None else env
    return shlex.split(env.get(COMMAND_ENV, ""))


def unavailable() -> str | None:
    """Why the host cannot run here (no ``ROOST_COMMAND``, its program not installed)."""
    argv = command_argv()
    if not argv:
        return f"the command host runs the program ${COMMAND_ENV} names, and it is not set"
    if shutil.which(argv[0]) is None:
        return f"the command host's program {argv[0]!r} (${COMMAND_ENV}) is not installed"
    return None


# ---------------------------------------------------------------------------- the transcript


def item_line(item: Any) -> dict[str, Any]:
    """The line an item that came in is written as."""
    line = {"type": IN, "seq": item.seq, "kind": item.kind, "text": item.content}
    if item.kind != "reply":
        line.update({"from": item.sender, "fromName": item.sender_name, "relation": item.relation, "id": item.msg_id, "replyTo": item.reply_to})
    return line


def entries_of(raw: dict[str, Any]) -> list[TranscriptEntry]:
    """One line of this host's transcript as the entries roost renders: the user's words
    as a user message, an agent item as an agent message, the program's answer as the
    assistant's (with its exit status when it failed)."""
    if raw.get("type") == IN:
        text = str(raw.get("text") or "")
        if raw.get("kind") == "reply":
            return [TranscriptEntry(type="message", role="user", text=text, raw=raw)]
        details = {key: raw.get(key) for key in ("seq", "from", "fromName", "relation", "kind", "id", "replyTo") if raw.get(key) is not None}
        return [TranscriptEntry(type="custom_message", text=text, custom_type=AGENT_MESSAGE_TYPE, details=details, raw=raw)]
    if raw.get("type") == OUT:
        text = str(raw.get("text") or "").rstrip("\n")
        if raw.get("exit"):
            text += f"\n(exit status {raw.get('exit')})"
        return [TranscriptEntry(type="message", role="assistant", text=text, raw={"message": {"role": "assistant", "content": []}})]
    return []


def seqs_in_file(path: str) -> set[int]:
    """The queue seqs the transcript ``path`` holds."""
    return {entry["seq"] for entry in read_entries(path) if entry.get("type") == IN and isinstance(entry.get("seq"), int)}


class Transcript:
    """Appends lines to the job's transcript, one ``write`` each (a crash tears at most
    the last, which readers skip)."""

    def __init__(self, path: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def write(self, line: dict[str, Any]) -> None:
        os.write(self.fd, json.dumps(line, ensure_ascii=False).encode() + b"\n")

    def close(self) -> None:
        os.close(self.fd)


# ---------------------------------------------------------------------------- the host


class CommandHost:
    """Runs ``argv`` once per run (:class:`roost_core.hosts.base.AgentHost`)."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.job: Any = None
        self.services: Any = None
        self.lock: locks.WriterLock | None = None
        self.transcript: Transcript | None = None

    async def open(self, job: Any, services: Any) -> set[int]:
        self.job, self.services = job, services
        # The session file is the job's identity on roost: its writer holds its lock.
        self.lock = locks.WriterLock(job.session)
        self.lock.acquire()
        self.transcript = Transcript(job.session)
        return seqs_in_file(job.session)

    async def run(self, items: list[Any]) -> Any:
        from roost_core.hosts.base import RunOutcome

        assert self.transcript is not None and self.services is not None
        for item in items:
            self.transcript.write(item_line(item))
            self.services.delivered(item)  # its line is in the transcript: it may be acked
        text = "\n\n".join(item.content for item in items)
        status, answer = await self.run_program(text)
        self.transcript.write({"type": OUT, "exit": status, "text": answer})
        if status != 0:
            return RunOutcome("failed", answer.strip(), error=f"{self.argv[0]} exited {status}")
        return RunOutcome("done" if any(item.kind == "reply" for item in items) else "idle", answer.strip())

    async def run_program(self, text: str) -> tuple[int, str]:
        """Run the program on ``text``; its exit status and stdout."""
        as_argument = TEXT_SLOT in self.argv
        argv = [text if word == TEXT_SLOT else word for word in self.argv]
        cwd = self.job.cwd if Path(self.job.cwd).is_dir() else None
        # Through the worker, which reports it as the job's host process and ends what
        # it leaves behind.
        process = await self.services.start_host_process(argv, cwd=cwd)
        chunks: list[bytes] = []

        async def feed() -> None:
            if not as_argument:
                await process.stdin.send(text.encode())
            await process.stdin.aclose()

        async def drain() -> None:
            async for chunk in process.stdout:
                chunks.append(chunk)

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            tg.start_soon(drain)
        status = await process.wait()
        await process.aclose()
        return status, b"".join(chunks).decode("utf-8", "replace")

    async def close(self) -> None:
        if self.transcript is not None:
            self.transcript.close()
        if self.lock is not None:
            self.lock.release()


def make_host(job: Any, services: Any) -> CommandHost:
    """The host a worker runs for a job (``ROOST_COMMAND`` read now, in the worker)."""
    return CommandHost(command_argv())


# ---------------------------------------------------------------------------- roost command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["check"], help="check: print the program a job would run, or why none can")


def run(args: argparse.Namespace) -> int:
    """``roost command check``: the program, or ``roost: no_host: why`` and exit 1."""
    why = unavailable()
    if why is not None:
        print(f"roost: no_host: {why}", file=sys.stderr)
        return 1
    print(shlex.join(command_argv()))
    return 0


@hookimpl
def roost_register_hosts() -> list[HostSpec]:
    """Contribute the ``command`` host."""
    return [
        HostSpec(
            name=NAME,
            factory=make_host,
            unavailable=unavailable,
            transcript_entries=entries_of,
            transcript_seqs=seqs_in_file,
            command=HostCommand(help="the command host: check which program its jobs run", add_arguments=add_arguments, run=run),
        )
    ]
