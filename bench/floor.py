"""roost against the strong floor: the same workloads as ``latency`` and ``throughput``,
every side on lean clients (:mod:`bench.leanclient`), the baseline being the lean broker
(:mod:`bench.lean`) on asyncio and, when uvloop is installed, on uvloop.

Why a second set of rows: the ``latency`` and ``throughput`` rows put roost's own
``AsyncClient`` and an anyio broker with an anyio client on both sides, so both sides pay
the client's cost and the ratio says how roost compares with *an anyio broker*. Here the
clients cost as little as Python can make them, the baseline is the least work a broker
can do for the same traffic (see :mod:`bench.lean` for what it does and does not do),
and the ratio says how far the daemon is from that floor. The targets are issue 18's
goals for the daemon.

Rows (runs alternate floor on asyncio, floor on uvloop, roost, so all see the same load;
figures are medians over runs; the floor quoted is the better of the two loops, named).
A row's ratio is the median of its *paired* ratios: each repetition runs the floors and
roost back to back and divides roost's figure by the better floor's of that repetition.
The machine's load drifts over minutes (the lean clients' own CPU per message, the same
code in every run, moved by a quarter between runs minutes apart), so a ratio of two
medians taken from different moments moves with it; a pair's two runs share one moment.
The row gives the paired ratios' range beside it.

* send → deliver, 1 pair lockstep, p50 and p99: foreground receiver (no mailbox), as in
  ``latency``;
* durable msgs/s, 16 pairs × 4 and × 64 in flight: job receivers (roost's whole durable
  path, as in ``throughput``) against the lean broker with its group-commit journal (every
  ``send`` and ``ack`` appended, answered once durable); the deeper window shows what the
  disk's group commit gives when more waits on each fsync. A job holds at most 20 agent
  items (``queue_full`` past that, retried after 1 ms and counted): at 64 in flight roost
  answers many sends ``queue_full``; the row says how many, and has no target (issue 18's
  goals are for 4 in flight, within the cap);
* non-durable msgs/s (``ROOST_DURABLE=0``), 16 pairs × 4: the lean broker with no journal;
* every throughput row gives the server's CPU per message and the client processes'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from bench.common import Row, fmt_rate, fmt_time, median, ratio_of
from bench.lean import uvloop_available
from roost_core.queue import MAX_AGENT_ITEMS

PAIRS = 16


def floors() -> list[str]:
    return ["lean", "lean-uvloop"] if uvloop_available() else ["lean"]


def loop_name(system: str) -> str:
    return "uvloop" if system == "lean-uvloop" else "asyncio"


def paired_ratios(runs: dict[str, list[float]], better: Callable[[Iterable[float]], float]) -> list[float]:
    """roost's figure over the better floor's (``better``: ``min`` for a time, ``max`` for
    a rate), repetition by repetition: ``runs[system][n]`` is that system's figure in
    repetition n, the runs of one repetition made back to back."""
    ratios = []
    for n, mine in enumerate(runs["roost"]):
        floor = better(runs[system][n] for system in floors())
        if floor:
            ratios.append(mine / floor)
    return ratios


def spread(ratios: list[float]) -> str:
    """The paired ratios' range, for the row's text."""
    if len(ratios) < 2:
        return ""
    return f"; paired ratios {min(ratios):.2f}–{max(ratios):.2f}"


def latency_rows(quick: bool, smoke: bool) -> list[Row]:
    from bench.latency import one_run

    count = 30 if smoke else 400 if quick else 3000
    reps = 1 if smoke else 2 if quick else 3
    systems = [*floors(), "roost"]
    runs: dict[str, list[dict[str, float]]] = {system: [] for system in systems}
    for _ in range(reps):
        for system in systems:
            runs[system].append(one_run(system, count, clients="lean"))
    rows = []
    for key, limit in (("p50", 1.5), ("p99", 2.0)):
        figures = {system: median([r[key] for r in runs[system]]) for system in systems}
        best = min(floors(), key=lambda system: figures[system])
        others = ", ".join(f"{loop_name(s)} {fmt_time(figures[s])}" for s in floors())
        ratios = paired_ratios({system: [r[key] for r in runs[system]] for system in systems}, min)
        ratio = median(ratios)
        rows.append(Row(
            "floor",
            f"send→deliver {key}, 1 pair lockstep, lean clients, vs the lean broker on {loop_name(best)} "
            f"(floor: {others}; {count} msgs × {reps}{spread(ratios)})",
            fmt_time(figures["roost"]), fmt_time(figures[best]), ratio, f"≤ {limit:g}x", ratio <= limit,
            raw={system: runs[system] for system in systems},
        ))
    return rows


def throughput_rows(quick: bool, smoke: bool) -> list[Row]:
    from bench.throughput import pairs_run

    seconds = 0.15 if smoke else 1.0 if quick else 3.0
    warmup = 0.1 if smoke else 0.3 if quick else 0.5
    # Five in full: the goal rows sit near their lines, and the median of five pairs
    # moves less with the machine than that of three.
    reps = 1 if smoke or quick else 5
    pairs = 2 if smoke else PAIRS
    processes = 1 if smoke else 4
    shapes = [("durable", True, 4), ("durable", True, 64), ("non-durable", False, 4)]
    if smoke:
        shapes = shapes[:1]
    results: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for _ in range(reps):
        for name, durable, window in shapes:
            for system in [*floors(), "roost"]:
                receivers = "job" if system == "roost" else "bare-job"
                result = pairs_run(system, receivers=receivers, durable=durable, seconds=seconds, warmup=warmup,
                                   pairs=pairs, window=window, processes=processes, clients="lean",
                                   count=40 if smoke else None)
                results.setdefault((name, window, system), []).append(result)
    rows = []
    for name, durable, window in shapes:
        def med(system: str, field: str = "rate") -> float:
            return median([r[field] for r in results[(name, window, system)]])  # noqa: B023 - called within this pass of the loop only

        def us(system: str, field: str) -> str:
            return f"{med(system, field) * 1e6:.0f} µs"

        best = max(floors(), key=lambda system: med(system))
        ratios = paired_ratios({system: [r["rate"] for r in results[(name, window, system)]] for system in [*floors(), "roost"]}, max)
        ratio = median(ratios) if ratios else None
        floor_text = ", ".join(f"{loop_name(s)} {fmt_rate(med(s))} at {us(s, 'cpu_per_msg')}/msg" for s in floors())
        retries = median([r["retries"] for r in results[(name, window, "roost")]])

        def loop_share(system: str) -> str:
            shares = [r["loop"] for r in results[(name, window, system)] if r.get("loop")]  # noqa: B023 - as med
            if not shares:
                return ""
            return f"{median([ran for ran, _ in shares]):.0%} + {median([waited for _, waited in shares]):.0%}"

        roost_loop = loop_share("roost")
        loops = f"; loop thread ran + waited for a core: roost {roost_loop}, floor {loop_share(best)}" if roost_loop else ""
        # Issue 18's goals are for a window of 4. At 64 in flight a job's queue cap (20
        # agent items, the spec's) refuses most sends: the row shows what that costs,
        # with nothing to meet.
        target, limit = ("—", None) if window > MAX_AGENT_ITEMS else ("≥ 0.50x", 0.5) if durable else ("≥ 0.40x", 0.4)
        met = None if ratio is None or limit is None else ratio >= limit
        rows.append(Row(
            "floor",
            f"{name} msgs/s, {pairs} pairs × {window} in flight, lean clients, vs the lean broker on {loop_name(best)} "
            f"({seconds:g} s × {reps}; roost daemon CPU {us('roost', 'cpu_per_msg')}/msg, clients "
            f"{us('roost', 'client_cpu_per_msg')}/msg, {retries:,.0f} queue_full retries; floor: {floor_text}, "
            f"clients {us(best, 'client_cpu_per_msg')}/msg{loops}{spread(ratios)})",
            fmt_rate(med("roost")), fmt_rate(med(best)), ratio, target, met,
            raw={system: results[(name, window, system)] for system in [*floors(), "roost"]},
        ))
        if durable and window == 4:
            cpu = med("roost", "cpu_per_msg") * 1e6
            rows.append(Row(
                "floor", f"daemon CPU per durable message, {pairs} pairs × {window} in flight, lean clients "
                f"(the lean broker's on {loop_name(best)} as baseline)",
                f"{cpu:.0f} µs", us(best, "cpu_per_msg"), ratio_of(cpu, med(best, "cpu_per_msg") * 1e6),
                "≤ 60 µs", cpu <= 60,
            ))
    return rows


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    return latency_rows(quick, smoke) + throughput_rows(quick, smoke)
