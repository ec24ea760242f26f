"""The reliability suite's options and its results file.

``--soak`` (or ``ROOST_SOAK=1``) makes the load test and the properties run longer.
``--reliability-results PATH`` writes what every test recorded (its counts) and how it
ended to a JSON file; ``python -m tests.reliability.report`` runs the suite with it and
turns the file into the table of ``docs/reliability.md``.

The options are registered here, so on the command line they work when the run starts
at ``tests/reliability`` (``pytest tests/reliability --soak``); ``ROOST_SOAK=1`` works from
anywhere.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import pytest

RESULTS = pytest.StashKey[list]()
OUTCOMES = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("roost reliability")
    group.addoption("--soak", action="store_true", default=False, help="run the long soak (also ROOST_SOAK=1)")
    group.addoption(
        "--reliability-results", default=None, metavar="PATH", help="write the reliability suite's counts as JSON to PATH"
    )


def soak_enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("soak", default=False)) or os.environ.get("ROOST_SOAK") == "1"


@pytest.fixture
def soak(request: pytest.FixtureRequest) -> bool:
    return soak_enabled(request.config)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[RESULTS] = []
    config.stash[OUTCOMES] = {}
    config.addinivalue_line("markers", "soak_only: runs only with --soak / ROOST_SOAK=1 (deselected otherwise)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The working day (``soak_only``) is not part of the default run: deselected, so
    it shows in no count, unless the run is a soak."""
    if soak_enabled(config):
        return
    kept = [item for item in items if item.get_closest_marker("soak_only") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("soak_only") is not None])
        items[:] = kept


@pytest.fixture
def record(request: pytest.FixtureRequest):
    """``record(section, name, runs=, messages=, cases=, result=)``: one row of the table."""

    def add(section: str, name: str, *, runs: int = 1, messages: int = 0, cases: int = 0, result: str = "", **extra: Any) -> None:
        request.config.stash[RESULTS].append(
            {
                "nodeid": request.node.nodeid,
                "section": section,
                "name": name,
                "runs": runs,
                "messages": messages,
                "cases": cases,
                "result": result,
                **extra,
            }
        )

    return add


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    outcomes = item.config.stash.get(OUTCOMES, None)
    if outcomes is None:
        return report
    current = outcomes.setdefault(item.nodeid, {"outcome": "passed", "duration": 0.0})
    current["duration"] += report.duration
    if hasattr(report, "wasxfail"):
        current["reason"] = report.wasxfail
    if report.failed and str(report.longrepr).startswith("[XPASS(strict)]"):
        # A strict xfail that passed: its defect is fixed and the marker can go.
        current["outcome"] = "xpassed"
        current["reason"] = str(report.longrepr)[len("[XPASS(strict)] "):]
    elif report.failed:
        current["outcome"] = "failed"
    elif report.skipped and current["outcome"] == "passed":
        current["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    elif report.when == "call" and hasattr(report, "wasxfail"):
        current["outcome"] = "xpassed"
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("reliability_results", default=None)
    if not path:
        return
    outcomes = session.config.stash[OUTCOMES]
    rows = []
    for row in session.config.stash[RESULTS]:
        outcome = outcomes.get(row["nodeid"], {})
        rows.append({**row, "outcome": outcome.get("outcome", "unknown"), "duration": round(outcome.get("duration", 0.0), 2)})
    data = {
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "soak": soak_enabled(session.config),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "exitstatus": int(exitstatus),
        "tests": {nodeid: value for nodeid, value in outcomes.items()},
        "rows": rows,
    }
    Path(path).write_text(json.dumps(data, indent=1))
