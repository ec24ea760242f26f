"""The daemon's state and ops: jobs, foreground peers, the queue journal, workers.

Ops are plain async methods that take a connection and checked arguments and return a
result dict or raise :class:`ProtocolError`; :mod:`roost_core.daemon.server` does the I/O.
"""

from __future__ import annotations

import hmac
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from roost_core import faults, identity, locks, policy, routing
from roost_core.config import Config, load_project_config
from roost_core.daemon.connection import Connection
from roost_core.daemon.jobs import ENDED_STATES, Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.receipts import Receipts
from roost_core.daemon.watch import Watchers
from roost_core.hosts import builtin_hosts
from roost_core.paths import Paths
from roost_core.protocol import (
    BAD_ARGS,
    CONFLICT,
    NOT_ACCEPTED,
    NOT_FOUND,
    QUEUE_FULL,
    UNAUTHORIZED,
    UNREACHABLE,
    ProtocolError,
)
from roost_core.queue import Item
from roost_core.protocol import Field, validate_args
from roost_core.records import (
    HostSpec,
    OutgoingItem,
    PeerInfo,
    Report,
    ReportCandidates,
    RunCause,
    RunRecord,
    SpawnRequest,
    ToolResult,
)
from roost_core.store import JobFiles, Journal, read_journal
from roost_core.transcript import read_entries, seqs_in

log = logging.getLogger("roost.daemon")

#: After a daemon restart every job's seq counter jumps by this much, so an item that was
#: pushed to a worker but not yet durable when the daemon died can never share a seq with
#: a new one (the queue caps bound such items far below it).
SEQ_RESTART_GAP = 1000
#: A worker that crashes with work pending is started again at most this many times.
MAX_CRASH_RESTARTS = 3
#: How long a stopped worker gets to exit before its process group is killed.
STOP_GRACE_SECONDS = 3.0
MONITOR_INTERVAL = 0.1
REPORT_CHARS = 6000


