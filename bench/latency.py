"""send → deliver latency, one pair in lockstep.

Roost: two no-session foreground peers, each in its own process on a raw
:class:`~roost_core.client.AsyncClient` (``peer_register`` with ``session=None``), on a
durable daemon. The sender writes ``send``, waits for its answer, sends the next. The clock
runs from just before the sender writes the request to the moment the receiver has read
and decoded the ``deliver`` event. A foreground receiver has no mailbox, so nothing waits
for an fsync here (a job receiver is pushed to before the fsync as well).

Baseline: the same two processes, the same client loop, through the bare anyio forwarder
(:mod:`bench.bare`): A → broker → B, the receiver acking each item as roost's does.

Runs alternate baseline, roost, baseline, roost... and the table quotes the median over
runs of each run's p50 and p99 (the first 10 % of each run is warm-up and dropped).
"""

from __future__ import annotations

from typing import Any

from bench.common import Agent, RoostDaemon, Row, fmt_time, median, percentile


def one_run(system: str, count: int, clients: str = "anyio") -> dict[str, float]:
    """One lockstep run on ``system`` ("roost", or a baseline broker: "bare", "lean",
    "lean-uvloop") with ``clients`` "anyio" or "lean" (:mod:`bench.leanclient`)."""
    from bench.throughput import start_server

    server: Any = RoostDaemon(label="lat").start() if system == "roost" else start_server(system, durable=False, label="lat")
    role = "lean" if clients == "lean" else "pairs"
    sender, receiver = Agent(role, {}), Agent(role, {})
    try:
        sender.hear(), receiver.hear()
        receiver.tell({"cmd": "connect", "system": system, "socket": server.socket, "receivers": [{"kind": "fg"}], "tag": "b"})
        target = receiver.hear()["receivers"][0]
        sender.tell({"cmd": "connect", "system": system, "socket": server.socket, "senders": 1, "tag": "a"})
        sender.hear()
        receiver.tell({"cmd": "run"})
        receiver.hear()
        sender.tell({"cmd": "run", "targets": [target], "count": count, "window": 1})
        sent = sender.hear(timeout=300)
        # Every answer the sender read is a delivery pushed, not one the receiver has read
        # yet: it reports once it has seen all of them.
        receiver.tell({"cmd": "finish", "expect": count})
        seen = receiver.hear()
        sender.tell({"cmd": "finish"})
        sender.hear()
    finally:
        sender.close()
        receiver.close()
        server.close()
    latencies = seen["latencies"][count // 10 :]
    assert sent["sent"] == count, sent
    assert seen["received"] == count, seen["received"]
    return {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99), "n": len(latencies)}


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    count = 30 if smoke else 400 if quick else 3000
    reps = 1 if smoke else 2 if quick else 3
    runs: dict[str, list[dict[str, float]]] = {"bare": [], "roost": []}
    for _ in range(reps):
        for system in ("bare", "roost"):
            runs[system].append(one_run(system, count))
    rows = []
    for key, limit in (("p50", 3.0), ("p99", 5.0)):
        roost = median([r[key] for r in runs["roost"]])
        bare = median([r[key] for r in runs["bare"]])
        ratio = roost / bare
        rows.append(
            Row(
                "send→deliver",
                f"{key}, 1 pair lockstep, anyio clients, vs the bare anyio forwarder ({count} msgs × {reps})",
                fmt_time(roost),
                fmt_time(bare),
                ratio,
                f"≤ {limit:g}x",
                ratio <= limit,
                raw={"roost": runs["roost"], "bare": runs["bare"]},
            )
        )
    return rows
