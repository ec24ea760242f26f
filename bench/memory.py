"""Daemon memory per idle peer and per queued item (private memory, USS, of the daemon).

* per idle foreground peer: N no-session peers connected and registered, nothing sent;
* per job record: N ended job records loaded at start, against an empty daemon;
* per queued item: messages of 200 characters sent to stopped jobs (a stopped job keeps
  its queue and is not woken by messages), 20 per job (the agent-item cap);
* once per daemon: the daemon itself with nothing loaded, and its worker fork server (a
  process holding the worker's modules imported, forked for every worker).

Baselines, for scale: the bare anyio broker's memory per idle connection, and the size of
one item's journal record (the bytes that must be kept somewhere).
"""

from __future__ import annotations

import time

from bench.common import (
    BareServer,
    RoostDaemon,
    Row,
    fmt_bytes,
    item_record_size,
    message_text,
    raise_nofile,
    rss_bytes,
    write_job_records,
)
from bench.peers import RawConn, register_foreground

SETTLE = 0.5


def settled(pid: int, settle: float | None = None) -> int:
    time.sleep(SETTLE if settle is None else settle)
    return rss_bytes(pid)


def fork_server_bytes(daemon_pid: int, timeout: float = 10.0) -> float:
    """The private memory of the daemon's fork server (NaN if it has none)."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in psutil.Process(daemon_pid).children():
            if "roost_core.worker.forkserver" in " ".join(child.cmdline()):
                return float(settled(child.pid, 0.0))
        time.sleep(0.05)
    return float("nan")


def measure(peers: int, jobs: int, item_jobs: int, items_per_job: int = 20, settle: float = SETTLE) -> dict[str, float]:
    raise_nofile()
    out: dict[str, float] = {}
    # Empty daemon vs one that loaded `jobs` ended job records.
    with RoostDaemon(label="mem0") as empty:
        empty.start()
        base_empty = settled(empty.pid, settle)
        out["empty_daemon"] = base_empty
        out["fork_server"] = fork_server_bytes(empty.pid)
    with RoostDaemon(label="memj") as loaded:
        write_job_records(loaded.paths, jobs)
        loaded.start()
        out["per_job_record"] = (settled(loaded.pid, settle) - base_empty) / jobs

    with RoostDaemon(label="mem") as daemon:
        stopped = [job.id for job in write_job_records(daemon.paths, item_jobs, state="stopped")]
        daemon.start()
        m0 = settled(daemon.pid, settle)
        conns = register_foreground(daemon.socket, peers)
        m1 = settled(daemon.pid, settle)
        out["per_idle_peer"] = (m1 - m0) / peers
        sender = conns[0]
        body = message_text(200)
        count = 0
        for job_id in stopped:
            for _ in range(items_per_job):
                result = sender.call("send", to=job_id, message=body)
                assert result["result"] == "stopped", result
                count += 1
        m2 = settled(daemon.pid, settle)
        out["per_item"] = (m2 - m1) / count
        out["items"] = count
        for conn in conns:
            conn.close()

    out["item_record_bytes"] = item_record_size(message_text(600), body)
    with BareServer(label="mem") as bare:
        b0 = settled(bare.pid, settle)
        bare_conns = []
        for n in range(peers):
            conn = RawConn(bare.socket)
            conn.write("hello", name=f"c{n}")
            bare_conns.append(conn)
        for conn in bare_conns:
            conn.read()
        out["bare_per_conn"] = (settled(bare.pid, settle) - b0) / peers
        for conn in bare_conns:
            conn.close()
    return out


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    peers = 20 if smoke else 1000 if quick else 3000
    jobs = 20 if smoke else 1000 if quick else 3000
    item_jobs = 1 if smoke else 50 if quick else 150
    m = measure(peers, jobs, item_jobs, settle=0.05 if smoke else SETTLE)
    return [
        Row("memory", f"per idle foreground peer (connected; {peers:,} peers)", fmt_bytes(m["per_idle_peer"]),
            fmt_bytes(m["bare_per_conn"]) + " (bare conn)", m["per_idle_peer"] / m["bare_per_conn"], raw=m),
        Row("memory", f"per ended job record ({jobs:,} records)", fmt_bytes(m["per_job_record"]), raw=m),
        Row("memory", f"per queued item (200-char message, {int(m['items']):,} items)", fmt_bytes(m["per_item"]),
            fmt_bytes(m["item_record_bytes"]) + " (its record)", m["per_item"] / m["item_record_bytes"], raw=m),
        Row("memory", "once per daemon: the daemon with nothing loaded / its worker fork server",
            f"{fmt_bytes(m['empty_daemon'])} / {fmt_bytes(m['fork_server'])}", raw=m),
    ]
