"""The shell host: a job that runs a command and takes no agent messages.

The task is a ``bash -c`` command; each user reply is run as a further command in the same
directory (a stopped shell job takes none unless the user restarts it: the daemon refuses
the reply, ``job_stopped``). Output lands in the transcript as a tool result; exit 0
settles ``done``, anything else ``failed``.
"""

from __future__ import annotations

import uuid

from roost_core import locks
from roost_core.hosts.base import JobInfo, RunOutcome, WorkerServices
from roost_core.queue import Item
from roost_core.transcript import SessionWriter, seqs_in

OUTPUT_CHARS = 100_000


class ShellHost:
    def __init__(self) -> None:
        self.writer: SessionWriter | None = None
        self.lock: locks.WriterLock | None = None
        self.services: WorkerServices | None = None
        self.job: JobInfo | None = None

    async def open(self, job: JobInfo, services: WorkerServices) -> set[int]:
        self.job, self.services = job, services
        self.lock = locks.WriterLock(job.session)
        self.lock.acquire()
        self.writer = SessionWriter(job.session, cwd=job.cwd)
        return seqs_in(self.writer.entries)

    async def run(self, items: list[Item]) -> RunOutcome:
        assert self.writer is not None and self.services is not None and self.job is not None
        outcome = RunOutcome("done")
        for item in items:
            self.writer.message("user", [{"type": "text", "text": item.content}], roost={"seq": item.seq, "kind": item.kind})
            self.services.delivered(item)
            call_id = "call_" + uuid.uuid4().hex[:8]
            self.writer.message(
                "assistant",
                [{"type": "toolCall", "id": call_id, "name": "bash", "arguments": {"command": item.content}}],
                message_extra={"stopReason": "toolUse", "model": "shell"},
            )
            result = await self.services.run_command(["bash", "-c", item.content], cwd=self.job.cwd)
            output = (result.stdout + result.stderr).decode("utf-8", "replace")[-OUTPUT_CHARS:]
            self.writer.message(
                "toolResult",
                [{"type": "text", "text": output}],
                message_extra={"toolCallId": call_id, "toolName": "bash", "isError": result.returncode != 0},
            )
            last_line = output.strip().splitlines()[-1] if output.strip() else ""
            if result.returncode == 0:
                outcome = RunOutcome("done", last_line)
            else:
                outcome = RunOutcome("failed", last_line, error=f"command exited {result.returncode}")
        return outcome

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.lock is not None:
            self.lock.release()