class Daemon:
    def __init__(self, paths: Paths, config: Config, pm: Any, *, durable: bool = True) -> None:
        self.paths = paths
        self.config = config
        self.pm = pm
        self.durable = durable
        self.started = time.time()
        self.jobs: dict[str, Job] = {}
        self.foreground: dict[str, ForegroundPeer] = {}
        self.connections: set[Connection] = set()
        self.job_files = JobFiles(paths.jobs_dir, durable=durable)
        self.hosts: dict[str, HostSpec] = {}
        for contributed in pm.hook.roost_register_hosts():
            for spec in contributed or ():
                self.hosts[spec.name] = spec
        self.hosts.update({spec.name: spec for spec in builtin_hosts()})
        self.journal: Journal | None = None
        self.stopping = anyio.Event()
        self._kill_at: dict[str, float] = {}
        self.tg: anyio.abc.TaskGroup | None = None
        self.receipts = Receipts(paths.state_dir / "dead.jsonl", durable=durable)
        self.watch = Watchers(self.agent_rows)
        self.clock_offset = 0.0
        self.clock = lambda: time.monotonic() + self.clock_offset

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Job records, then the journal's items; then every seq counter jumps a gap."""
        for job_id, data in self.job_files.load_all().items():
            try:
                self.jobs[job_id] = Job.from_json(data)
            except TypeError:
                log.warning("skipping unreadable job record %s", job_id)
        for record in read_journal(self.paths.journal):
            job = self.jobs.get(record.get("job"))
            if job is None:
                continue
            op = record.get("op")
            if op == "item" and isinstance(record.get("item"), dict):
                job.queue.add(Item.from_json(record["item"]))
            elif op == "ack" and isinstance(record.get("seq"), int):
                job.queue.ack(record["seq"])
            elif op == "seq":
                job.queue.reply_seq = max(job.queue.reply_seq, int(record.get("replySeq", 0)))
                job.queue.acked = max(job.queue.acked, int(record.get("acked", 0)))
        for job in self.jobs.values():
            job.queue.reply_seq += SEQ_RESTART_GAP
        self.journal = Journal(self.paths.journal, durable=self.durable, snapshot=self.journal_snapshot)
        self.journal.replace_with(self.journal.snapshot_bytes())

    def journal_snapshot(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for job in self.jobs.values():
            records.append({"op": "seq", "job": job.id, "replySeq": job.queue.reply_seq, "acked": job.queue.acked})
            records.extend({"op": "item", "job": job.id, "item": item.to_json()} for item in job.queue.items)
        return records

    def reconcile_workers(self) -> None:
        """After a (re)start: a recorded worker that is gone is handled as an exit."""
        for job in list(self.jobs.values()):
            if job.worker_pid is not None and not locks.is_alive(job.worker_pid, job.worker_create_time):
                self.worker_gone(job, None)
            elif job.worker_pid is None and job.queue.items and job.state not in ("stopped",):
                if job.state == "running":
                    job.state = "idle"
                self.start_worker(job)

    def save(self, job: Job) -> None:
        job.updated = time.time()
        self.job_files.save(job.id, job.to_json())
        self.watch.touch()

    async def monitor(self) -> None:
        """Notice worker exits, kill workers that outstay a stop, reap idle workers."""
        while True:
            await anyio.sleep(MONITOR_INTERVAL)
            now = self.clock()
            for job in list(self.jobs.values()):
                self.check_worker(job, now)

    def check_worker(self, job: Job, now: float) -> None:
        if job.worker_pid is None:
            return
        if job.process is not None:
            code = job.process.poll()
            if code is not None:
                self.worker_gone(job, code)
                return
        elif not locks.is_alive(job.worker_pid, job.worker_create_time):
            self.worker_gone(job, None)
            return
        deadline = self._kill_at.get(job.id)
        if deadline is not None and now >= deadline:
            self.kill_worker(job)
            self._kill_at[job.id] = now + STOP_GRACE_SECONDS
        if (
            job.conn is not None
            and not job.reaping
            and job.state != "running"
            and not job.dialog
            and job.queue.reapable()
            and now - job.idle_since >= self.config.reap_after_seconds
        ):
            job.reaping = True
            job.conn.send({"event": "shutdown", "reason": "reaped"})
            self._kill_at[job.id] = now + STOP_GRACE_SECONDS

    def soon(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` as a task of the daemon (from sync code paths)."""
        if self.tg is not None:
            self.tg.start_soon(fn, *args)

    def kill_worker(self, job: Job) -> None:
        if job.worker_pid is None:
            return
        try:
            os.killpg(job.worker_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(job.worker_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def worker_gone(self, job: Job, code: int | None) -> None:
        """A worker exited: clean (reaped, stopped) or a crash."""
        clean = job.reaping or job.state == "stopped" or (code == 0 and job.state != "running")
        self._kill_at.pop(job.id, None)
        if job.conn is not None:
            job.conn.job = None
            job.conn.close()
        job.conn = None
        job.process = None
        job.worker_pid = None
        job.worker_create_time = None
        job.reaping = False
        job.dialog = False
        if not clean:
            job.crashes += 1
            if job.state == "running":
                job.state = "failed"
                job.error = f"worker died during a run ({describe_exit(code)})"
            log.warning("worker of %s died (%s)", job.id, describe_exit(code))
        self.save(job)
        if job.queue.items and job.state != "stopped":
            if job.crashes <= MAX_CRASH_RESTARTS:
                self.start_worker(job)
                return
            job.state = "failed"
            job.error = f"worker crashed {job.crashes} times; giving up"
            self.save(job)
        if not clean:
            # Not started again: a parent must not wait for a report that cannot come.
            self.soon(self.report_ended, job, "crashed")

    def start_worker(self, job: Job) -> None:
        """Start the worker process of ``job`` in its own session (survives a daemon restart)."""
        env = dict(os.environ)
        env.update(
            {
                "PI_JOB_TOKEN": job.token,
                "ROOST_JOB": job.id,
                "ROOST_SOCKET": str(self.paths.socket),
                "ROOST_HOME": str(self.paths.home) if os.environ.get("ROOST_HOME") else env.get("ROOST_HOME", ""),
            }
        )
        if not env["ROOST_HOME"]:
            env.pop("ROOST_HOME")
        cwd = job.cwd if Path(job.cwd).is_dir() else str(self.paths.home)
        log_path = self.paths.jobs_dir / f"{job.id}.log"
        with open(log_path, "ab") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "roost_core.worker"],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
                close_fds=True,
            )
        job.process = process
        job.worker_pid = process.pid
        job.worker_create_time = locks.create_time(process.pid)
        job.reaping = False
        if job.state in ENDED_STATES or job.state == "stopped":
            job.error = None if job.state != "failed" else job.error
        self.save(job)

    async def shutdown(self) -> None:
        """Close every connection once its last answers are written (a second at most)."""
        for conn in list(self.connections):
            conn.close()
        with anyio.move_on_after(1):
            for conn in list(self.connections):
                await conn.flushed.wait()
        if self.journal is not None:
            await self.journal.aclose()

    # ------------------------------------------------------------------ helpers

    def job(self, job_id: Any) -> Job:
        job = self.jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise ProtocolError(NOT_FOUND, f"no job {job_id!r}")
        return job

    def job_by_ref(self, ref: str) -> Job:
        """A job by id, or by exact unique name (for the CLI)."""
        if ref in self.jobs:
            return self.jobs[ref]
        named = [job for job in self.jobs.values() if job.name == ref]
        if len(named) == 1:
            return named[0]
        if named:
            raise ProtocolError(BAD_ARGS, f"several jobs are named {ref!r}; use an id")
        raise ProtocolError(NOT_FOUND, f"no job {ref!r}")

    def host_takes_messages(self, job: Job) -> bool:
        spec = self.hosts.get(job.host)
        return spec.takes_messages if spec else False

    async def persist_item(self, job: Job, item: Item) -> None:
        assert self.journal is not None
        await self.journal.append({"op": "item", "job": job.id, "item": item.to_json()})

    def push_pending(self, job: Job) -> None:
        """Send every item the current worker connection has not had yet, in seq order."""
        if job.conn is None:
            return
        for item in job.queue.pending(after=job.sent):
            job.conn.send(deliver_event(item))
            job.sent = item.seq
            if item.is_agent_item:
                self.receipts.move(job.id, item.seq, "delivered")

    async def enqueue(self, job: Job, kind: str, content: str, *, wake: bool = True, **fields: Any) -> tuple[Item, str]:
        """Queue an item durably and hand it on; returns the item and what happened:
        ``delivered`` (pushed to a connected worker), ``queued`` (kept; the worker is
        starting or reconnecting, or ``wake`` is False), ``started`` (a worker was started
        for it) or ``stopped`` (kept; a stopped job is not woken)."""
        if job.state == "stopped" and kind == "reply" and wake:
            # A user reply un-stops the job (messages never do); a worker still exiting
            # from the stop is then started again for it when it is gone.
            job.state = "idle"
            self.save(job)
        item = job.queue.enqueue(kind, content, **fields)
        # Push before the fsync (the receiver acks only what is in its transcript, and
        # the restart seq gap keeps a lost undurable seq from ever being reused), but
        # answer only once the item is durable.
        faults.point("daemon.after_accept_before_persist")
        try:
            self.push_pending(job)
            await self.persist_item(job, item)
        except Exception:
            job.queue.items = [it for it in job.queue.items if it.seq != item.seq]
            raise
        faults.point("daemon.after_persist_before_answer")
        if job.conn is not None:
            return item, "delivered"
        if job.state == "stopped" and kind != "reply":
            return item, "stopped"
        if job.worker_pid is not None:
            return item, "queued"
        if not wake:
            return item, "queued"
        if job.crashes > MAX_CRASH_RESTARTS:
            job.crashes = 0
        self.start_worker(job)
        return item, "started"

    # ------------------------------------------------------------------ peers

    def tree_record(self, session: str | None) -> Job | None:
        """The job record that carries tree links for ``session``, if any."""
        if session is None:
            return None
        best = None
        for job in self.jobs.values():
            if job.session == session and (best is None or job.created > best.created):
                best = job
        return best

    def peer_infos(self) -> list[PeerInfo]:
        infos = [job.peer_info(accepts_messages=self.host_takes_messages(job)) for job in self.jobs.values()]
        for peer in self.foreground.values():
            record = self.tree_record(peer.session)
            infos.append(peer.peer_info(record.peer_info() if record else None))
        return infos

    def sender_info(self, conn: Connection) -> PeerInfo:
        if conn.job is not None:
            return conn.job.peer_info(accepts_messages=self.host_takes_messages(conn.job))
        if conn.peer is not None:
            record = self.tree_record(conn.peer.session)
            return conn.peer.peer_info(record.peer_info() if record else None)
        raise ProtocolError(UNAUTHORIZED, "this connection is not bound to a session (peer_register or worker hello first)")

    def reach(self, sender: PeerInfo, target: PeerInfo, addressed_by: str):
        return policy.decide_reach(self.pm, sender, target, addressed_by, self.config)

    def peer_row(self, peer: PeerInfo, relation: str) -> dict[str, Any]:
        job = self.jobs.get(peer.id) if peer.kind == "job" else None
        return {
            "id": peer.id,
            "name": peer.name,
            "kind": peer.kind,
            "relation": relation,
            "state": peer.state,
            "status": peer.status,
            "summary": peer.summary,
            "question": peer.question,
            "cwd": peer.cwd,
            "live": peer.live,
            "dialog": bool(job and job.dialog),
        }

    # ------------------------------------------------------------------ ops: daemon

    async def op_daemon_status(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "uptime": round(time.time() - self.started, 3),
            "socket": str(self.paths.socket),
            "home": str(self.paths.home),
            "jobs": len(self.jobs),
            "live_workers": sum(1 for job in self.jobs.values() if job.worker_pid is not None),
            "foreground": sum(1 for peer in self.foreground.values() if peer.connected),
            "connections": len(self.connections),
        }

    async def op_daemon_stop(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        self.stopping.set()
        return {"stopping": True}

    async def op_test_clock(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Move the daemon's clock forward (rate windows) — only with ROOST_TEST_HOOKS=1."""
        if os.environ.get("ROOST_TEST_HOOKS") != "1":
            raise ProtocolError("unknown_op", "unknown op 'test_clock'")
        self.clock_offset += args["advance"]
        return {"offset": self.clock_offset}

    async def op_tools(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        return {"tools": [tool.to_json() for tool in policy.tool_definitions(self.pm, self.config)]}

    async def op_tool_call(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Run an agent tool for a bound session: the op behind it, then the text the
        model reads (tools plugin). A refused call is a normal, failed tool result."""
        name, params = args["name"], args["args"]
        if conn.job is not None and "hops" in args:
            # The worker's run took in items further down the chain since it started.
            conn.job.run_hops = max(conn.job.run_hops, args["hops"])
        if name not in {tool.name for tool in policy.tool_definitions(self.pm, self.config)}:
            raise ProtocolError(NOT_FOUND, f"no agent tool {name!r}")
        handler = TOOL_OPS.get(name)
        try:
            if handler is None:
                raise ProtocolError(NOT_FOUND, f"agent tool {name!r} has no op")
            op_name, schema = handler
            data = await getattr(self, op_name)(conn, validate_args(schema, params, name))
            result = ToolResult(tool=name, ok=True, data=data)
        except ProtocolError as exc:
            result = ToolResult(tool=name, ok=False, code=exc.code, message=exc.message)
        return {"ok": result.ok, "text": policy.format_tool_result(self.pm, result), "data": result.data, "code": result.code}

    # ------------------------------------------------------------------ ops: jobs

    async def op_start(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        task = args["task"]
        if not task.strip():
            raise ProtocolError(BAD_ARGS, "start: task is empty")
        cwd = args.get("cwd") or str(self.paths.home)
        if not os.path.isabs(cwd) or not Path(cwd).is_dir():
            raise ProtocolError(BAD_ARGS, f"start: cwd {cwd!r} is not an existing absolute directory")
        project = load_project_config(cwd)
        host = args.get("host") or project.get("defaultHost") or self.config.default_host
        if host not in self.hosts:
            raise ProtocolError(BAD_ARGS, f"start: unknown host {host!r} (known: {', '.join(sorted(self.hosts))})")
        session = args.get("session")
        if session is not None:
            session = self.adoptable_session(session)
        job = self.create_job(
            task=task,
            name=args.get("name"),
            cwd=cwd,
            host=host,
            scenario=args.get("scenario"),
            model=args.get("model") or project.get("defaultModel"),
            thinking=args.get("thinking") or project.get("defaultThinking"),
        )
        if session is not None:
            # A foreground session moving to the background (the spec's "←"): the job
            # continues its file, its tree links and its seqs.
            job.session = session
            previous = self.tree_record(session)
            if previous is not None and previous is not job:
                job.parent_session, job.parent_peer = previous.parent_session, previous.parent_peer
                job.root_session, job.depth, job.spawned = previous.root_session, previous.depth, previous.spawned
            job.queue.reply_seq = max(seqs_in(read_entries(session)), default=0)
        self.add_job(job)
        await self.enqueue(job, "reply", task, text=task, trace=args.get("trace") or f"t-{job.id}-1")
        return {"id": job.id, "name": job.name}

    def adoptable_session(self, session: str) -> str:
        """A session file a new job may continue: no live process holds it."""
        session = check_session_path(session)
        holder = locks.lock_holder(session)
        if holder is not None:
            raise ProtocolError(CONFLICT, f"session is held by the live process {holder}; end it first")
        if any(job.session == session and job.has_worker for job in self.jobs.values()):
            raise ProtocolError(CONFLICT, "a live job already runs that session")
        return session

    def create_job(self, *, task: str, name: str | None, cwd: str, host: str, **fields: Any) -> Job:
        job_id = identity.new_job_id(set(self.jobs) | set(self.foreground))
        clean_name = policy.sanitize_name(self.pm, name or default_name(task))
        job = Job(
            id=job_id,
            name=clean_name,
            host=host,
            cwd=cwd,
            session=str(self.paths.sessions_dir / f"{job_id}.jsonl"),
            token=identity.new_token(),
            task=task,
            state="running",
            **fields,
        )
        return job

    def add_job(self, job: Job) -> None:
        """Save a new job's record, then make it known (a failed save leaves no ghost)."""
        self.save(job)
        self.jobs[job.id] = job

    async def op_jobs(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        rows = []
        for job in sorted(self.jobs.values(), key=lambda j: j.created):
            row = job.row()
            parent = self.live_parent(job)
            row["parent"] = parent.id if parent else None
            rows.append(row)
        return {"jobs": rows}

    async def op_agents(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Every peer (collapsed by session) with its tree links, for views."""
        return {"agents": self.agent_rows()}

    async def op_watch(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """The agent table now; then an ``agents`` event whenever it changes."""
        self.watch.add(conn)
        return {"agents": self.agent_rows()}

    async def op_dead(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        return {"dead": list(self.receipts.dead)}

    def agent_rows(self) -> list[dict[str, Any]]:
        table = routing.collapse(self.peer_infos())
        names = {peer.id: peer.name for peer in table.holders.values()}
        rows = []
        for peer in table.holders.values():
            job = self.jobs.get(peer.id) if peer.kind == "job" else None
            fg = self.foreground.get(peer.id) if peer.kind == "foreground" else None
            parent = self.parent_holder(peer, table)
            rows.append(
                {
                    "id": peer.id,
                    "name": peer.name,
                    "kind": peer.kind,
                    "host": peer.host,
                    "state": peer.state,
                    "live": peer.live,
                    "cwd": peer.cwd,
                    "session": peer.session,
                    "status": peer.status,
                    "summary": peer.summary,
                    "question": peer.question,
                    "dialog": bool(job and job.dialog),
                    "parentSession": peer.parent_session,
                    "rootSession": peer.root_session,
                    "parent": parent.id if parent is not None else None,
                    "parentName": names.get(parent.id) if parent is not None else None,
                    "pending": len(job.queue.items) if job else len(fg.in_flight) if fg else 0,
                    "lastMessage": (job.last_message if job else fg.last_message if fg else None),
                    "created": job.created if job else fg.registered if fg else None,
                }
            )
        rows.sort(key=lambda row: (row["created"] or 0, row["id"]))
        return rows

    def parent_holder(self, peer: PeerInfo, table: routing.PeerTable) -> PeerInfo | None:
        """The record that holds ``peer``'s parent session now (live or not)."""
        if peer.parent_session is not None:
            return table.holders.get(peer.parent_session)
        if peer.parent_peer is not None:
            return table.holder_of(peer.parent_peer)
        return None

    def live_parent(self, job: Job) -> PeerInfo | None:
        if job.parent_session is None and job.parent_peer is None:
            return None
        table = routing.collapse(self.peer_infos())
        if job.parent_session is not None:
            holder = table.holders.get(job.parent_session)
        else:
            holder = table.holder_of(job.parent_peer or "")
        return holder if holder is not None and holder.live else None

    async def op_reply(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.job_by_ref(args["job"])
        text = args["text"]
        if not text.strip():
            raise ProtocolError(BAD_ARGS, "reply: text is empty")
        item, outcome = await self.enqueue(job, "reply", text, text=text, trace=f"t-{job.id}-{job.queue.reply_seq + 1}")
        return {"id": job.id, "seq": item.seq, "result": outcome}

    async def op_stop(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.job_by_ref(args["job"])
        was = job.state
        job.state = "stopped"
        job.dialog = False
        self.save(job)
        if job.worker_pid is not None:
            if job.conn is not None:
                job.conn.send({"event": "shutdown", "reason": "stopped"})
            else:
                self.kill_worker(job)
            self._kill_at[job.id] = self.clock() + STOP_GRACE_SECONDS
        await self.report_ended(job, "stopped")
        return {"id": job.id, "was": was, "state": job.state}

    async def op_remove(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.job_by_ref(args["job"])
        if job.state != "stopped":
            await self.report_ended(job, "removed")
        job.state = "stopped"
        if job.worker_pid is not None:
            self.kill_worker(job)
        if job.conn is not None:
            job.conn.job = None
            job.conn.close()
        self.jobs.pop(job.id, None)
        self._kill_at.pop(job.id, None)
        dropped = job.queue.clear()
        for item in dropped:
            if item.is_agent_item:
                self.receipts.move(job.id, item.seq, "dead", "target removed")
        self.watch.touch()
        assert self.journal is not None
        await self.journal.append({"op": "drop", "job": job.id})
        self.job_files.delete(job.id)
        return {"id": job.id, "removed": True, "dropped": len(dropped)}

    async def op_log(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.job_by_ref(args["job"])
        return {
            "id": job.id,
            "session": job.session,
            "entries": read_entries(job.session) if args.get("entries") else None,
            "sent": self.receipts.sent_by(job.id),
        }

    # ------------------------------------------------------------------ ops: workers

    async def op_worker_hello(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(args["job"])
        if job is None or not hmac.compare_digest(job.token.encode(), args["token"].encode()):
            raise ProtocolError(UNAUTHORIZED, "bad job token")
        if conn.bound:
            raise ProtocolError(CONFLICT, "connection is already bound")
        if job.worker_pid is None or conn.pid != job.worker_pid:
            raise ProtocolError(UNAUTHORIZED, "only the job's own worker process may say hello")
        if job.conn is not None and job.conn is not conn:
            job.conn.job = None
            job.conn.close()
        conn.job = job
        job.conn = conn
        # Everything unacked is pushed again; the worker drops what its transcript holds.
        job.sent = job.queue.acked
        return {
            "job": {
                "id": job.id,
                "name": job.name,
                "host": job.host,
                "cwd": job.cwd,
                "session": job.session,
                "task": job.task,
                "scenario": job.scenario,
                "model": job.model,
                "thinking": job.thinking,
                "state": job.state,
                "parentSession": job.parent_session,
                "parentPeer": job.parent_peer,
            },
            "acked": job.queue.acked,
            "tools": [tool.to_json() for tool in policy.tool_definitions(self.pm, self.config)],
        }

    def after_hello(self, conn: Connection) -> None:
        """Once the hello answer is queued: push everything not yet in the transcript, and
        retry reports kept for this job's session (a job for it has started)."""
        if conn.job is not None:
            self.push_pending(conn.job)
            self.soon(lambda session=conn.job.session: self.retry_undelivered(session=session))

    async def op_job_status(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = conn.job
        assert job is not None
        if job.state == "stopped":
            # The user's stop wins over a status the worker sent before it heard of it.
            args = {key: value for key, value in args.items() if key not in ("state", "dialog")}
        for key in ("state", "status", "summary", "question", "error"):
            if key in args:
                setattr(job, key, args[key])
        if "dialog" in args:
            job.dialog = bool(args["dialog"])
        if "trace" in args:
            job.run_trace = args["trace"]
        if "hops" in args:
            job.run_hops = args["hops"]
        if "state" in args and args["state"] != "failed" and "error" not in args:
            job.error = None
        if args.get("settled"):
            job.crashes = 0
        if job.state != "running":
            job.idle_since = self.clock()
        self.save(job)
        return {"state": job.state}

    async def op_ack(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        seq = args["seq"]
        if conn.job is not None:
            job = conn.job
            if seq > job.queue.reply_seq:
                raise ProtocolError(BAD_ARGS, f"ack: seq {seq} was never queued")
            done = job.queue.ack(seq)
            for item in done:
                if item.is_agent_item:
                    self.receipts.move(job.id, item.seq, "acknowledged")
            if done:
                self.watch.touch()
                assert self.journal is not None
                await self.journal.append({"op": "ack", "job": job.id, "seq": job.queue.acked})
            return {"acked": job.queue.acked}
        if conn.peer is not None:
            for key in [s for s in conn.peer.in_flight if s <= seq]:
                conn.peer.in_flight.pop(key)
                self.receipts.move(conn.peer.id, key, "acknowledged")
            return {"acked": seq}
        raise ProtocolError(UNAUTHORIZED, "ack needs a bound connection")

    # ------------------------------------------------------------------ ops: messaging

    async def op_peer_register(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        if conn.job is not None:
            raise ProtocolError(CONFLICT, "a worker connection cannot register as a foreground peer")
        pid = args["pid"]
        session = args.get("session")
        if not locks.is_alive(pid):
            raise ProtocolError(UNAUTHORIZED, f"pid {pid} is not a live process")
        if not locks.is_descendant(conn.pid, pid):
            raise ProtocolError(UNAUTHORIZED, "the connecting process is not that pid or one of its descendants")
        session_id = args.get("sessionId")
        if session is not None:
            session = check_session_path(session)
            holder = locks.lock_holder(session)
            if holder != pid:
                raise ProtocolError(UNAUTHORIZED, "the writer lock of that session does not name that pid")
            if not session_id:
                header = next((e for e in read_entries(session) if e.get("type") == "session"), None)
                session_id = header.get("id") if header else None
            peer_id = identity.foreground_id(session_id or session)
        elif session_id:
            # A no-session peer names itself by a random id of its own, so it keeps its
            # peer id across reconnects; a live peer of another pid keeps its id.
            peer_id = identity.foreground_id(session_id)
            taken = self.foreground.get(peer_id)
            if taken is not None and taken.connected and taken.pid != pid and locks.is_alive(taken.pid):
                raise ProtocolError(CONFLICT, f"peer id {peer_id} belongs to another live session")
        else:
            existing = conn.peer.id if conn.peer is not None and conn.peer.session is None else None
            peer_id = existing or identity.foreground_id(None)
        if peer_id in self.jobs:
            raise ProtocolError(CONFLICT, f"peer id {peer_id} is taken")
        name = policy.sanitize_name(self.pm, args.get("name") or Path(session or "foreground").stem)
        peer = self.foreground.get(peer_id)
        if peer is not None and peer.conn is not None and peer.conn is not conn:
            old = peer.conn
            old.peer = None
            old.send({"event": "replaced", "by": conn.number})
        if conn.peer is not None and conn.peer.id != peer_id:
            conn.peer.conn = None
        if peer is None:
            peer = ForegroundPeer(id=peer_id, name=name, session=session, cwd=args.get("cwd"), pid=pid)
            self.foreground[peer_id] = peer
        peer.name, peer.session, peer.cwd, peer.pid = name, session, args.get("cwd"), pid
        peer.conn = conn
        conn.peer = peer
        self.watch.touch()
        return {
            "id": peer.id,
            "name": peer.name,
            "tools": [tool.to_json() for tool in policy.tool_definitions(self.pm, self.config)],
        }

    def after_register(self, conn: Connection) -> None:
        """Push again what a previous connection of this peer had not acked."""
        peer = conn.peer
        if peer is not None:
            for seq in sorted(peer.in_flight):
                conn.send(peer.in_flight[seq])
            self.soon(lambda: self.retry_undelivered(session=peer.session, peer_id=peer.id))

    def peer_disconnected(self, conn: Connection) -> None:
        self.watch.discard(conn)
        self.watch.touch()
        if conn.peer is not None and conn.peer.conn is conn:
            conn.peer.conn = None
        if conn.job is not None and conn.job.conn is conn:
            conn.job.conn = None

    async def op_peers(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        sender = self.sender_info(conn)
        table = routing.collapse(self.peer_infos())
        own_key = routing.session_key(sender)
        rows = []
        for key, peer in table.holders.items():
            if key == own_key or peer.id == sender.id:
                continue
            decision = self.reach(sender, peer, "list")
            if decision.allowed:
                rows.append(self.peer_row(peer, decision.relation))
        rows.sort(key=lambda row: (row["relation"] != "parent", row["relation"], row["name"], row["id"]))
        return {"self": {"id": sender.id, "name": sender.name}, "peers": rows, "sent": self.receipts.sent_by(sender.id)}

    async def op_send(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        sender = self.sender_info(conn)
        text = args["message"]
        table = routing.collapse(self.peer_infos())
        target, addressed_by = routing.resolve_target(
            args["to"], table, lambda peer: self.reach(sender, peer, "name").allowed
        )
        decision = self.reach(sender, target, addressed_by)
        if not decision.allowed:
            self.receipts.record(sender.id, target.id, target.name, "message", "refused", reason="unreachable", text=text)
            raise ProtocolError(UNREACHABLE, decision.reason or f"peer {target.id} is not reachable")
        trace, hops = self.chain_of(conn)
        # The envelope names the sender as the receiver sees it: my child sees "parent".
        outgoing = OutgoingItem(
            sender=sender, target=target, text=text, kind="message", relation=inverse_relation(decision.relation), hops=hops + 1
        )
        refusal = policy.check_send(self.pm, outgoing, self.clock(), self.config)
        if refusal is not None:
            self.receipts.record(sender.id, target.id, target.name, "message", "refused", reason=refusal.code, text=text)
            raise ProtocolError(refusal.code, refusal.message)
        if not target.accepts_messages:
            self.receipts.record(sender.id, target.id, target.name, "message", "refused", reason=NOT_ACCEPTED, text=text)
            raise ProtocolError(NOT_ACCEPTED, f"{target.id} is a {target.host} job; it takes no messages")
        content = policy.frame_item(self.pm, outgoing)
        result = await self.deliver_to(target, outgoing, content, trace=trace)
        result["relation"] = decision.relation
        policy.note_sent(self.pm, outgoing, self.clock())
        return result

    async def op_spawn(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Start a child job of the calling session, linked into its tree."""
        sender = self.sender_info(conn)
        parent_job = conn.job if conn.job is not None else self.tree_record(sender.session)
        host = args.get("host") or (conn.job.host if conn.job is not None else self.config.default_host)
        if host not in self.hosts:
            raise ProtocolError(BAD_ARGS, f"spawn: unknown host {host!r}")
        cwd = args.get("cwd") or sender.cwd or str(self.paths.home)
        if not os.path.isabs(cwd) or not Path(cwd).is_dir():
            raise ProtocolError(BAD_ARGS, f"spawn: cwd {cwd!r} is not an existing absolute directory")
        model = args.get("model") or (conn.job.model if conn.job is not None else None)
        thinking = args.get("thinking") or (conn.job.thinking if conn.job is not None else None)
        scenario = args.get("scenario")
        if scenario is None and host == "scripted":
            scenario = child_scenario(conn.job.scenario if conn.job is not None else None, model)
        root = sender.root_session or sender.session or f"peer:{sender.id}"
        depth = (parent_job.depth if parent_job is not None else 0) + 1
        trace, hops = self.chain_of(conn)
        request = SpawnRequest(
            parent=sender,
            depth=depth,
            live_children=sum(1 for j in self.jobs.values() if j.has_worker and self.is_child_of(j, sender)),
            live_in_tree=sum(1 for j in self.jobs.values() if j.has_worker and j.tree == root),
            live_spawned=sum(1 for j in self.jobs.values() if j.has_worker and j.spawned),
            tree=root,
            hops=hops + 1,
        )
        refusal = policy.check_spawn(self.pm, request, self.clock(), self.config)
        if refusal is not None:
            raise ProtocolError(refusal.code, refusal.message)
        job = self.create_job(
            task=args["task"],
            name=args.get("name"),
            cwd=cwd,
            host=host,
            scenario=scenario,
            model=model,
            thinking=thinking,
            parent_session=sender.session,
            parent_peer=sender.id,
            root_session=root,
            depth=depth,
            spawned=True,
        )
        self.add_job(job)
        policy.note_spawned(self.pm, request, self.clock())
        await self.enqueue(job, "reply", args["task"], text=args["task"], trace=trace or f"t-{job.id}-1", hops=hops + 1)
        return {"id": job.id, "name": job.name, "report": "a report will arrive by itself when it finishes"}

    def is_child_of(self, job: Job, parent: PeerInfo) -> bool:
        if parent.session is not None and job.parent_session == parent.session:
            return True
        return job.parent_peer == parent.id

    # ------------------------------------------------------------------ hand-back

    async def op_handback(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """A worker's run settled: decide (handback plugin) whether it reports, and route it."""
        job = conn.job
        assert job is not None
        causes = []
        for raw in args["causes"]:
            if not isinstance(raw, dict) or not isinstance(raw.get("seq"), int) or not isinstance(raw.get("kind"), str):
                raise ProtocolError(BAD_ARGS, "handback: each cause needs an integer seq and a kind")
            causes.append(RunCause(seq=raw["seq"], kind=raw["kind"], sender=raw.get("sender"), joined=bool(raw.get("joined"))))
        run = RunRecord(
            causes=tuple(causes),
            state=args["state"],
            result=(args.get("result") or "")[:REPORT_CHARS],
            question=args.get("question"),
            error=args.get("error"),
        )
        if job.parent_session is None and job.parent_peer is None:
            return {"reported": False, "reason": "no parent"}
        child = job.peer_info()
        decision = policy.decide_report(self.pm, child, run, job.parent_streak)
        job.parent_streak = decision.streak
        self.save(job)
        if not decision.report:
            return {"reported": False, "reason": decision.reason}
        report = Report(child=child, state=run.state, result=run.result, question=run.question, error=run.error)
        faults.point("daemon.during_handback")
        route = await self.route_report(job, report)
        return {"reported": True, "route": route}

    def report_candidates(self, job: Job) -> ReportCandidates:
        table = routing.collapse(self.peer_infos())
        if job.parent_session is not None:
            holder = table.holders.get(job.parent_session)
        else:
            holder = table.holder_of(job.parent_peer or "")
        session_job = self.tree_record(job.parent_session)
        return ReportCandidates(
            parent_session=job.parent_session,
            parent_peer=job.parent_peer,
            live_holder=holder if holder is not None and holder.live else None,
            session_job=session_job.peer_info() if session_job is not None and session_job.id != job.id else None,
        )

    async def route_report(self, job: Job, report: Report) -> str:
        """Send a report where the handback plugin says; keep it on the child otherwise."""
        route = policy.route_report(self.pm, report, self.report_candidates(job))
        if route.action in ("deliver", "queue") and route.target is not None:
            table = routing.collapse(self.peer_infos())
            target = table.holder_of(route.target) if route.action == "deliver" else None
            if route.action == "queue" and route.target in self.jobs:
                target = self.jobs[route.target].peer_info()
            if target is not None:
                faults.point("daemon.report_routing")
                item = OutgoingItem(
                    sender=report.child,
                    target=target,
                    text=policy.format_report(self.pm, report),
                    kind="report",
                    relation="child",
                    hops=job.run_hops + 1,
                )
                result = await self.deliver_to(target, item, policy.frame_item(self.pm, item), trace=job.run_trace, wake=route.wake)
                if result["result"] != "not running":
                    if job.undelivered_report is not None:
                        job.undelivered_report = None
                        self.save(job)
                    return result["result"]
        if route.action == "drop":
            return "dropped"
        job.undelivered_report = {
            "state": report.state,
            "result": report.result,
            "question": report.question,
            "error": report.error,
            "synthetic": report.synthetic,
            "reason": report.reason,
        }
        self.save(job)
        return "kept"

    async def retry_undelivered(self, *, session: str | None = None, peer_id: str | None = None) -> None:
        """A peer for ``session`` registered, or a job for it started: retry kept reports."""
        for job in list(self.jobs.values()):
            kept = job.undelivered_report
            if kept is None:
                continue
            if (session is not None and job.parent_session == session) or (
                peer_id is not None and job.parent_session is None and job.parent_peer == peer_id
            ):
                report = Report(child=job.peer_info(), **kept)
                await self.route_report(job, report)

    async def report_ended(self, job: Job, reason: str) -> None:
        """The synthetic ``ended`` report of a spawned child that is gone (once)."""
        if not job.spawned or job.ended_reported:
            return
        report = policy.report_on_end(self.pm, job.peer_info(), reason)
        if report is None:
            return
        job.ended_reported = True
        await self.route_report(job, report)

    def chain_of(self, conn: Connection) -> tuple[str | None, int]:
        """The chain the calling session is in: (trace, hops) of what started its run."""
        if conn.job is not None:
            return conn.job.run_trace, conn.job.run_hops
        # A foreground session is where the user sits: what it does starts a new chain.
        return None, 0

    async def deliver_to(
        self, target: PeerInfo, item: OutgoingItem, content: str, *, trace: str | None = None, wake: bool = True
    ) -> dict[str, Any]:
        base = {"to": target.id, "name": target.name, "relation": item.relation}
        fields = {
            "text": item.text,
            "sender": item.sender.id,
            "sender_name": item.sender.name,
            "relation": item.relation,
            "trace": trace,
            "hops": item.hops,
        }
        if target.kind == "foreground":
            peer = self.foreground[target.id]
            if peer.conn is None:
                self.receipts.record(item.sender.id, target.id, target.name, item.kind, "dead", reason="receiver not running", text=item.text)
                return {**base, "result": "not running"}
            peer.last_message = time.time()
            peer.seq += 1
            self.receipts.record(item.sender.id, target.id, target.name, item.kind, "delivered", seq=peer.seq, text=item.text)
            event = deliver_event(Item(seq=peer.seq, kind=item.kind, content=content, **fields))
            peer.in_flight[peer.seq] = event
            peer.conn.send(event)
            return {**base, "result": "delivered", "seq": peer.seq}
        job = self.jobs[target.id]
        try:
            queued, outcome = await self.enqueue(job, item.kind, content, wake=wake, **fields)
        except ProtocolError as exc:
            if exc.code == QUEUE_FULL:
                self.receipts.record(item.sender.id, target.id, target.name, item.kind, "dead", reason="queue full", text=item.text)
            raise
        job.last_message = time.time()
        state = "delivered" if outcome == "delivered" else "queued"
        self.receipts.record(item.sender.id, target.id, target.name, item.kind, state, seq=queued.seq, text=item.text)
        result = {**base, "result": outcome, "seq": queued.seq}
        if job.dialog and outcome in ("delivered", "queued"):
            result["waiting"] = "waiting on a dialog"
        return result


#: Agent tool -> (op handler, argument schema). The tool's JSON schema is the tools
#: plugin's; this is the daemon's own check of what reaches the op.
TOOL_OPS: dict[str, tuple[str, dict[str, Field]]] = {
    "roost_agents": ("op_peers", {}),
    "roost_spawn": (
        "op_spawn",
        {
            "task": Field(str, required=True, max_len=100_000),
            "name": Field(str, max_len=200),
            "cwd": Field(str, max_len=4096),
            "model": Field(str, max_len=200),
            "thinking": Field(str, max_len=200),
        },
    ),
    "roost_send": ("op_send", {"to": Field(str, required=True, max_len=200), "message": Field(str, required=True, max_len=1_000_000)}),
}


def deliver_event(item: Item) -> dict[str, Any]:
    return {
        "event": "deliver",
        "seq": item.seq,
        "kind": item.kind,
        "content": item.content,
        "text": item.text,
        "from": item.sender,
        "fromName": item.sender_name,
        "relation": item.relation,
        "trace": item.trace,
        "hops": item.hops,
    }


_INVERSE = {"parent": "child", "child": "parent"}


def inverse_relation(relation: str) -> str:
    """The relation seen from the other side (parent <-> child; the rest are symmetric)."""
    return _INVERSE.get(relation, relation)


def child_scenario(parent_scenario: Any, model: str | None) -> Any:
    """A scripted child's scenario: the parent scenario's ``models[model]`` table, a
    bundled scenario named ``model``, or the default (None)."""
    if isinstance(parent_scenario, dict) and model:
        models = parent_scenario.get("models")
        if isinstance(models, dict) and isinstance(models.get(model), dict):
            return models[model]
    return model


def default_name(task: str) -> str:
    words = " ".join(task.split()[:6])
    return words[:40] or "job"


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def check_session_path(session: str) -> str:
    """An absolute, normalised session path that is not a symlink."""
    if "\x00" in session or not os.path.isabs(session):
        raise ProtocolError(BAD_ARGS, "session must be an absolute path")
    if os.path.normpath(session) != session:
        raise ProtocolError(BAD_ARGS, "session path must be normalised (no '..' or '//')")
    if os.path.islink(session):
        raise ProtocolError(BAD_ARGS, "session path must not be a symlink")
    return session
