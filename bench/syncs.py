"""What one durable journal commit costs this machine's disk, the three ways of making it:
``python -m bench.syncs [--size BYTES] [--commits N] [--busy K]``.

* **append + fsync**: the record appended (``O_APPEND``), then ``fsync``. The file grows,
  so the sync also waits for the filesystem's own journal (the new size and extents).
* **reserve + fdatasync**: the record written into zeros written (and synced) ahead of it,
  then ``fdatasync``. Nothing but data changes, so the sync flushes the data alone. The
  lean broker's log does this (``bench.lean``).
* **reserve + dsync write**: the same, with the sync made by the write itself (one
  ``pwritev2`` with ``RWF_DSYNC``): one syscall instead of two. Roost's journal does this
  (``roost_core.store.write_durably``): its writer thread then takes the GIL back from a
  busy loop once per commit, not twice. The disk's time is the same either way.

Each is timed idle, then with ``--busy`` processes spinning on the CPU (the durable
benchmark's daemon and clients keep both cores busy, and a busy machine delays the
filesystem's journal thread more than the data's flush). Prints µs per commit and the
ratios to append + fsync. A diagnostic of the disk, with no target.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time


def spin() -> None:
    while True:
        pass


#: The ways of making a commit durable, by name (see the module docstring).
WAYS = ("append + fsync", "reserve + fdatasync", "reserve + dsync write")


def per_commit(folder: str, size: int, commits: int, way: str) -> float:
    """µs per commit of ``size`` bytes, ``commits`` times, one of :data:`WAYS`."""
    record = b"x" * (size - 1) + b"\n"
    path = os.path.join(folder, way.replace(" ", ""))
    if way == "append + fsync":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    else:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.pwrite(fd, bytes(size * commits), 0)
        os.fsync(fd)
    try:
        start = time.perf_counter()
        for n in range(commits):
            if way == "append + fsync":
                os.write(fd, record)
                os.fsync(fd)
            elif way == "reserve + fdatasync":
                os.pwrite(fd, record, n * size)
                os.fdatasync(fd)
            else:
                os.pwritev(fd, [record], n * size, os.RWF_DSYNC)
        return (time.perf_counter() - start) / commits * 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.syncs")
    parser.add_argument("--size", type=int, default=28_000, help="bytes per commit (28 KB: a durable-benchmark commit)")
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--busy", type=int, default=4, help="processes spinning in the second round")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rb-syncs-") as folder:
        for label, busy in (("idle", 0), (f"{args.busy} busy processes", args.busy)):
            spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(busy)]
            for process in spinners:
                process.start()
            try:
                figures = {way: per_commit(folder, args.size, args.commits, way) for way in WAYS}
            finally:
                for process in spinners:
                    process.terminate()
                    process.join()
            append = figures["append + fsync"]
            print(f"{label}: {args.size:,} B per commit: " + ", ".join(
                f"{way} {micros:.0f} µs" + ("" if way == "append + fsync" else f" ({micros / append:.2f}x)") for way, micros in figures.items()
            ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
