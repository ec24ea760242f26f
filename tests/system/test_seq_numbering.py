"""A receiver's seqs increase by one across daemon restarts (issue 39, point 5).

Clean stops, crashes with the job's worker alive (it says which seqs it holds when it
says hello again), crashes with the worker gone too (its transcript says), and a
foreground session that registers again (``lastSeq``). Before, every restart made a job's
seqs jump by 1,000, and a foreground peer's started again at 1.
"""

from __future__ import annotations

import os
import signal

import anyio
import psutil
from conftest import wait_until
from fg import in_thread, run_async, session


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def long_job(daemon) -> str:
    """A job whose worker stays alive (its runs say what they got)."""
    return daemon.start_job("first", name="j", scenario={"default": {"steps": [{"say": "got {input}"}]}})


def reply_seqs(daemon, job: str, texts: list[str]) -> list[int]:
    seqs = []
    for text in texts:
        seqs.append(daemon.call("reply", job=job, text=text)["seq"])
        daemon.wait_job(job, "done")
    return seqs


def seqs_across(daemon, restart) -> list[int]:
    """The seqs of two replies before ``restart(daemon, job, worker pid)`` and two after."""
    job = long_job(daemon)
    daemon.wait_job(job, "done")
    before = reply_seqs(daemon, job, ["a", "b"])
    restart(daemon, job, daemon.job(job)["workerPid"])
    return before + reply_seqs(daemon, job, ["c", "d"])


def by_one(seqs: list[int]) -> bool:
    return seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_seqs_go_on_by_one_after_a_clean_restart(daemon_factory):
    def clean(daemon, job, worker) -> None:
        daemon.terminate()
        daemon.restart()

    seqs = seqs_across(daemon_factory().start(), clean)
    assert by_one(seqs), seqs


def test_seqs_go_on_by_one_after_a_crash_with_the_worker_alive(daemon_factory, write_config):
    """The worker outlives the daemon's kill -9 and says at its hello which seqs it holds."""
    write_config({"reapAfterSeconds": 3600})

    def crash(daemon, job, worker) -> None:
        assert worker is not None
        daemon.kill9()
        daemon.restart()
        # Connected: it has said hello (an item queued before that jumps; see worker_hello).
        wait_until(lambda: daemon.job(job)["connected"], what="the worker back on the new daemon")
        assert daemon.job(job)["workerPid"] == worker

    seqs = seqs_across(daemon_factory().start(), crash)
    assert by_one(seqs), seqs


def test_seqs_go_on_by_one_after_a_crash_that_took_the_worker_too(daemon_factory, write_config):
    """Daemon and worker die together: the new daemon reads the transcript's seqs."""
    write_config({"reapAfterSeconds": 3600})

    def crash_both(daemon, job, worker) -> None:
        daemon.kill9()
        os.kill(worker, signal.SIGKILL)
        wait_until(lambda: gone(worker), what="the worker gone")
        daemon.restart()

    seqs = seqs_across(daemon_factory().start(), crash_both)
    assert by_one(seqs), seqs


def test_a_foreground_peers_seqs_go_on_after_a_restart(daemon_factory, write_config, tmp_path):
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()

    async def main():
        async with session(daemon, tmp_path, name="receiver") as receiver, session(daemon, tmp_path, name="sender") as sender:
            me = await receiver.ensure_registered()
            await sender.ensure_registered()
            for n in range(3):
                await sender.call("send", to=me, message=f"before-{n}")
            await receiver.wait_for_delivery(3)
            await in_thread(daemon.terminate)
            await in_thread(daemon.restart)
            await in_thread(wait_until, lambda: any(r["id"] == me and r["live"] for r in daemon.call("agents")["agents"]), what="the receiver back")
            with anyio.fail_after(30):
                await sender.call("send", to=me, message="after")
            await receiver.wait_for_delivery(4)
            return [int(event["seq"]) for event in receiver.delivered]

    seqs = run_async(main)
    assert by_one(seqs), seqs
