"""No file descriptors: the daemon's ``RLIMIT_NOFILE`` lowered (``prlimit``) to a few above
what it uses, then connections opened and held until it is out of descriptors.

What must hold: every connection beyond the limit is refused cleanly (one ``busy`` error
frame, then closed; never a hang, never the daemon's death); the connections it has are
served as before (reads, a user reply to a job, the job's worker delivering and acking
it); the daemon does not spin on ``accept`` (its CPU while at the limit, with connection
attempts arriving, stays that of an idle daemon); and when descriptors come back (the
held connections close) new connections are served again, with no restart.
"""

from __future__ import annotations

import json
import resource
import socket
import time

import psutil
import pytest
from conftest import wait_until
from reliability.kit import Raw, transcript, user_texts

from roost_core.protocol import ProtocolError

pytestmark = pytest.mark.timeout(180)

#: Descriptors the daemon may open beyond what it holds when the limit is set.
HEADROOM = 8
#: Connection attempts made at once while at the limit (each must be refused).
ATTEMPTS = 50
#: Then a client that tries again every :data:`RETRY_EVERY` seconds, this many times: the
#: window in which the daemon's CPU is measured.
RETRIES = 20
RETRY_EVERY = 0.1
#: CPU a daemon may use at the limit, per second of wall time. An idle daemon uses about
#: 1% (its monitor ticks) and each refusal well under a millisecond; one that spins on
#: ``accept`` uses a whole core, and even on a machine shared by many busy processes it
#: gets far more than this.
MAX_CPU_SHARE = 0.05


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def attempt(daemon) -> str:
    """Connect and ask for the status: ``served``, ``busy`` or what else happened. A
    refused connection may be closed before the request is even written (the refusal
    needs none): its ``busy`` frame is read all the same."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    try:
        sock.connect(str(daemon.paths.socket))
        try:
            sock.sendall(json.dumps({"id": 1, "op": "daemon_status"}).encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        while b"\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return "closed without a word"
            data += chunk
    except OSError as exc:
        return f"failed: {exc}"
    finally:
        sock.close()
    answer = json.loads(data.split(b"\n", 1)[0])
    if answer.get("ok"):
        return "served"
    return answer["error"]["code"] if answer.get("id") is None else f"error {answer['error']['code']}"


def test_out_of_file_descriptors(daemon, tmp_path, record):
    box = daemon.start_job("hold the box", name="box")
    daemon.wait_job(box, "done")
    keeper = Raw(daemon.paths.socket)  # a connection made before the shortage
    assert keeper.request({"id": 0, "op": "daemon_status"})["ok"]
    process = psutil.Process(daemon.process.pid)
    _, hard = resource.prlimit(process.pid, resource.RLIMIT_NOFILE)
    used = process.num_fds()
    limit = used + HEADROOM
    resource.prlimit(process.pid, resource.RLIMIT_NOFILE, (limit, hard))
    held: list[Raw] = []
    outcomes: list[str] = []
    try:
        # Take every descriptor the daemon has left with connections it serves.
        while True:
            conn = Raw(daemon.paths.socket, timeout=10)
            try:
                answer = conn.request({"id": 1, "op": "daemon_status"})
            except (EOFError, BrokenPipeError, ConnectionResetError):
                # Refused before the request was written: its frame is read below.
                try:
                    answer = conn.read()
                except (EOFError, OSError):
                    conn.close()
                    outcomes.append("closed without a word")
                    break
            if not answer.get("ok"):
                conn.close()
                outcomes.append(answer["error"]["code"])
                break
            held.append(conn)
            assert len(held) <= HEADROOM, "the limit did not take"
        at_limit = len(held)
        # At the limit: a burst of attempts, each refused.
        burst_cpu, burst_wall = cpu_seconds(process), time.monotonic()
        for _ in range(ATTEMPTS):
            outcomes.append(attempt(daemon))
        burst_cpu, burst_wall = cpu_seconds(process) - burst_cpu, time.monotonic() - burst_wall
        # The CLI's client says why, whether the refusal came before its request or after.
        try:
            daemon.call("daemon_status")
            cli = "served"
        except ProtocolError as exc:
            cli = exc.code
        # Then a client retrying every 100 ms (the pause is the client's pace, and the
        # window of the measure): a daemon that spins shows it here.
        cpu_before, wall_before = cpu_seconds(process), time.monotonic()
        for _ in range(RETRIES):
            outcomes.append(attempt(daemon))
            time.sleep(RETRY_EVERY)
        wall = time.monotonic() - wall_before
        cpu = cpu_seconds(process) - cpu_before
        # The connections it had are served: reads, and a user reply that the job's
        # worker (on its own old connection) takes into its transcript and acks.
        status = keeper.request({"id": 2, "op": "daemon_status"})
        jobs = held[0].request({"id": 3, "op": "jobs"})
        reply = keeper.request({"id": 4, "op": "reply", "job": box, "text": "while the daemon is out of fds"})
        wait_until(lambda: "while the daemon is out of fds" in user_texts(transcript(daemon.record(box)["session"])), what="the reply in the transcript")
        settled = wait_until(lambda: (row := daemon_job(keeper, box))["pending"] == 0 and row["state"] == "done" and row, what="the job to settle")
        refused_counted = keeper.request({"id": 5, "op": "daemon_status"})["result"]["refused_connections"]
        # Descriptors come back: the held connections close; a new one is served.
        for conn in held:
            conn.close()
        recovered = wait_until(lambda: attempt(daemon) == "served", what="a new connection served again")
        pid_after = daemon.call("daemon_status")["pid"]
    finally:
        keeper.close()
        for conn in held:
            conn.close()
        if daemon.process.poll() is None:
            resource.prlimit(process.pid, resource.RLIMIT_NOFILE, (hard, hard))
    assert status["ok"] and jobs["ok"] and reply["ok"], (status, jobs, reply)
    assert outcomes == ["busy"] * (ATTEMPTS + RETRIES + 1), outcomes
    assert cli == "busy"
    assert refused_counted == ATTEMPTS + RETRIES + 2
    assert settled["state"] == "done"
    assert recovered and pid_after == daemon.process.pid
    assert cpu / wall < MAX_CPU_SHARE, f"the daemon used {cpu:.3f} s of CPU in {wall:.2f} s at the limit"
    record(
        "fds",
        f"RLIMIT_NOFILE {limit} ({used} in use + {HEADROOM}), connections held until refused",
        messages=1,
        cases=ATTEMPTS + RETRIES + 2,
        result=(
            f"{at_limit} connections served up to the limit; {ATTEMPTS + RETRIES + 2} beyond it refused 'busy' (counted {refused_counted}; "
            f"the CLI's client raised '{cli}'); "
            f"a burst of {ATTEMPTS} refused in {burst_wall * 1000:.0f} ms using {burst_cpu * 1000:.0f} ms of daemon CPU; "
            f"a client retrying every {RETRY_EVERY * 1000:.0f} ms: daemon CPU {cpu * 1000:.0f} ms in {wall:.1f} s ({100 * cpu / wall:.1f}%, bound "
            f"{100 * MAX_CPU_SHARE:.0f}%); open connections served (status, jobs, a reply delivered and acked by the job's worker); "
            f"new connections served again once fds were back; same daemon pid"
        ),
    )


def daemon_job(conn: Raw, job: str) -> dict:
    rows = conn.request({"id": 9, "op": "jobs"})["result"]["jobs"]
    return next(row for row in rows if row["id"] == job)
