"""A failed job through the CLI (issue 49, points A5 and B2): a job whose worker crashes
each time it starts is given up on, failed with its task still queued. It is settled:
`roost wait` returns, a daemon restart does not run it, and a user's reply does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clikit import Cli
from conftest import wait_until

#: The error of a job given up on names why its last worker ended, from its log.
GAVE_UP = "worker crashed 4 times; giving up: roost_plugins.pi.host.PiError: pi did not start (no hello from the roost extension); see the job log"


@pytest.fixture
def crashing(roost_env: dict[str, str], tmp_path: Path):
    """A CLI whose daemon (the CLI starts it) runs pi jobs with a pi that cannot start: the
    worker of such a job exits at once, each time. Every daemon it started is stopped
    after the test."""
    broken = tmp_path / "pi"
    broken.write_text(f"#!/bin/sh\necho started >> {tmp_path / 'pi-starts'}\necho 'this pi cannot start' >&2\nexit 1\n")
    broken.chmod(0o755)
    # No warm pi: the pool would try the broken one too, beside the job's own worker.
    (Path(roost_env["ROOST_HOME"]) / "roost.json").write_text('{"piPool": false}')
    run = Cli({**roost_env, "ROOST_PI_BIN": str(broken)}, tmp_path)
    yield run
    run("daemon", "stop", "--jobs", expect=None)


def pi_starts(run: Cli) -> int:
    """How often the broken pi was started."""
    path = run.cwd / "pi-starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def row_of(run: Cli, job: str) -> dict:
    return next(row for row in run.json("jobs") if row["id"] == job)


def test_wait_returns_for_a_job_given_up_before_it_took_its_task(crashing):
    job = crashing.json("start", "say hi", "--host", "pi", "--name", "broken")["id"]
    # Settled once given up: the wait returns (it waited out its timeout, exit 124, before).
    row = json.loads(crashing("wait", "broken", "--timeout", "60", "--json", timeout=90).stdout)
    assert (row["id"], row["state"], row["error"], row["pending"], row["live"]) == (job, "failed", GAVE_UP, 1, False), row
    assert crashing("wait", "broken", "--state", "failed").stdout == f"{job}: failed\n"


def test_a_job_given_up_is_not_run_by_a_daemon_restart_only_by_a_reply(crashing):
    job = crashing.json("start", "say hi", "--host", "pi", "--name", "broken")["id"]
    wait_until(lambda: row_of(crashing, job)["error"] == GAVE_UP, what="the job given up")
    assert pi_starts(crashing) == 4
    assert crashing("daemon", "stop", "--jobs").stdout.startswith("stopped")
    # The next command starts a daemon; it finds the failed job with its task queued and
    # leaves it so: the daemon answers only once it has looked at every job.
    row = row_of(crashing, job)
    assert (row["state"], row["error"], row["pending"], row["live"]) == ("failed", GAVE_UP, 1, False), row
    assert crashing("daemon", "status").stdout.startswith("running: pid ")
    assert not row_of(crashing, job)["live"] and pi_starts(crashing) == 4
    # A user's reply is asking again: the job runs (and, its pi still broken, is given up
    # on again, its two items waiting).
    assert "started" in crashing("reply", "broken", "try again").stdout
    wait_until(lambda: pi_starts(crashing) == 8 and not row_of(crashing, job)["live"], what="given up again")
    row = row_of(crashing, job)
    assert (row["state"], row["error"], row["pending"]) == ("failed", GAVE_UP, 2), row
