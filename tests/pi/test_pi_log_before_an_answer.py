"""``roost log`` of a pi job that failed before its first model answer (issue 49 B7): pi
wrote no transcript, and the log showed nothing, not even the task. It shows the task from
the job record, then why the job failed."""

from __future__ import annotations

import subprocess
import sys

from conftest import wait_until


def test_log_of_a_pi_job_that_failed_before_its_first_answer_shows_task_and_error(pi_kit, tmp_path):
    # No model configured: pi fails before it writes anything.
    daemon = pi_kit.daemon()
    job = daemon.start_job("summarise the repo", host="pi", name="summariser")
    # Its task is still queued (it never took it): the state says it failed.
    row = wait_until(lambda: (r := daemon.job(job))["state"] == "failed" and r, timeout=60, what="the pi job failed")
    log = subprocess.run([sys.executable, "-m", "roost_core.cli", "log", job], env=daemon.env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert log.returncode == 0, log.stderr
    assert log.stdout == f"› you: summarise the repo\n✗ failed: {row['error']}\n", log.stdout
    assert "No API key" in row["error"]
