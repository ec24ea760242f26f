"""The real-pi benchmark (``python -m bench pi``) still runs: its smallest configuration,
checked for its rows, a figure in each and the same-run baseline. It times nothing and
asserts no target (the figures of a smoke run mean nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Only with --bench (scripts/test.sh --bench; CI runs it).
pytestmark = pytest.mark.bench

REPO = Path(__file__).resolve().parents[2]


def test_the_pi_benchmark_runs_its_smallest_configuration(pi_bin, tmp_path):
    env = {key: value for key, value in os.environ.items() if not (key.startswith("ROOST_") and key != "ROOST_PLATFORM")}
    env["ROOST_PI_BIN"] = pi_bin
    out = tmp_path / "pi.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--json", str(out), "pi"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    metrics = [row["metric"] for row in rows]
    assert any(m.startswith("spawn → child's first model request") for m in metrics), metrics
    assert any(m.startswith("wake from hibernation") for m in metrics), metrics
    assert any(m.startswith("daemon memory per hibernated child") for m in metrics), metrics
    for row in rows:
        assert row["roost"] and row["roost"] != "n/a", row
    assert all(row["ratio"] is not None for row in rows if "model request" in row["metric"])
