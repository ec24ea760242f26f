"""The worker: the process that runs one background session.

It takes its token from ``PI_JOB_TOKEN`` and removes it from the environment before
anything else can inherit it, authenticates on its own connection, runs the job's agent
host, keeps the ReplyQueue, acks items once they are in the transcript, and reconnects
when the daemon comes back (it runs in its own session, so a daemon restart does not
kill it). Its :class:`~roost_core.worker.supervisor.Supervisor` owns every process the
job starts: nothing of the job outlives the worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from roost_core import faults
from roost_core.client import AsyncClient, DaemonUnavailable, new_key
from roost_core.config import Config, ConfigError
from roost_core.dialogs import clean_options
from roost_core.hosts import registered_hosts
from roost_core.hosts.base import JobInfo, RunOutcome
from roost_core.peerlink import PeerLink
from roost_core.protocol import MAX_SEEN, ProtocolError
from roost_core.queue import Item
from roost_core.store import write_all
from roost_core.worker.background import BackgroundWatch
from roost_core.worker.idrecord import IdRecord
from roost_core.worker.progress import BOUNDARY, ITEM, MODEL, RunProgress
from roost_core.worker.reply_queue import ReplyQueue
from roost_core.worker.supervisor import Supervisor

log = logging.getLogger("roost.worker")

#: After a run whose session file could not be written, the next try waits this long,
#: doubling up to :data:`WRITE_RETRY_MAX` (the disk is full: no point in hammering it).
WRITE_RETRY_FIRST = 0.5
WRITE_RETRY_MAX = 10.0
#: A worker with no daemon for this long gives up (its job shows as ended on restart);
#: ``ROOST_WORKER_ORPHAN_SECONDS`` overrides it.
ORPHAN_SECONDS = 300.0
#: How long a new worker waits for the daemon to accept its hello.
HELLO_SECONDS = 60.0
SUMMARY_CHARS = 200
REPORT_CHARS = 6000


def orphan_seconds() -> float:
    """Read when needed, not at import: a forked worker imported this module under the
    fork server's environment, not its job's."""
    return float(os.environ.get("ROOST_WORKER_ORPHAN_SECONDS", ORPHAN_SECONDS))


@attrs.frozen
class PreparedPlugins:
    """A plugin manager built before the worker existed (the fork server builds one, as the
    daemon has its plugins), with the plugin names it blocks: a worker takes it only when
    it would block the same names. Installed entry points are read once, as the daemon
    reads them (a plugin installed later needs a daemon restart either way)."""

    blocked: frozenset[str]
    manager: Any


def blocked_plugins(config: Config) -> frozenset[str]:
    """The plugin names a worker blocks: ``ROOST_DISABLE_PLUGINS`` and ``config``'s
    ``plugins.disable``."""
    from roost_core.plugins import disabled_from_env

    return frozenset(disabled_from_env()) | frozenset(config.disabled_plugins)


def prepare_plugins() -> PreparedPlugins | None:
    """Build the plugin manager a worker would build, ahead of time (with the config file
    as it is now: a worker takes it only when its daemon's config blocks the same names);
    None when that fails (each worker then builds its own)."""
    from roost_core.config import load_user_config
    from roost_core.paths import resolve_paths
    from roost_core.plugins import make_plugin_manager

    try:
        blocked = blocked_plugins(load_user_config(resolve_paths().config_file))
        return PreparedPlugins(blocked, make_plugin_manager(disabled=blocked))
    except Exception:  # noqa: BLE001 - a bad config or plugin is the worker's to report
        return None


def cause_of(item: Item, *, joined: bool = False) -> dict[str, Any]:
    return {"seq": item.seq, "kind": item.kind, "sender": item.sender, "joined": joined}


async def first_of(*events: anyio.Event) -> None:
    """Until the first of ``events`` is set."""
    async with anyio.create_task_group() as race:

        async def until(event: anyio.Event) -> None:
            await event.wait()
            race.cancel_scope.cancel()

        for event in events:
            race.start_soon(until, event)


class Worker:
    def __init__(self, job_id: str, token: str, socket_path: str, prepared: PreparedPlugins | None = None, *, warm: bool = False) -> None:
        self.job_id = job_id
        self.prepared = prepared
        self.token = token
        self.socket_path = socket_path
        self.queue = ReplyQueue()
        #: The daemon link (connect, hello, ack, ask again); gives up with no daemon for
        #: :func:`orphan_seconds`.
        self.daemon_link = PeerLink(socket_path, register=self.register, on_event=self.on_event, on_linked=self.resync, give_up_after=orphan_seconds)
        self.hello: dict[str, Any] | None = None
        self.first_hello = anyio.Event()
        self.tools: list[dict[str, Any]] = []
        self.host: Any = None
        self.job: JobInfo | None = None
        self.status_fields: dict[str, Any] = {}
        self.ack_wanted = anyio.Event()
        self.shutdown = anyio.Event()
        self.shutdown_reason: str | None = None
        self.run_scope: anyio.CancelScope | None = None
        self.exit_code = 0
        self.run_causes: list[dict[str, Any]] = []
        self.run_hops = 0
        #: Every item the current run took (its prompt, steered items, dialog answers).
        self.run_items: list[Item] = []
        self.write_retry = 0.0
        #: The run took in an item of a chain that already holds a broadcast.
        self.run_broadcast_chain = False
        #: The session's usage as the host last reported it, and what the daemon has.
        self.usage: dict[str, Any] | None = None
        self.usage_sent: dict[str, Any] | None = None
        self.usage_wanted = anyio.Event()
        #: Seqs the job's model had in a model request, not yet told to the daemon.
        self.seen_unsent: list[int] = []
        self.seen_wanted = anyio.Event()
        #: The run's last sign of work, told to the daemon (coalesced: worker.progress).
        self.progress = RunProgress(self.send_progress)
        self.processes = Supervisor(on_host_pid=self.host_pid_changed)
        #: What the job keeps running once a run settles (its daemon does not hibernate it
        #: meanwhile).
        self.background = BackgroundWatch(self.processes, lambda found: self.status(wait=False, **found))
        #: A warm worker (``roost_core.daemon.pool``) starts its host before its job
        #: exists, then waits to be adopted by it.
        self.warm = warm
        self.warm_answer: dict[str, Any] | None = None
        self.warm_answered = anyio.Event()
        self.adopted = anyio.Event()
        self.plugins: Any = None
        #: The ids of the items handed to the host, by seq (made once the job is known).
        self.id_record: IdRecord | None = None
        #: The user config, as the daemon holds it (its hello says it; the worker never
        #: reads the file, which may have changed to something the daemon refused).
        self.config = Config()

    # ------------------------------------------------------------------ daemon link

    @property
    def client(self) -> AsyncClient | None:
        """The daemon connection (None while there is none)."""
        return self.daemon_link.client

    async def link(self) -> None:
        """Keep one authenticated connection, reconnecting with backoff (the
        :class:`~roost_core.peerlink.PeerLink`); a worker the daemon refuses, or that has
        had no daemon for too long, stops."""
        ended = await self.daemon_link.run()
        if ended == "refused":
            exc = self.daemon_link.error
            assert exc is not None
            log.error("daemon refused this worker: %s %s", exc.code, exc.message)
            self.exit_code = 2
            self.stop("refused")
        elif ended == "orphaned":
            log.error("no daemon for %.0fs; giving up", orphan_seconds())
            self.exit_code = 3
            self.stop("orphaned")

    async def register(self, client: AsyncClient) -> dict[str, Any] | None:
        """``worker_hello`` on a fresh connection (the link's ``register``); a warm worker
        first waits there to be adopted (None: it never will be, and stops)."""
        if self.warm and not self.adopted.is_set() and not await self.wait_for_adoption(client):
            return None
        held = self.queue.highest_seq()
        extra = {} if held is None else {"held": held}
        hello = await client.call("worker_hello", job=self.job_id, token=self.token, pid=os.getpid(), **extra)
        self.hello = hello
        self.tools = hello.get("tools") or []
        self.take_config(hello)
        return hello

    def take_config(self, hello: dict[str, Any]) -> None:
        """The user config the daemon holds, from its hello answer (the defaults when it
        sends none)."""
        try:
            self.config = Config.from_mapping(hello.get("config") or {})
        except ConfigError as exc:  # the daemon checked it: a bug, not the user's file
            log.error("the daemon's config cannot be read here (%s); the defaults are used", exc)

    async def wait_for_adoption(self, client: AsyncClient) -> bool:
        """A warm worker's first connection: ``warm_hello`` (the job it will be), then
        wait for ``adopt``. False when it will never be adopted (refused, the connection
        dropped: the daemon that made the slot is gone, or told it to end)."""
        try:
            self.warm_answer = await client.call("warm_hello", job=self.job_id, token=self.token, pid=os.getpid())
        except (ProtocolError, DaemonUnavailable) as exc:
            log.error("the daemon has no warm slot for this worker: %s", exc)
            self.stop("refused")
            return False
        self.tools = self.warm_answer.get("tools") or []
        self.take_config(self.warm_answer)
        # Until it is adopted, the worker talks on this connection before its hello.
        self.daemon_link.client = client
        self.warm_answered.set()
        await first_of(self.adopted, client.closed, self.shutdown)
        if self.adopted.is_set() and not client.closed.is_set() and not self.shutdown.is_set():
            return True
        self.daemon_link.client = None
        self.stop(self.shutdown_reason or "orphaned")
        return False

    async def resync(self, client: AsyncClient | None = None) -> None:
        """After a (re)connect the daemon hears our state and ack watermark again (the
        link's ``on_linked``)."""
        self.first_hello.set()
        if self.status_fields:
            await self.send_status()
        self.ack_wanted.set()
        self.usage_sent = None  # a new daemon may not have it
        self.usage_wanted.set()
        self.seen_wanted.set()

    async def on_event(self, event: dict[str, Any], client: AsyncClient | None = None) -> None:
        """A pushed event (the link's ``on_event``): an item to hold, ``adopt``, ``shutdown``."""
        name = event.get("event")
        if name == "deliver":
            item = Item.received(event)
            self.queue.push(item)
            if self.run_scope is not None:
                # Said once it is held: the run takes it in at its next tool boundary (a
                # test waits for this line before it lets a slow tool end).
                log.info("item %d (%s) arrived during a run: it goes in at the next tool boundary", item.seq, item.kind)
        elif name == "adopt":
            if self.warm and not self.adopted.is_set():
                self.take_identity(event)
            self.adopted.set()
        elif name == "shutdown":
            self.stop(str(event.get("reason", "shutdown")))
            if event.get("interrupt") and self.run_scope is not None:
                await self.interrupt_run()

    async def interrupt_run(self) -> None:
        """``roost attach --now``: the run is interrupted the way the agent CLI's own
        interrupt does it (the host's ``interrupt``); it then settles and hands back as
        any run does, and the worker lets go of the session."""
        interrupt = getattr(self.host, "interrupt", None)
        if not callable(interrupt):
            log.warning("this host cannot interrupt a run: the attach waits for it to settle")
            return
        log.info("interrupting the run: the user attaches now")
        try:
            with anyio.move_on_after(10):
                await interrupt()
        except Exception:  # the run then ends by itself, and the attach waits for it
            log.exception("the interrupt failed")

    def take_identity(self, event: dict[str, Any]) -> None:
        """``adopt`` for another job than the slot's (a wake): become that job (its id and
        token for the hello) and write to its log from now on. Its host notices the
        other session file when it opens, and switches its warm process to it."""
        job_id, token = event.get("job"), event.get("token")
        if not isinstance(job_id, str) or job_id == self.job_id or not isinstance(token, str):
            return
        slot_id, self.job_id, self.token = self.job_id, job_id, token
        new_log, slot_log = event.get("log"), event.get("slotLog")
        if isinstance(new_log, str):
            move_log(new_log, slot_log if isinstance(slot_log, str) else None)
        log.info("warm start: this warm worker (slot %s, its host already up) is now the worker of %s", slot_id, job_id)

    def stop(self, reason: str) -> None:
        self.shutdown_reason = reason
        self.shutdown.set()
        self.daemon_link.stop()
        self.queue.wake()
        if self.run_scope is not None and reason in ("stopped", "refused", "orphaned"):
            self.run_scope.cancel()

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        client = self.client
        if client is None:
            raise DaemonUnavailable("not connected to the daemon")
        return await client.call(op, **args)

    async def ack_sender(self) -> None:
        while not self.shutdown.is_set():
            await self.ack_wanted.wait()
            self.ack_wanted = anyio.Event()
            # Answered: an ack the daemon could not store goes again with the next.
            await self.daemon_link.ack(self.queue.watermark, answer=True)

    async def send_status(self) -> None:
        try:
            await self.call("job_status", **self.status_fields)
        except DaemonUnavailable:
            pass  # resent by resync() on reconnect

    # ------------------------------------------------------------------ services for the host

    async def send_progress(self, progress: dict[str, Any]) -> None:
        """Tell the daemon the run's last sign of work (no answer awaited; one that is
        lost is made good by the next)."""
        if self.client is None or (self.warm and not self.adopted.is_set()):
            return
        with contextlib.suppress(DaemonUnavailable):
            await self.client.notify("job_status", progress=progress)

    def take_steer(self) -> list[Item]:
        self.progress.note(BOUNDARY)
        steered = self.queue.take_steer()
        if not self.note_ids(steered):
            return []
        self.run_items.extend(steered)
        self.run_causes.extend(cause_of(item, joined=True) for item in steered)
        # A run that took in an item further down a chain is at that step of it now.
        self.run_hops = max([self.run_hops, *(item.hops for item in steered)])
        self.run_broadcast_chain = self.run_broadcast_chain or any(item.broadcast_chain for item in steered)
        return steered

    def note_ids(self, items: list[Item], *, give_back: bool = True) -> bool:
        """Record the message ids of ``items`` before the host gets them
        (:mod:`~roost_core.worker.idrecord`). When the record refuses them (a full disk),
        ``give_back`` puts them back in the queue for later and says False; else the
        ``OSError`` is raised (a run's prompt: the run goes as one whose file refused it)."""
        if self.id_record is None:
            return True
        try:
            self.id_record.note(items)
        except OSError as exc:
            if not give_back:
                raise
            log.warning("the message-id record refused seqs %s (%s): they are handed over later", [item.seq for item in items], exc)
            self.queue.give_back(items)
            return False
        return True

    def usage_total(self, tokens: int, cost: float) -> None:
        """The host's running total for this session (model calls so far, all workers):
        sent to the daemon, which sums a tree's budget from it."""
        usage = {"tokens": int(tokens), "cost": float(cost)}
        if usage != self.usage:
            self.progress.note(MODEL)
            self.usage = usage
            self.usage_wanted.set()

    async def usage_sender(self) -> None:
        while not self.shutdown.is_set():
            await self.usage_wanted.wait()
            self.usage_wanted = anyio.Event()
            usage = self.usage
            if usage is not None and usage != self.usage_sent and self.client is not None:
                try:
                    await self.call("job_status", usage=usage)
                    self.usage_sent = usage
                except (DaemonUnavailable, ProtocolError) as exc:
                    log.warning("usage not sent: %s", exc)

    def seen(self, seqs: list[int]) -> None:
        """The host's model had the items ``seqs`` in a model request: told to the daemon
        (op ``seen``), which moves their senders' receipts."""
        fresh = [seq for seq in seqs if seq not in self.seen_unsent]
        if fresh:
            self.progress.note(MODEL)
            # Bounded as one op takes them; a host tells each seq about once.
            self.seen_unsent = (self.seen_unsent + fresh)[-MAX_SEEN:]
            self.seen_wanted.set()

    async def seen_sender(self) -> None:
        while not self.shutdown.is_set():
            await self.seen_wanted.wait()
            self.seen_wanted = anyio.Event()
            seqs, self.seen_unsent = self.seen_unsent, []
            if not seqs:
                continue
            try:
                await self.call("seen", seqs=seqs)
            except DaemonUnavailable:
                # Told again once the link is back (``resync``).
                self.seen_unsent = (seqs + self.seen_unsent)[-MAX_SEEN:]
            except ProtocolError as exc:
                log.warning("seen %s not told: %s", seqs, exc)

    def delivered(self, item: Item) -> None:
        self.progress.note(ITEM)
        self.queue.mark_done(item.seq)
        self.ack_wanted.set()

    def unrecorded(self, items: list[Item]) -> None:
        """The host's agent died before writing ``items``: the queue keeps them for the
        next run (``ReplyQueue.keep``)."""
        kept = self.queue.keep(items)
        if kept:
            log.info("seqs %s were handed to the agent, which ended before writing them: they go in the next run", [item.seq for item in kept])

    def tool_names(self) -> list[str]:
        return [tool["name"] for tool in self.tools]

    async def call_tool(self, name: str, args: dict[str, Any]) -> tuple[bool, str]:
        """Run a roost tool through the daemon. The call carries a key of its own: when
        the connection dies before the answer, the worker asks again with the same key
        once it has a daemon again, and is answered with what the first call did (done
        once, never twice; see ``daemon.ledger``)."""
        chain = {"broadcastChain": True} if self.run_broadcast_chain else {}
        try:
            # No time limit of its own: it is asked again until the worker gives up on the daemon.
            result = await self.daemon_link.call("tool_call", {"name": name, "args": args, "key": new_key(), "hops": self.run_hops, **chain}, reask_seconds=None)
        except (ProtocolError, DaemonUnavailable) as exc:
            return False, f"error: {exc}"
        return bool(result.get("ok")), str(result.get("text", ""))

    async def dialog(self, question: str, options: Sequence[str] = ()) -> Item:
        self.queue.dialog_open = True
        try:
            await self.status(state="needs_input", question=question, dialog=True, dialogOptions=clean_options(options) or None)
            while True:
                answer = self.queue.take_reply()
                if answer is not None and not self.note_ids([answer]):
                    with anyio.move_on_after(WRITE_RETRY_FIRST):
                        await self.shutdown.wait()
                    continue
                if answer is not None:
                    self.run_items.append(answer)
                    break
                await self.queue.changed()
        except BaseException:
            # The dialog's host went away unanswered (its process died, the run ended):
            # the queue is not held for it, and the next status the worker sends (the
            # run's settle) says it is closed.
            self.queue.dialog_open = False
            self.status_fields.update(dialog=False, dialogOptions=None)
            raise
        self.queue.dialog_open = False
        await self.status(state="running", question=None, dialog=False, dialogOptions=None)
        return answer

    async def start_host_process(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> Any:
        return await self.processes.start_host(argv, env=env, cwd=cwd)

    async def run_command(self, argv: list[str], *, cwd: str | None = None) -> Any:
        return await self.processes.run_command(argv, cwd=cwd)

    async def host_pid_changed(self, pid: int | None) -> None:
        """The host's process started or ended: ``jobs`` shows its pid (so a user can
        find what to stop by hand)."""
        await self.status(hostPid=pid)

    async def status(self, *, wait: bool = True, **fields: Any) -> None:
        """Tell the daemon; ``wait=False`` only writes it (what the worker sends next is
        read after it: one connection, in order), so a run need not wait a round trip."""
        settled = fields.pop("settled", False)
        self.status_fields.update(fields)
        if self.warm and not self.adopted.is_set():
            return  # no job yet: the first hello's resync tells it
        extra = {"settled": True} if settled else {}
        try:
            if wait:
                await self.call("job_status", **self.status_fields, **extra)
            elif self.client is not None:
                await self.client.notify("job_status", **self.status_fields, **extra)
        except DaemonUnavailable:
            pass  # resent by resync() on reconnect

    # ------------------------------------------------------------------ main

    async def main(self) -> int:
        async with anyio.create_task_group() as tg:
            await tg.start(self.processes.run)
            tg.start_soon(self.link)
            tg.start_soon(self.ack_sender)
            tg.start_soon(self.usage_sender)
            tg.start_soon(self.seen_sender)
            tg.start_soon(self.progress.run)
            tg.start_soon(self.background.run)
            try:
                if self.warm and not await self.warm_up():
                    return self.exit_code
                if not await self.until_first_hello(HELLO_SECONDS):
                    return self.exit_code or 3
                assert self.hello is not None
                self.job = JobInfo.from_hello(self.hello["job"])
                if self.host is None:
                    self.host = self.build_host(self.job)
                in_transcript = await self.host.open(self.job, self)
                # The ids the session holds: those this worker's record gave the seqs its
                # host found there (never an id read out of a transcript's text).
                from roost_core.paths import resolve_paths

                self.id_record = IdRecord(resolve_paths().jobs_dir / f"{self.job.id}.ids")
                self.queue.start(in_transcript, self.id_record.ids_of(in_transcript))
                self.ack_wanted.set()
                await self.run_loop()
            finally:
                with anyio.CancelScope(shield=True):
                    if self.host is not None:
                        await self.host.close()
                    if self.id_record is not None:
                        self.id_record.close()
                    # Nothing the job started outlives it.
                    await self.processes.close()
                    await anyio.lowlevel.checkpoint()
                    # Let the last ack go out before the connection closes.
                    with anyio.move_on_after(2):
                        await self.daemon_link.ack(self.queue.watermark, answer=True)
                    if self.seen_unsent and self.client is not None:
                        try:
                            with anyio.move_on_after(2):
                                await self.call("seen", seqs=self.seen_unsent)
                        except (DaemonUnavailable, ProtocolError):
                            pass  # a receipt tells; it promises nothing
                    if self.usage is not None and self.usage != self.usage_sent and self.client is not None:
                        try:
                            with anyio.move_on_after(2):
                                await self.call("job_status", usage=self.usage)
                        except (DaemonUnavailable, ProtocolError):
                            pass
                tg.cancel_scope.cancel()
        return self.exit_code

    async def until_first_hello(self, timeout: float) -> bool:
        """Wait for the daemon to accept this worker. False when it will not: no answer
        in ``timeout``, or refused (the job has another worker, e.g. one a restarted
        daemon started because the daemon that started this one died before noting it;
        or the job is gone). A refused worker ends at once, with everything it started:
        it must not hold a host process while its job shows no worker."""
        with anyio.move_on_after(timeout):
            await first_of(self.first_hello, self.shutdown)
        return self.hello is not None

    async def warm_up(self) -> bool:
        """A warm worker: start the host for the job it will be (its pi comes up now, not
        when the job is spawned), say it is ready, and wait to be adopted. False when it
        ends unadopted."""
        with anyio.move_on_after(60):
            await first_of(self.warm_answered, self.shutdown)
        if self.warm_answer is None or self.shutdown.is_set():
            return False
        job = JobInfo.from_hello(self.warm_answer["job"])
        self.host = self.build_host(job)
        prestart = getattr(self.host, "prestart", None)
        if callable(prestart):
            await prestart(job, self)
        try:
            await self.call("warm_ready")
        except (DaemonUnavailable, ProtocolError) as exc:
            log.warning("warm_ready not sent: %s", exc)
            return False
        log.info("warm: waiting for a job")
        # Adopted (link then says the ordinary hello), or told to end.
        await first_of(self.first_hello, self.shutdown)
        return self.first_hello.is_set() and not self.shutdown.is_set()

    def plugin_manager(self) -> Any:
        """The worker's plugins (user config, ``ROOST_DISABLE_PLUGINS``), when first needed
        (to build the job's host): the fork server's prepared manager when it blocks the
        same names, else built here (~30-100 ms)."""
        if self.plugins is None:
            from roost_core.plugins import make_plugin_manager

            blocked = blocked_plugins(self.config)
            if self.prepared is not None and self.prepared.blocked == blocked:
                self.plugins = self.prepared.manager
            else:
                self.plugins = make_plugin_manager(disabled=blocked)
        return self.plugins

    def build_host(self, job: JobInfo) -> Any:
        """The job's host, from the hosts the worker's plugins register (roost's own are
        plugins too): a ``RuntimeError`` naming the host when none registers it here (its
        plugin blocked or uninstalled since the job was made)."""
        spec = registered_hosts(self.plugin_manager()).get(job.host)
        if spec is None:
            raise RuntimeError(f"no plugin registers host {job.host!r} here (blocked or not installed)")
        return spec.factory(job, self)

    async def run_loop(self) -> None:
        while not self.shutdown.is_set():
            if not self.queue.runnable():
                await self.queue.changed()
                continue
            items = self.queue.take_all()
            if not items:
                continue
            self.run_causes = [cause_of(item) for item in items]
            self.run_items = list(items)
            self.progress.new_run()
            # The chain this run continues: what it sends or spawns is one step further.
            trace = next((item.trace for item in items if item.trace), None)
            hops = max(item.hops for item in items)
            self.run_hops = hops
            self.run_broadcast_chain = any(item.broadcast_chain for item in items)
            # The causes go with "running": if this worker dies, the daemon can still
            # tell whether the run that died owes its parent a report.
            await self.status(
                state="running",
                question=None,
                error=None,
                status=None,
                trace=trace,
                hops=hops,
                causes=self.run_causes,
                broadcastChain=self.run_broadcast_chain,
                wait=False,
            )
            outcome = RunOutcome("aborted")
            unwritten: OSError | None = None
            # Where the host processes' stderr and failed exits stand as the run starts.
            stderr_point, failed_exits = self.processes.stderr.count(), self.processes.failed_exits
            with anyio.CancelScope() as scope:
                self.run_scope = scope
                try:
                    self.note_ids(items, give_back=False)
                    outcome = await self.host.run(items)
                except OSError as exc:
                    unwritten = exc
                    outcome = RunOutcome("failed", error=f"the session file could not be written: {exc}")
                except Exception as exc:  # a host bug fails the run, not the worker
                    log.exception("run failed")
                    outcome = RunOutcome("failed", error=f"{type(exc).__name__}: {exc}")
            self.run_scope = None
            if outcome.state == "aborted":
                return
            # A host process that died in the run: what it left is ended before the run
            # settles (nothing a run started outlives its end).
            await self.processes.settled()
            if outcome.state == "failed" and not outcome.explained and self.processes.failed_exits > failed_exits:
                host_name = self.job.host if self.job is not None else "the host"
                outcome = attrs.evolve(outcome, error=with_stderr(outcome.error, host_name, self.processes.stderr.since(stderr_point)))
            if unwritten is not None:
                if await self.after_unwritten_run(items, unwritten):
                    continue
            else:
                self.write_retry = 0.0
                if self.status_fields.get("writeFailing"):
                    await self.status(wait=False, writeFailing=False)
            outcome = self.classify(outcome)
            # A question or an error longer than the daemon takes (8,000 characters)
            # would refuse the handback and the settled status, and the run would end
            # as a crash: both are cut, as the result is.
            outcome = attrs.evolve(outcome, question=cut(outcome.question), error=cut(outcome.error))
            summary = first_line(outcome.final_text) or first_line(outcome.question or "") or None
            # What the run left running on purpose, told before the handback settles it:
            # the daemon must know before it could hibernate the job (one connection, in
            # order; no wait).
            await self.status(wait=False, **self.background.at_settle())
            # The handback settles the run on the daemon's side (state and report in one
            # op), so a worker that dies now leaves a run either reported or crashed.
            await self.handback(outcome)
            # The run's usage goes with its settle, so a tree's budget is up to date by the
            # time anyone sees this run as settled.
            usage: dict[str, Any] = {"usage": self.usage} if self.usage is not None else {}
            await self.status(
                state=outcome.state,
                question=outcome.question,
                error=outcome.error,
                summary=summary,
                settled=True,
                **usage,
            )
            if self.usage is not None:
                self.usage_sent = self.usage

    async def after_unwritten_run(self, items: list[Item], exc: OSError) -> bool:
        """A run stopped because its session file refused a write (a full disk, an I/O
        error). What it took but could not write goes back into the queue (nothing is
        acked that is not in the file), and the next run waits a moment. True when the
        run's own prompt went back: it did not happen, and is run again instead of
        settling; else it settles as failed (what it wrote stays)."""
        back = self.queue.give_back(self.run_items)
        self.write_retry = min(max(WRITE_RETRY_FIRST, self.write_retry * 2), WRITE_RETRY_MAX)
        log.warning(
            "the session file could not be written (%s): %d item(s) kept for the next run, seqs %s; trying again in %.1fs",
            exc, len(back), [item.seq for item in back], self.write_retry,
        )
        not_run = any(item.seq == items[0].seq for item in back)
        # What waits for this job is held until the disk takes it: the daemon says
        # ``not_stored`` to senders its full queue refuses meanwhile.
        if not_run:
            await self.status(status=f"session file not writable ({exc.strerror or exc}); trying again", writeFailing=True)
        else:
            await self.status(writeFailing=True)
        with anyio.move_on_after(self.write_retry):
            await self.shutdown.wait()
        return not_run

    def classify(self, outcome: RunOutcome) -> RunOutcome:
        """The settle plugin's word on how the run settled (done, needs input with its
        question, failed); the host's own outcome when no plugin answers or one fails."""
        from roost_core import policy
        from roost_core.records import RunCause, RunRecord

        assert self.job is not None
        run = RunRecord(
            causes=tuple(RunCause(c["seq"], c["kind"], c.get("sender"), bool(c.get("joined"))) for c in self.run_causes),
            state=outcome.state,
            result=outcome.final_text,
            question=outcome.question,
            error=outcome.error,
        )
        try:
            settled = policy.classify_settle(self.plugin_manager(), run, self.job.host)
        except Exception:  # a plugin bug must not cost the parent its report
            log.exception("classifying the settled run failed; keeping the host's state")
            return outcome
        question = settled.question[:REPORT_CHARS] if settled.question else None
        return attrs.evolve(outcome, state=settled.state, question=question, error=settled.error)

    async def handback(self, outcome: RunOutcome) -> None:
        """Tell the daemon how the run settled and what caused it; the handback plugin
        there decides whether the parent gets a report."""
        faults.point("worker.before_handback")
        args = {
            "result": outcome.final_text[:REPORT_CHARS],
            "state": outcome.state if outcome.state in ("done", "idle", "needs_input", "failed") else "done",
            "question": outcome.question,
            "error": outcome.error,
            "causes": self.run_causes,
            # The run's first seq names it, so the daemon drops a handback it already has.
            "run": self.run_causes[0]["seq"] if self.run_causes else 0,
        }
        while not self.shutdown.is_set():
            try:
                await self.call("handback", **args)
                return
            except ProtocolError as exc:
                log.warning("handback refused: %s", exc)
                return
            except DaemonUnavailable:
                # Lost with the daemon (sent or not): send it again once it is back.
                await anyio.sleep(0.05)


def move_log(new: str, old: str | None) -> None:
    """Write to ``new`` (the adopting job's log) from now on: what ``old`` (the warm
    slot's log) says so far is copied over first, and ``old`` removed."""
    try:
        fd = os.open(new, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as exc:
        log.warning("cannot open the job's log %s: %s", new, exc)
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        if old is not None:
            try:
                before = Path(old).read_bytes()
            except OSError:
                before = b""
            if before:
                write_all(fd, b"--- this worker's log while it waited as a warm slot ---\n" + before + b"--- end of the warm slot's log ---\n")
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        if old is not None:
            with contextlib.suppress(OSError):
                os.unlink(old)
    finally:
        os.close(fd)


def with_stderr(error: str | None, host: str, lines: list[str]) -> str | None:
    """A failed run's ``error``, with the last ``lines`` its host's CLI wrote on stderr
    before it exited (its own words on why: a flag it rejects, a start that failed)."""
    if not lines:
        return error
    return f"{error or f'{host} failed'} ({host} stderr: {' | '.join(lines)})"


def cut(text: str | None) -> str | None:
    """``text`` within :data:`REPORT_CHARS`, saying so when it was cut."""
    if text is None or len(text) <= REPORT_CHARS:
        return text
    return f"{text[:REPORT_CHARS]} … (cut: {len(text)} characters in all)"


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:SUMMARY_CHARS]
    return ""


def run(prepared: PreparedPlugins | None = None) -> int:
    """Run the worker of ``$ROOST_JOB``; ``prepared``: plugins a fork server built for it."""
    # Scrub the token first: nothing this process starts may inherit it.
    token = os.environ.pop("PI_JOB_TOKEN", None)
    job_id = os.environ.get("ROOST_JOB")
    socket_path = os.environ.get("ROOST_SOCKET")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(levelname)s %(message)s", stream=sys.stderr)
    if not token or not job_id or not socket_path:
        log.error("a worker needs PI_JOB_TOKEN, ROOST_JOB and ROOST_SOCKET")
        return 2
    # Read and dropped at once, so the host's processes start with exactly the
    # environment a cold start of this job gives them.
    warm = os.environ.pop("ROOST_WARM", None) == "1"
    cold = os.environ.pop("ROOST_COLD_START", None)
    if cold:
        log.info("cold start: %s", cold)
    worker = Worker(job_id, token, socket_path, prepared, warm=warm)
    return anyio.run(worker.main)
