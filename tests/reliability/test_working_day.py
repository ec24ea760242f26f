"""A working day: mixed traffic for ``ROOST_SOAK_MINUTES`` (default 30) with the daemon
and workers restarted every few minutes, then the load test's accounting, and the daemon's
resident memory and open descriptors sampled every minute.

Runs only with ``--soak`` / ``ROOST_SOAK=1`` (``scripts/soak.sh`` runs it alone); the
default run deselects it.

Traffic: four foreground peers, each the root of a tree, send messages at a steady pace
(about ten a second in all) to their children, to other trees' jobs and to each other.
A child's task run sends to its siblings and parent; every later run (a message, a user
reply) answers its parent with a message. Every minute one parent spawns a new child (its
task settles into a report); every 20 s the user replies to a child (another report);
idle children are reaped after 3 s and started again by the next message. Every three
minutes, in turn: the daemon restarted (SIGTERM), the daemon killed (-9), a worker
killed, the daemon killed and a worker killed.

Then: every message a sender was told was accepted arrived exactly once and in order,
nothing refused arrived, no agent item is user input, no job is stuck, every spawned child
reported; and after the warm-up (the first sixth, at least one minute) the daemon's RSS
stayed within :data:`RSS_BOUND` of the warm-up's highest sample, and its descriptors
other than connections within :data:`FD_BOUND` of the warm-up's highest.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import anyio
import psutil
import pytest
from conftest import wait_until
from fg import in_thread, run_async
from reliability.kit import (
    check_delivery,
    received_messages,
    reports_in,
    stuck_jobs,
    user_texts,
)
from reliability.test_load import FgPeer, Load

from roost_core.client import DaemonUnavailable
from roost_core.protocol import ProtocolError

MINUTES = float(os.environ.get("ROOST_SOAK_MINUTES", "30"))
TREES = 4
FIRST_CHILDREN = 4
#: Seconds between two sends of one lane (each peer has two lanes).
PACE = 0.8
# A working day's rhythm; a shorter run (ROOST_SOAK_MINUTES) keeps its proportions.
SAMPLE_EVERY = min(60.0, MINUTES * 6)
CHAOS_EVERY = min(180.0, MINUTES * 15)
SPAWN_EVERY = min(60.0, MINUTES * 6)
REPLY_EVERY = min(20.0, MINUTES * 2)
#: Growth allowed after the warm-up: resident memory, and descriptors that are not connections.
RSS_BOUND = 32 * 1024 * 1024
FD_BOUND = 8

pytestmark = [pytest.mark.soak_only, pytest.mark.timeout(int(MINUTES * 60 + 900))]


def child_scenario(siblings: list[str]) -> dict[str, Any]:
    steps = [{"send": {"to": to, "message": "{job}:task:" + str(i)}} for i, to in enumerate(siblings + ["{parent}"] * 2)]
    return {
        "run": [{"match": "^task", "steps": [*steps, {"say": "task done"}]}],
        # Every later run answers the parent (a foreground peer) with one message.
        "default": {"steps": [{"wait": 0.3}, {"send": {"to": "{parent}", "message": "re {job}: {input}"}}, {"say": "ok"}]},
    }


class WorkingDay(Load):
    trees = TREES  # Load.main enters this many foreground peers

    def __init__(self, daemon, tmp_path, rng: random.Random, minutes: float) -> None:
        super().__init__(daemon, tmp_path, target=10**9, rng=rng, soak=True)
        self.seconds = minutes * 60
        self.end = 0.0
        self.samples: list[dict[str, Any]] = []
        self.spawned: dict[str, str] = {}  # child id -> parent peer id
        self.user_inputs: set[str] = set()
        self.replies = 0
        self.chaos_done: list[str] = []

    # ---------------------------------------------------------------- traffic

    async def lane(self, peer: FgPeer, receivers: list[str], tag: str) -> None:
        n = 0
        while time.monotonic() < self.end:
            to = self.rng.choice(receivers)
            self.sent += 1
            await self.send(peer, to, f"{peer.peer_id}:{tag}:{n}")
            n += 1
            await anyio.sleep(PACE * (0.5 + self.rng.random()))

    async def spawn_child(self, peer: FgPeer, name: str) -> str | None:
        task = f"task of {name}"
        for _ in range(50):
            try:
                siblings = [await in_thread(self.daemon_name, kid) for kid in self.children.get(peer.peer_id, [])[:3]]
                result = await peer.call("spawn", task=task, name=name, scenario=child_scenario(siblings))
            except (DaemonUnavailable, ProtocolError, OSError):
                await anyio.sleep(0.2)  # the daemon is restarting: the spawn is made again
                continue
            self.user_inputs.add(task)
            self.children.setdefault(peer.peer_id, []).append(result["id"])
            self.spawned[result["id"]] = peer.peer_id
            return result["id"]
        return None

    def daemon_name(self, job: str) -> str:
        return next((row["name"] for row in self.daemon.call("jobs")["jobs"] if row["id"] == job), job)

    async def spawner(self) -> None:
        n = 0
        while time.monotonic() + SPAWN_EVERY < self.end:
            await anyio.sleep(SPAWN_EVERY)
            peer = self.peers[n % len(self.peers)]
            await self.spawn_child(peer, f"t{n % len(self.peers)}-late{n}")
            n += 1

    async def user(self) -> None:
        n = 0
        while time.monotonic() + REPLY_EVERY < self.end:
            await anyio.sleep(REPLY_EVERY)
            kids = [kid for kids in self.children.values() for kid in kids]
            kid = self.rng.choice(kids)
            text = f"user reply {n}"
            try:
                await in_thread(self.daemon.call, "reply", job=kid, text=text)
                self.user_inputs.add(text)
                self.replies += 1
            except (DaemonUnavailable, ProtocolError, OSError):
                # Refused or lost with a restarting daemon: it may or may not arrive.
                self.user_inputs.add(text)
            n += 1

    def chaos_step(self, action: str) -> None:
        if action == "kill-worker":
            # Right after a daemon restart the workers are still reconnecting: wait for one
            # to kill (a worker kill that found none would quietly be no kill at all).
            wait_until(lambda: self.live_workers() or None, timeout=60, interval=0.1, what="a connected worker to kill")
        super().chaos_step(action)

    async def chaos(self) -> None:
        actions = ["restart", "kill9", "kill-worker", "kill9+worker"]
        n = 0
        while time.monotonic() + CHAOS_EVERY < self.end:
            await anyio.sleep(CHAOS_EVERY)
            action = actions[n % len(actions)]
            for step in action.split("+"):
                await in_thread(self.chaos_step, "kill-worker" if step == "worker" else step)
            self.chaos_done.append(action)
            n += 1

    async def sampler(self) -> None:
        began = time.monotonic()
        while True:
            await in_thread(self.sample, time.monotonic() - began)
            if time.monotonic() >= self.end:
                return
            await anyio.sleep(min(SAMPLE_EVERY, max(self.end - time.monotonic(), 0.1)))

    def sample(self, at: float) -> None:
        for _ in range(100):
            try:
                status = self.daemon.call("daemon_status")
                process = psutil.Process(status["pid"])
                self.samples.append(
                    {
                        "minute": round(at / 60, 1),
                        "pid": status["pid"],
                        "rss": process.memory_info().rss,
                        "fds": process.num_fds(),
                        "connections": status["connections"],
                        "jobs": status["jobs"],
                        "live_workers": status["live_workers"],
                        "accepted": self.accepted,
                    }
                )
                return
            except (DaemonUnavailable, ProtocolError, OSError, psutil.Error):
                time.sleep(0.1)  # the daemon is being restarted: sample the next one

    async def traffic(self) -> None:
        self.end = time.monotonic() + self.seconds
        for tree, peer in enumerate(self.peers):
            await peer.ensure_registered()
            for index in range(FIRST_CHILDREN):
                await self.spawn_child(peer, f"t{tree}-k{index}")
        everyone = [kid for kids in self.children.values() for kid in kids]
        fg_ids = [peer.peer_id for peer in self.peers]
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.sampler)
            tg.start_soon(self.chaos)
            tg.start_soon(self.spawner)
            tg.start_soon(self.user)
            tg.start_soon(self.progress)
            async with anyio.create_task_group() as senders:
                for peer in self.peers:
                    own = self.children[peer.peer_id]
                    others = [kid for kid in everyone if kid not in own] + [fid for fid in fg_ids if fid != peer.peer_id]
                    senders.start_soon(self.lane, peer, own, "own")
                    senders.start_soon(self.lane, peer, others, "out")
            await in_thread(self.wait_quiet)
            self.done = True
            tg.cancel_scope.cancel()

    # ---------------------------------------------------------------- the verdict

    def day_verdict(self) -> dict[str, Any]:
        # A spawn whose answer was lost with a restarting daemon may have made a child:
        # every child of the foreground peers is accounted, known to the test or not.
        fg_ids = {peer.peer_id for peer in self.peers}
        for row in self.daemon.call("jobs")["jobs"]:
            parent = row.get("parentPeer")
            if parent in fg_ids and row["id"] not in self.children[parent]:
                self.children[parent].append(row["id"])
        job_promised, job_unknown = self.job_ledger()
        files = self.transcripts()
        received = {owner: received_messages(entries) for owner, entries in files.items()}
        user_lines = [line for entries in files.values() for line in user_texts(entries)]
        reports: dict[str, list[dict[str, Any]]] = {}
        for peer in self.peers:
            for report in reports_in(files[peer.peer_id]):
                reports.setdefault(report["from"], []).append(report)
        rows = self.daemon.call("jobs")["jobs"]
        return {
            "verdict": check_delivery(self.ledger, received),
            "job_promised": job_promised,
            "job_unknown": job_unknown,
            "user_forged": [line for line in user_lines if line not in self.user_inputs],
            "stuck": stuck_jobs(rows),
            "unreported": [kid for kid in self.spawned if not reports.get(kid)],
            "reports": sum(len(v) for v in reports.values()),
        }


def test_a_working_day(daemon_factory, write_config, tmp_path, record):
    seed = int(os.environ.get("ROOST_LOAD_SEED", "20261203"))
    write_config(
        {
            "agentExternalMessages": True,
            "agentMessagesPerMinute": 1_000_000,
            "agentMaxHops": 1000,
            "agentMaxChildren": 64,
            "agentMaxPerTree": 64,
            "agentMaxSpawned": 256,
            "agentSpawnsPerMinute": 1000,
            "reapAfterSeconds": 3.0,
        }
    )
    daemon = daemon_factory().start()
    day = WorkingDay(daemon, tmp_path, random.Random(seed), MINUTES)
    began = time.monotonic()
    run_async(day.main)
    elapsed = time.monotonic() - began
    outcome = day.day_verdict()
    verdict = outcome["verdict"]
    warm_up = max(1.0, MINUTES / 6)
    early = [s for s in day.samples if s["minute"] <= warm_up]
    late = [s for s in day.samples if s["minute"] > warm_up]
    rss_base = max(s["rss"] for s in early)
    fd_base = max(s["fds"] - s["connections"] for s in early)
    rss_peak = max((s["rss"] for s in late), default=rss_base)
    fd_peak = max((s["fds"] - s["connections"] for s in late), default=fd_base)
    table = "; ".join(
        f"{s['minute']:.0f}m {s['rss'] / 2**20:.1f} MiB {s['fds']} fds ({s['connections']} conns, {s['live_workers']} workers, {s['jobs']} jobs, {s['accepted']} msgs)"
        for s in day.samples
    )
    summary = (
        f"{elapsed / 60:.1f} min; {verdict.summary()}; jobs told {outcome['job_promised']} accepted; {outcome['reports']} reports, "
        f"{len(day.spawned)} children spawned, unreported {len(outcome['unreported'])}; {day.replies} user replies; "
        f"{day.queue_full} queue_full retries; {day.restarts} daemon restarts, {sum(day.kills.values())} worker kills "
        f"({', '.join(day.chaos_done)}); {day.internal} internal errors; RSS after warm-up {rss_base / 2**20:.1f} -> peak "
        f"{rss_peak / 2**20:.1f} MiB (bound +{RSS_BOUND // 2**20}); fds besides connections {fd_base} -> peak {fd_peak} (bound +{FD_BOUND})"
    )
    record(
        "working day",
        f"{MINUTES:.0f} minutes of mixed traffic with restarts",
        runs=1,
        messages=verdict.promised,
        cases=len(day.samples),
        result=summary,
        samples=day.samples,
        chaos=day.chaos_log,
        seed=seed,
    )
    print(summary)
    print(table)
    print("\n".join(day.chaos_log))
    assert verdict.ok, verdict.explain()
    assert outcome["user_forged"] == [], outcome["user_forged"][:5]
    assert outcome["stuck"] == [], outcome["stuck"]
    assert outcome["unreported"] == [], outcome["unreported"]
    assert rss_peak - rss_base < RSS_BOUND, summary
    assert fd_peak - fd_base <= FD_BOUND, summary
    assert len(day.samples) >= MINUTES * 60 / SAMPLE_EVERY
