"""Ops on the daemon itself: its status, its plugin set, its stop (with or without its
workers), and the test clock."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import anyio

from roost_core.config import Config
from roost_core.daemon.accept import Refuser
from roost_core.daemon.connection import Connection
from roost_core.daemon.liveconfig import LiveConfig
from roost_core.daemon.persistence import Persistence
from roost_core.daemon.registry import Registry
from roost_core.daemon.tasks import Clock
from roost_core.daemon.workers import MONITOR_INTERVAL, STOP_GRACE_SECONDS, Workers
from roost_core.paths import Paths
from roost_core.protocol import BAD_CONFIG, ProtocolError

if TYPE_CHECKING:
    from roost_core.daemon.ops_jobs import JobOps

log = logging.getLogger("roost.daemon")


class DaemonOps:
    """``daemon_status``, ``plugins``, ``daemon_stop`` and ``test_clock``. ``stopping`` is
    the event the server waits on; ``connections`` the daemon's open ones (read for the
    status)."""

    def __init__(
        self,
        paths: Paths,
        config: Config,
        pm: Any,
        *,
        registry: Registry,
        persistence: Persistence,
        workers: Workers,
        job_ops: JobOps,
        connections: set[Connection],
        refuser: Refuser,
        stopping: anyio.Event,
        clock: Clock,
        live_config: LiveConfig,
    ) -> None:
        self.paths = paths
        self.config = config
        self.pm = pm
        self.jobs = registry.jobs
        self.foreground = registry.foreground
        self.persistence = persistence
        self.workers = workers
        self.job_ops = job_ops
        self.connections = connections
        self.refuser = refuser
        self.stopping = stopping
        self.clock = clock
        self.started = time.time()
        #: The user config in force and its file.
        self.live_config = live_config

    async def op_daemon_status(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        journal = self.persistence.journal
        return {
            "pid": os.getpid(),
            "loop": loop_name(),
            "uptime": round(time.time() - self.started, 3),
            "socket": str(self.paths.socket),
            "home": str(self.paths.home),
            "jobs": len(self.jobs),
            "live_workers": sum(1 for job in self.jobs.values() if job.worker_pid is not None),
            "foreground": sum(1 for peer in self.foreground.values() if peer.connected),
            "pool": self.workers.pool.status(),
            "connections": len(self.connections),
            "refused_connections": self.refuser.refused,
            "unsent": sum(conn.unsent for conn in self.connections),
            "journal": {
                "commits": journal.commits if journal else 0,
                "records": journal.records if journal else 0,
            },
            "config": self.live_config.status(),
        }

    async def op_daemon_reload(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Read the user config again (the daemon does by itself when the file changes:
        this says how it went). ``bad_config`` when the file is refused: the config read
        before stays in force."""
        status = self.live_config.status()
        if status["refused"]:
            raise ProtocolError(BAD_CONFIG, f"{status['refused']} (the config read before stays in force)")
        return status

    async def op_plugins(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """The plugin set this daemon runs (``roost plugins``): fixed at its start."""
        from roost_core.plugins import plugin_notes, plugin_set

        shown = plugin_set(self.pm)
        return {
            "plugins": shown["plugins"],
            "blocked": shown["blocked"],
            "unknown_blocked": shown["unknown_blocked"],
            "notes": plugin_notes(self.pm, self.config, self.paths.config_file),
            "pid": os.getpid(),
        }

    async def op_daemon_stop(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Stop the daemon. Workers keep running (they wait for the next daemon, up to
        ``ROOST_WORKER_ORPHAN_SECONDS``) unless ``jobs`` is true: then every worker, and
        everything it started, is ended first (:meth:`end_all_workers`)."""
        result: dict[str, Any] = {"stopping": True}
        if args.get("jobs"):
            result.update(await self.end_all_workers(conn))
        self.stopping.set()
        return result

    async def end_all_workers(self, conn: Connection) -> dict[str, Any]:
        """End every job's worker and warm worker before the daemon stops, and start none
        again: a running job is stopped as ``stop`` does (its run is cut short; its
        parent hears it), a settled one is reaped (its state kept: the next item wakes it
        from its session file, under the next daemon). Waits until they are gone, each
        killed with what it started if it outstays :data:`STOP_GRACE_SECONDS`. Returns
        the ids stopped and reaped, and the workers still alive (none, normally)."""
        workers = self.workers
        workers.ending_all = True
        stopped, reaped = [], []
        for job in list(self.jobs.values()):
            if job.worker_pid is None:
                continue
            if job.state == "running":
                await self.job_ops.op_stop(conn, {"job": job.id})
                stopped.append(job.id)
                continue
            job.reaping = True
            workers.shut_down(job, "daemon stopped")
            reaped.append(job.id)
        for slot in list(workers.pool.slots.values()):
            workers.end_slot(slot)
        # The monitor notices each exit (and kills an outstaying worker at its deadline).
        with anyio.move_on_after(2 * STOP_GRACE_SECONDS + 2):
            while any(job.worker_pid is not None for job in self.jobs.values()) or workers.ending_slots:  # noqa: ASYNC110 - the monitor polls exits; no event to wait on
                await anyio.sleep(MONITOR_INTERVAL)
        left = sorted(job.id for job in self.jobs.values() if job.worker_pid is not None)
        if left:
            log.warning("daemon_stop: the workers of %s did not end", ", ".join(left))
        return {"stoppedJobs": stopped, "reapedJobs": reaped, "liveWorkers": left}

    async def op_test_clock(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Stop the daemon's clock (at the first call) and move it forward by ``advance``
        seconds — only with ROOST_TEST_HOOKS=1."""
        if os.environ.get("ROOST_TEST_HOOKS") != "1":
            raise ProtocolError("unknown_op", "unknown op 'test_clock'")
        return {"clock": self.clock.advance(args["advance"])}


def loop_name() -> str:
    """The event loop the daemon runs on: ``uvloop`` or ``asyncio`` (see
    ``daemon.loop_options``)."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]
