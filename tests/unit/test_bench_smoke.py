"""The benchmark harness still runs: every benchmark in its smallest configuration
(``python -m bench --smoke NAME``, all side by side), checked for a figure, a
same-run baseline and a ratio. It times nothing and asserts no target: the figures of a
smoke run mean nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from roost_core import platform

REPO = Path(__file__).resolve().parents[2]
BENCHES = {"latency": "send→deliver", "throughput": "throughput", "peers": "peers", "coldstart": "cold start", "memory": "memory",
           "tools": "tool tokens", "floor": "floor", "client": "client", "commands": "command cpu"}

pytestmark = [
    pytest.mark.bench,  # only with --bench (scripts/test.sh --bench; CI runs it)
    pytest.mark.skipif(not (REPO / "bench" / "__main__.py").exists(), reason="no bench/ in this tree"),
]


def test_every_benchmark_runs_its_smallest_configuration(tmp_path):
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM")}
    runs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "bench", "--smoke", "--json", str(tmp_path / f"{name}.json"), name],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in BENCHES
    }
    for name, process in runs.items():
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, f"{name}: {out[-2000:]}{err[-4000:]}"
        assert "| benchmark | metric | roost | baseline | ratio | target | met |" in out, name
        rows = json.loads((tmp_path / f"{name}.json").read_text())["rows"]
        assert rows and {row["bench"] for row in rows} == {BENCHES[name]}, name
        for row in rows:
            assert row["roost"] and row["roost"] != "n/a", row
        # Every benchmark compares with its same-run baseline.
        assert any(row["ratio"] is not None for row in rows), name


def test_the_op_logic_diagnostic_runs():
    """``python -m bench.oplogic`` (the op logic's CPU per message, no socket) still runs
    and names each step; its figures are not checked."""
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.oplogic", "--messages", "50", "--repeat", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    steps = [line.split("µs", 1)[1].strip() for line in done.stdout.splitlines() if "µs  " in line]
    assert steps == ["send to a foreground peer", "send to a job", "the job's ack", "the commit and its answers"], done.stdout


def test_the_opcode_count_diagnostic_runs():
    """``python -m bench.opcount`` counts the op logic's bytecodes for each step (a step
    that ran nothing would count 0) and names the functions that ran them."""
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.opcount", "--iterations", "20", "--top", "5"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    steps = {line.split(None, 1)[1]: float(line.split()[0]) for line in lines[1:5]}
    assert list(steps) == ["send to a foreground peer", "send to a job", "the job's ack", "the commit and its answers"], done.stdout
    assert all(count > 100 for count in steps.values()), done.stdout
    assert any("sending.py:send" in line for line in lines[6:]), done.stdout


def test_the_monitor_diagnostic_runs():
    """``python -m bench.monitor`` times the monitor's round over adopted workers both ways
    (a pidfd each, and the liveness check it replaced) and gives their ratio; the figures
    are not checked, only that both ways ran and took time."""
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.monitor", "--workers", "2", "--rounds", "5", "--repeat", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    figures = [float(line.split()[0]) for line in done.stdout.splitlines() if "µs  " in line]
    # (Where the platform watches no exits, the portable one on Linux, only the check runs.)
    both = platform.CAN_WATCH_EXITS
    assert len(figures) == (2 if both else 1) and all(figure > 0 for figure in figures), done.stdout
    assert ("ratio" in done.stdout) is both, done.stdout


def test_the_syscall_count_diagnostic_runs():
    """``python -m bench.profile syscalls`` runs the durable load on roost and on the lean
    broker and counts each server's syscalls per message (read from ``/proc``: a server
    that answered anything made some); the figures are not checked."""
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.profile", "syscalls", "--seconds", "0.3", "--reps", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:6] for line in done.stdout.splitlines()[2:]}
    assert set(rows) == {"roost", "lean-uvloop"}, done.stdout
    for cells in rows.values():
        reads, writes = float(cells[2]), float(cells[3])
        assert reads > 0 and writes > 0, done.stdout


def test_the_disk_sync_diagnostic_runs():
    """``python -m bench.syncs`` times a commit three ways (append + fsync, and into zeros
    written ahead with fdatasync or with a write synced as it is made), idle and busy,
    and prints each; the figures are not checked, only that every way ran and took time."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.syncs", "--commits", "5", "--busy", "1", "--size", "4096"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == ["idle", "1 busy processes"], done.stdout
    for line in lines:
        figures = [float(figure) for figure in re.findall(r"([0-9]+) µs", line)]
        assert len(figures) == 3 and all(figure > 0 for figure in figures), line


def test_the_paired_before_after_runs(tmp_path):
    """``python -m bench.pair OLD_SRC`` runs the durable row on an old copy of ``src``, on
    this one and on the floor, alternating, and prints each side's medians; here the old
    copy is this checkout's own ``src``. The figures are not checked, only that every
    side ran and moved messages."""
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.pair", str(REPO / "src"), "--reps", "2", "--seconds", "0.3"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:7] for line in done.stdout.splitlines() if line.startswith("| ") and "side" not in line}
    assert set(rows) == {"before", "after", "floor"}, done.stdout
    for cells in rows.values():
        assert float(cells[0].replace(",", "")) > 0, done.stdout
    assert len([line for line in done.stdout.splitlines() if line.startswith("rep ")]) == 6, done.stdout


def test_the_in_flight_sweep_runs():
    """``python -m bench.windows`` runs the durable load at each depth on the floor and on
    roost and says, per run, how busy the server's loop thread was (Linux's schedstat: a
    server that moved messages ran for some of the window); the figures are not checked."""
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.windows", "--in-flight", "1,2", "--reps", "1", "--seconds", "0.3"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    runs = [line for line in done.stdout.splitlines() if line.startswith("rep ")]
    assert [run.split()[4] for run in runs] == ["floor", "roost"] * 2, done.stdout
    if os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"):
        for run in runs:
            ran = re.search(r"loop thread ran +([0-9]+)%", run)
            assert ran is not None and int(ran[1]) > 0, run
    table = {line.split("|")[1].strip(): line.split("|")[2:5] for line in done.stdout.splitlines() if line.startswith("| ") and "in flight" not in line}
    assert set(table) == {"1", "2"}, done.stdout
    for roost, floor, _ratio in table.values():
        assert float(roost.replace(",", "")) > 0 and float(floor.replace(",", "")) > 0, done.stdout


def test_the_web_benchmark_runs_its_smallest_configuration(tmp_path):
    """``python -m bench web`` (the page with its agents and messages in a headless
    browser) runs and gives both rows with their baselines; skipped without the browser
    unless ROOST_REQUIRE_BROWSER=1 (CI)."""
    import shutil

    if not (shutil.which("chromium-headless-shell") or shutil.which("chromium")) and os.environ.get("ROOST_REQUIRE_BROWSER") != "1":
        pytest.skip("no headless Chromium")
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--json", str(tmp_path / "web.json"), "web"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    rows = json.loads((tmp_path / "web.json").read_text())["rows"]
    assert [row["metric"].split(",")[0].split(":")[0] for row in rows] == ["first paint", "live update"]
    assert all(row["ratio"] is not None for row in rows), rows
