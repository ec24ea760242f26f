"""Sustained throughput: 16 sender/receiver pairs, each sender keeping a few requests in
flight, for a fixed window after a warm-up.

What "durable mailbox on" means here: a message is journaled only when its receiver has
a mailbox, i.e. is a job (a foreground receiver has none: it is pushed to, and told again
on reconnect, but nothing is written). So the receivers are **job records whose worker is
the bench's receiver process**: the job records are written before the daemon starts,
naming the receiver process as the worker (pid and create time), and that process says
``worker_hello`` with the job's token, exactly as a worker that outlived a daemon restart
does. The daemon then runs its real durable path for every message (queue item, push to
the worker before the fsync, journal group commit, answer ``delivered`` once durable) and
for every ack (journal record). What it does not run is an agent host writing a
transcript per item, which is the worker's cost, not the daemon's. Senders are no-session
foreground peers (``agentExternalMessages`` on, addressed by exact id).

The receiver acks like ``Worker.ack_sender``: one cumulative ``ack`` per wake-up, waiting
for its answer. Senders keep ``WINDOW`` requests in flight (a job's queue holds at most 20
agent items, so the window stays well below that); a ``queue_full`` answer is retried
after 1 ms and counted.

Baselines, same run:

* durable: the bare anyio forwarder with a group-commit journal (:mod:`bench.bare`): the
  same client processes, the same 16 × 4 requests in flight, each ``send`` and ``ack``
  appended to one log (one write+fsync in flight, in a thread; appends arriving meanwhile
  join the next) and answered once durable, from the commit, so a connection's next
  requests go on meanwhile; its receivers ack cumulatively and wait, as roost's workers.
  This is the physical limit of *durable messaging* between these processes: the disk's
  group commit plus the socket hops every message needs anyway;
* non-durable (``ROOST_DURABLE=0``: the journal is written but never fsynced): the bare
  anyio forwarder between the same client processes, no journal;
* shown for reference: bare append+fsync group commit alone, in one process with no
  socket at all (:func:`bench.bare.commit_bench`), with as many closed-loop appenders as
  roost has requests in flight (pairs × window) and records of the size of roost's item
  record — what the disk can take, far beyond what any broker between these processes
  can feed it (the bare forwarder *without* a disk reaches about a quarter of it); and
  roost foreground → foreground (no mailbox) against the bare forwarder.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bench.common import (
    PYTHON,
    REPO,
    Agent,
    BareServer,
    RoostDaemon,
    Row,
    bench_env,
    busiest_thread,
    fmt_rate,
    median,
    ratio_of,
    thread_schedstats,
    write_job_records,
)

PAIRS = 16
WINDOW = 4
PROCESSES = 4


def start_server(system: str, *, durable: bool, label: str, rows: int = 0) -> Any:
    """A baseline broker: "bare" (anyio, :mod:`bench.bare`), "lean" or "lean-uvloop"
    (:mod:`bench.lean`)."""
    if system == "bare":
        return BareServer(durable=durable, rows=rows, label=label)
    return BareServer(durable=durable, rows=rows, label=label, module="bench.lean", uvloop=system == "lean-uvloop")


def pairs_run(system: str, *, receivers: str, durable: bool, seconds: float, warmup: float, pairs: int = PAIRS,
              window: int = WINDOW, processes: int = PROCESSES, clients: str = "anyio",
              count: int | None = None) -> dict[str, Any]:
    """Messages/s over the window, with ``receivers`` "job" or "fg" (roost), "fg" or
    "bare-job" (a baseline broker), on ``clients`` "anyio" (roost's ``AsyncClient``, or
    the bare one on a baseline) or "lean" (:mod:`bench.leanclient`). Also the server's and
    the client processes' CPU time per message over the window.

    With ``count`` (the smoke run), each client process sends that many messages instead
    and every one counts, over the time they took: a time window on a loaded machine may
    close before a late process sent anything, and the smoke run checks the harness, not
    a figure."""
    processes = min(processes, pairs)
    agents = [Agent("lean" if clients == "lean" else "pairs", {}) for _ in range(processes)]
    server: Any = None
    try:
        hellos = [agent.hear() for agent in agents]
        # Pair j: sender in process j % P, receiver in process (j + 1) % P.
        owner_of = [(j + 1) % processes for j in range(pairs)]
        if system == "roost":
            server = RoostDaemon(durable=durable, label="tput")
            specs: list[dict[str, Any]] = [{"kind": "fg"}] * pairs
            if receivers == "job":
                # One idle job record per receiver, its worker being the receiver's process.
                jobs = write_job_records(server.paths, pairs, state="idle",
                                         workers=[(hellos[p]["pid"], hellos[p]["create_time"]) for p in owner_of])
                specs = [{"kind": "job", "job": job.id, "token": job.token} for job in jobs]
            server.start()
        else:
            server = start_server(system, durable=durable, label="tput")
            # "bare-job": a bare receiver that acks as a job's worker does (cumulative, waiting).
            specs = [{"kind": "fg", "ack": "cumulative" if receivers == "bare-job" else "each"}] * pairs
        receiver_ids: dict[int, str] = {}
        for p, agent in enumerate(agents):
            mine = [j for j in range(pairs) if owner_of[j] == p]
            agent.tell({"cmd": "connect", "system": system, "socket": server.socket, "receivers": [specs[j] for j in mine],
                        "senders": sum(1 for j in range(pairs) if j % processes == p), "tag": f"{p}x"})
            for j, rid in zip(mine, agent.hear()["receivers"], strict=False):
                receiver_ids[j] = rid
        now = time.perf_counter()
        t_begin = now + 0.2
        t_start, t_end = t_begin + warmup, t_begin + warmup + seconds
        for p, agent in enumerate(agents):
            targets = [receiver_ids[j] for j in range(pairs) if j % processes == p]
            run = {"cmd": "run", "targets": targets, "window": window, "t_begin": t_begin}
            run.update({"count": count} if count is not None else {"t_start": t_start, "t_end": t_end})
            agent.tell(run)
        # The server's CPU time over the window: a figure less shaken by other load.
        import psutil

        server_process = psutil.Process(server.pid)
        client_processes = [psutil.Process(agent.pid) for agent in agents]
        if count is not None:
            t_start = t_begin
        time.sleep(max(0.0, t_start - time.perf_counter()))
        cpu0 = sum(server_process.cpu_times()[:2])
        sched0 = thread_schedstats(server.pid)
        io0 = server_process.io_counters()
        client0 = sum(sum(p.cpu_times()[:2]) for p in client_processes)
        if count is None:
            time.sleep(max(0.0, t_end - time.perf_counter()))
        else:
            sent = [agent.hear(timeout=120) for agent in agents]
            seconds = time.perf_counter() - t_start
        cpu1 = sum(server_process.cpu_times()[:2])
        sched1 = thread_schedstats(server.pid)
        io1 = server_process.io_counters()
        client1 = sum(sum(p.cpu_times()[:2]) for p in client_processes)
        if count is None:
            sent = [agent.hear(timeout=120) for agent in agents]
        for agent in agents:
            agent.tell({"cmd": "finish"})
        seen = [agent.hear() for agent in agents]
    finally:
        for agent in agents:
            agent.close()
        if server is not None:
            server.close()
    errors: dict[str, int] = {}
    for s in sent:
        for code, n in s["errors"].items():
            errors[code] = errors.get(code, 0) + n
    counted = sum(s["in_window"] for s in sent)
    return {
        "rate": counted / seconds,
        "cpu_per_msg": (cpu1 - cpu0) / counted if counted else float("nan"),
        # Every client process together: a message's sender and receiver (and its ack).
        "client_cpu_per_msg": (client1 - client0) / counted if counted else float("nan"),
        # The server's read- and write-type syscalls (its journal's included) per message.
        "reads_per_msg": (io1.read_count - io0.read_count) / counted if counted else float("nan"),
        "writes_per_msg": (io1.write_count - io0.write_count) / counted if counted else float("nan"),
        # The server's busiest thread (its loop): the share of the window it ran, and
        # waited for a core (None where the kernel keeps no schedstat).
        "loop": busiest_thread(sched0, sched1, seconds),
        "retries": sum(s.get("retries", 0) for s in sent),
        "sent_total": sum(s["sent"] for s in sent),
        "delivered_rate": sum(s["in_window"] for s in seen) / seconds,
        "errors": errors,
    }


def commit_baseline(appenders: int, seconds: float, warmup: float = 0.3) -> dict[str, Any]:
    import subprocess
    import tempfile

    from bench.common import item_record_size, message_text
    # A record as large as roost's journal item for the same message.
    size = item_record_size(message_text(600), message_text(230))
    with tempfile.TemporaryDirectory(prefix="rb-commit-") as folder:
        out = subprocess.run(
            [PYTHON, "-m", "bench.bare", "commit", "--path", f"{folder}/log", "--appenders", str(appenders),
             "--seconds", str(seconds), "--size", str(size), "--warmup", str(warmup)],
            capture_output=True, text=True, cwd=str(REPO), env=bench_env(), check=True,
        )
    return json.loads(out.stdout)


def met_at_least(ratio: float | None, target: float) -> bool | None:
    return None if ratio is None else ratio >= target


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    seconds = 0.15 if smoke else 1.0 if quick else 3.0
    warmup = 0.1 if smoke else 0.3 if quick else 0.5
    reps = 1 if smoke or quick else 3
    pairs = 2 if smoke else PAIRS
    kw = {"seconds": seconds, "warmup": warmup, "pairs": pairs, "processes": 1 if smoke else PROCESSES,
          "count": 40 if smoke else None}
    keys = ("commit", "roost_d", "bare_d", "bare_fwd", "roost_nd", "roost_fg")
    res: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    for _ in range(reps):
        # Alternate roost and its baselines, so both see the same background load.
        res["roost_d"].append(pairs_run("roost", receivers="job", durable=True, **kw))
        res["bare_d"].append(pairs_run("bare", receivers="bare-job", durable=True, **kw))
        res["roost_nd"].append(pairs_run("roost", receivers="job", durable=False, **kw))
        res["bare_fwd"].append(pairs_run("bare", receivers="fg", durable=False, **kw))
        if not smoke:
            res["commit"].append(commit_baseline(pairs * WINDOW, seconds, warmup))
            res["roost_fg"].append(pairs_run("roost", receivers="fg", durable=True, **kw))

    def med(key: str, field: str = "rate") -> float:
        return median([r[field] for r in res[key]])

    def cpu(key: str, field: str = "cpu_per_msg") -> str:
        return f"{med(key, field) * 1e6:.0f} µs"

    label = f"{pairs} pairs × {WINDOW} in flight, {seconds:g} s × {reps}"
    roost_d, bare_d = med("roost_d"), med("bare_d")
    roost_nd, bare_fwd = med("roost_nd"), med("bare_fwd")
    rows = [
        Row("throughput", f"durable msgs/s, anyio clients, vs the bare anyio forwarder + group-commit journal ({label}; "
            f"daemon CPU {cpu('roost_d')}/msg, its clients {cpu('roost_d', 'client_cpu_per_msg')}/msg; bare broker "
            f"{cpu('bare_d')}/msg, its clients {cpu('bare_d', 'client_cpu_per_msg')}/msg)", fmt_rate(roost_d), fmt_rate(bare_d),
            ratio_of(roost_d, bare_d), "≥ 0.50x", met_at_least(ratio_of(roost_d, bare_d), 0.5), raw={"roost": res["roost_d"], "bare": res["bare_d"]}),
        Row("throughput", f"non-durable msgs/s, anyio clients, vs the bare anyio forwarder ({label}; daemon CPU "
            f"{cpu('roost_nd')}/msg, its clients {cpu('roost_nd', 'client_cpu_per_msg')}/msg; bare broker "
            f"{cpu('bare_fwd')}/msg)", fmt_rate(roost_nd), fmt_rate(bare_fwd),
            ratio_of(roost_nd, bare_fwd), "≥ 0.40x", met_at_least(ratio_of(roost_nd, bare_fwd), 0.4), raw={"roost": res["roost_nd"], "bare": res["bare_fwd"]}),
    ]
    if res["commit"]:
        commit, roost_fg = med("commit", "records_per_s"), med("roost_fg")
        rows += [
            Row("throughput", f"ref: durable msgs/s vs bare append+fsync group commit alone (one process, no socket, "
                f"{pairs * WINDOW} appenders; the bare forwarder with no disk reaches {ratio_of(bare_fwd, commit) or 0:.2f}x of it)",
                fmt_rate(roost_d), fmt_rate(commit), ratio_of(roost_d, commit), raw={"commit": res["commit"]}),
            Row("throughput", f"ref: foreground→foreground, no mailbox, anyio clients, vs the bare anyio forwarder "
                f"(daemon CPU {cpu('roost_fg')}/msg)",
                fmt_rate(roost_fg), fmt_rate(bare_fwd), ratio_of(roost_fg, bare_fwd), raw={"roost": res["roost_fg"]}),
        ]
    return rows
