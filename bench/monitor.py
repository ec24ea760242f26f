"""What the daemon's monitor costs with adopted workers:
``python -m bench.monitor [--workers N] [--rounds R] [--repeat K]``.

A worker the daemon did not start (one its predecessor started, before a restart) is
nobody's child here. The monitor, ten rounds a second, used to check each such worker's
liveness by pid and create time (psutil, reading ``/proc``); now each is watched by a
pidfd (``roost_core.daemon.exits``) and its exit arrives as a loop callback, so a round
only looks its watch up. The liveness check stays as the fallback where there are no
pidfds, and is this benchmark's baseline, measured in the same run.

The daemon is built in this process on a throwaway home (as ``bench.oplogic`` builds it),
with ``N`` job records whose workers are real child processes that wait to be killed.
Each figure is this thread's CPU time (``time.thread_time``) for one round of the
monitor's worker check over every job (``check_worker``), the best of ``--repeat`` runs
of ``--rounds`` rounds. Run it with ``PYTHONPATH=OLD/src`` for "before": a daemon with
no pidfd watches shows the liveness check only.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time

from bench.common import BENCH_CONFIG, write_job_records

#: The monitor's rounds per second (``roost_core.daemon.workers.MONITOR_INTERVAL`` = 0.1 s).
ROUNDS_PER_SECOND = 10


def measure(workers: int, rounds: int, repeat: int) -> dict[str, float]:
    """CPU seconds per monitor round over ``workers`` adopted workers, by way of watching
    them ("pidfd", when this daemon has it) and by liveness check ("poll")."""
    import anyio
    import psutil

    from roost_core.daemon.core import Daemon
    from roost_core.paths import resolve_paths
    from roost_core.plugins import make_plugin_manager
    from roost_core.testing import make_config

    home = tempfile.mkdtemp(prefix="rb-monitor-")
    children = [subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE) for _ in range(workers)]
    try:
        paths = resolve_paths({"ROOST_HOME": home})
        paths.ensure()
        write_job_records(paths, workers, state="idle", workers=[(child.pid, psutil.Process(child.pid).create_time()) for child in children])
        config = make_config(BENCH_CONFIG)

        async def main() -> dict[str, float]:
            daemon = Daemon(paths, config, make_plugin_manager(config), durable=False)
            daemon.load()
            workers = getattr(daemon, "workers", daemon)  # its own service since issue 41
            exits = getattr(workers, "exits", None)
            ways = ["pidfd", "poll"] if exits is not None and exits.supported else ["poll"]
            figures: dict[str, float] = {}
            try:
                for way in ways:
                    if exits is not None:
                        exits.close()
                        exits.supported = way == "pidfd"
                    jobs = list(daemon.jobs.values())
                    for job in jobs:  # the first round opens the watches: not what a round costs
                        workers.check_worker(job, daemon.clock())
                    assert all(job.worker_pid is not None for job in jobs), "a worker was taken for gone"
                    best = float("inf")
                    for _ in range(repeat):
                        start = time.thread_time()
                        for _ in range(rounds):
                            for job in jobs:
                                workers.check_worker(job, daemon.clock())
                        best = min(best, (time.thread_time() - start) / rounds)
                    figures[way] = best
            finally:
                if exits is not None:
                    exits.close()
                assert daemon.journal is not None
                await daemon.journal.aclose()
            return figures

        return anyio.run(main)
    finally:
        for child in children:
            child.kill()
            child.wait()
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.monitor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=16, help="adopted workers (default: 16, the throughput bench's receivers)")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    figures = measure(args.workers, args.rounds, args.repeat)
    names = {"pidfd": "a pidfd per worker (roost, where the kernel has pidfds)", "poll": "each worker's liveness by psutil (the fallback; the way before)"}
    print(f"the monitor's round over {args.workers} adopted workers, µs of CPU (best of {args.repeat} × {args.rounds} rounds):")
    for way, seconds in figures.items():
        share = seconds * ROUNDS_PER_SECOND * 100
        print(f"  {seconds * 1e6:9.1f} µs  {names[way]}; {share:.2f}% of a core at {ROUNDS_PER_SECOND} rounds a second")
    if "pidfd" in figures:
        print(f"  ratio {figures['pidfd'] / figures['poll']:.3f}x (pidfd / liveness check)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
