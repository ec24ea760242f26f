"""The warm pool through the daemon, without a real pi: a pi that cannot start is tried
once by the pool, never again in a loop, and leaves nothing behind. (The real-pi tests
are tests/pi/test_pi_pool.py.)"""

from __future__ import annotations

import proctools
from conftest import wait_until


def test_a_pi_that_cannot_start_is_warmed_once_not_in_a_loop(daemon_factory, tmp_path):
    broken = tmp_path / "pi"
    broken.write_text("#!/bin/sh\necho 'this pi cannot start' >&2\nexit 1\n")
    broken.chmod(0o755)
    daemon = daemon_factory(ROOST_PI_BIN=str(broken)).start()
    job = daemon.start_job("anything", host="pi")
    wait_until(lambda: "giving up" in (daemon.job(job)["error"] or ""), what="the job given up")

    def pool():
        return daemon.call("daemon_status")["pool"]

    # The job's miss asked the pool for a pi like it; that one failed too, and was dropped.
    wait_until(lambda: pool()["missed"] == 1 and pool()["warming"] == 0 and "exited before a job took it" in daemon.paths.daemon_log.read_text(), what="the warm attempt over")
    log = daemon.paths.daemon_log.read_text()
    assert log.count("exited before a job took it") == 1 and "PiError: pi did not start" in log
    # Not tried again: the job's own worker was restarted three more times meanwhile, and
    # the monitor ran; still one attempt, and no slot.
    assert pool() == {"enabled": True, "size": 1, "max": 4, "warming": 0, "ready": 0, "adopted": 0, "missed": 1, "wakesWarm": 0, "wakesCold": 0}
    assert not proctools.with_cmdline(str(broken))
