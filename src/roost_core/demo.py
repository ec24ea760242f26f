"""``roost demo``: a small story played end to end through real processes.

A fresh temp ``ROOST_HOME`` is made for the run and deleted at the end, so the demo never
touches the user's own daemon or jobs. The client's auto-start launches a real daemon;
the daemon starts a real worker process per job. When the plugins that daemon will load
are not roost's default set, the demo says which and how to block them, first. Then:

1. a scripted job ("review the login module", bundled scenario ``demo-review``) says
   something, runs a tool call, then asks a question and settles as ``needs_input``;
2. the user replies and the job runs again to ``done``;
3. a ``shell`` job runs one command to ``done``;
4. :func:`demo_messaging`: a lead job spawns two children, answers one child's question
   with ``roost_send``, and gets every report by itself;
5. the jobs table, and each job's transcript rendered through the render plugin.

Then every job is stopped, the daemon is stopped, any worker left is killed and the temp
home is removed. Exit status 0 when the story ran, 1 (with what failed) otherwise; Ctrl-C
cleans up the same way, then the CLI exits 130.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SCENARIO = "demo-review"
REVIEW_TASK = "review the login module"
REVIEW_REPLY = "yes, switch it to hmac.compare_digest"
SHELL_TASK = "echo hello from a shell job"
STEP_TIMEOUT = 20.0


def heading(text: str) -> None:
    print(f"\n== {text}", flush=True)


def show(text: str) -> None:
    print(text, flush=True)


def demo_messaging(conn: Any, home: Path) -> None:
    """Agents messaging each other: a lead job spawns two children (``roost_spawn``), one
    asks a question that its report carries, the lead answers with ``roost_send``, and
    every report lands in the lead's transcript by itself."""
    from roost_core.cli_support import wait_for_job
    from roost_core.hosts.scripted import load_scenario
    from roost_core.treeview import render_by_dir

    heading("5. agents talking to each other")
    show('$ roost start "document and test login" --name lead --host scripted --scenario demo-team')
    lead = conn.call("start", task="document and test login", name="lead", host="scripted", cwd=str(home), scenario=load_scenario("demo-team"))["id"]
    show("the lead spawns two children; each report comes back without polling")
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        reports = [e for e in conn.call("log", job=lead, entries=True)["entries"] if (e.get("details") or {}).get("kind") == "report"]
        if len(reports) >= 3:
            break
        time.sleep(0.05)
    else:
        raise RuntimeError("the lead did not get its three reports")
    for row in conn.call("jobs")["jobs"]:
        if row["id"] != lead and row.get("parentSession"):
            wait_for_job(conn, row["id"], ("done", "failed", "needs_input"), STEP_TIMEOUT)
    wait_for_job(conn, lead, ("done", "failed"), STEP_TIMEOUT)
    show("$ roost agents")
    show(render_by_dir(conn.call("agents")["agents"]))


def run_demo() -> int:
    """Play the demo on a fresh temp home; 0 when it ran end to end, 1 otherwise."""
    from roost_core.client import connect

    home = Path(tempfile.mkdtemp(prefix="roost-demo-"))
    previous_home = os.environ.get("ROOST_HOME")
    os.environ["ROOST_HOME"] = str(home)
    conn = None
    step = "load the plugins"
    try:
        show(f"roost demo: a throwaway home at {home} (deleted at the end)")
        show_plugin_notes()
        step = "start the daemon"
        heading("1. the daemon")
        conn = connect()  # no daemon answers in a fresh home: this starts one
        status = conn.call("daemon_status")
        show(f"started by the client on first use: pid {status['pid']}, socket {status['socket']}")
        step = "the review job"
        play_review(conn, home)
        step = "the shell job"
        play_shell(conn, home)
        step = "messaging"
        demo_messaging(conn, home)
        step = "the jobs table and transcripts"
        show_results(conn)
        heading("done: the demo ran end to end")
        return 0
    except Exception as exc:  # noqa: BLE001 - the demo reports any failure and exits 1
        print(f"\nroost demo failed during {step}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        print_logs(home)
        return 1
    finally:
        # Ctrl-C (KeyboardInterrupt, reported by the CLI as exit 130) passes through here
        # too; a second one must not cut the cleanup short and leave the daemon behind.
        ignoring = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if ignoring else None
        try:
            cleanup(conn, home)
        finally:
            if ignoring:
                signal.signal(signal.SIGINT, previous)
        if previous_home is None:
            os.environ.pop("ROOST_HOME", None)
        else:
            os.environ["ROOST_HOME"] = previous_home


def show_plugin_notes() -> None:
    """Say so when the daemon the demo starts will not run roost's default plugins (an
    installed third-party plugin, a blocked default): the story then reads differently."""
    from roost_core.cli_support import local_manager
    from roost_core.plugins import plugin_notes

    # The demo's daemon inherits this environment and reads the throwaway home's (empty)
    # config, so this manager is built the way the daemon's will be.
    notes = plugin_notes(local_manager())
    if notes:
        show("note: this demo runs with a plugin set that is not roost's default, so what it prints may differ from the README:")
        for note in notes:
            show(f"- {note}")


def play_review(conn: Any, home: Path) -> str:
    from roost_core.cli_support import format_jobs, format_reply, format_started, wait_for_job
    from roost_core.hosts.scripted import load_scenario

    heading(f'2. a scripted job: "{REVIEW_TASK}"')
    show(f'$ roost start "{REVIEW_TASK}" --name reviewer --host scripted --scenario {SCENARIO}')
    started = conn.call("start", task=REVIEW_TASK, name="reviewer", host="scripted", cwd=str(home), scenario=load_scenario(SCENARIO))
    job: str = started["id"]
    show(format_started(started))
    show("$ roost wait reviewer --state needs_input")
    row = wait_for_job(conn, job, ("needs_input", "done", "failed"), STEP_TIMEOUT)
    expect(row, "needs_input")
    show(f"it looked at the code, then asked: {row['question']}")
    show("$ roost jobs")
    show(format_jobs(conn.call("jobs")["jobs"]))

    heading("3. the user replies")
    show(f'$ roost reply reviewer "{REVIEW_REPLY}"')
    result = conn.call("reply", job=job, text=REVIEW_REPLY)
    show(format_reply(result))
    show("$ roost wait reviewer")
    row = wait_for_job(conn, job, ("done", "failed"), STEP_TIMEOUT)
    expect(row, "done")
    show(f"{job}: done: {row['summary']}")
    return job


def play_shell(conn: Any, home: Path) -> str:
    from roost_core.cli_support import format_started, wait_for_job

    heading("4. a shell job (runs a command, no agent)")
    show(f'$ roost start "{SHELL_TASK}" --host shell')
    started = conn.call("start", task=SHELL_TASK, host="shell", cwd=str(home))
    job: str = started["id"]
    show(format_started(started))
    row = wait_for_job(conn, job, ("done", "failed"), STEP_TIMEOUT)
    expect(row, "done")
    show(f"{job}: done: {row['summary']}")
    return job


def show_results(conn: Any) -> None:
    from roost_core.cli_support import format_jobs, local_manager
    from roost_core.transcript import iter_rendered

    heading("6. all jobs")
    show("$ roost jobs")
    rows = conn.call("jobs")["jobs"]
    show(format_jobs(rows))
    pm = local_manager()
    for row in rows:
        heading(f"transcript of {row['id']} ({row['name']})")
        show(f"$ roost log {row['id']}")
        for text in iter_rendered(pm, conn.call("log", job=row["id"])["session"]):
            show(text)


def expect(row: dict[str, Any], state: str) -> None:
    if row["state"] != state:
        detail = row.get("error") or row.get("summary") or ""
        raise RuntimeError(f"job {row['id']} is {row['state']}, expected {state} {detail}".rstrip())


def print_logs(home: Path) -> None:
    """The tail of the daemon's and workers' logs, to see why a step failed."""
    state = home / "state"
    for path in [state / "daemon.log", *sorted((state / "jobs").glob("*.log"))]:
        try:
            lines = path.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            continue
        if lines:
            print(f"--- {path.name} (last lines)", file=sys.stderr)
            print("\n".join(lines), file=sys.stderr, flush=True)


def cleanup(conn: Any, home: Path) -> None:
    """Stop the jobs (their workers exit cleanly), stop the daemon, kill what is left,
    delete the temp home. Never raises."""
    from roost_core.locks import is_alive
    from roost_core.paths import resolve_paths

    paths = resolve_paths()
    daemon_pid = None
    if conn is not None:
        try:
            daemon_pid = conn.call("daemon_status")["pid"]
            for row in conn.call("jobs")["jobs"]:
                if row["live"]:
                    conn.call("stop", job=row["id"])
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(row["live"] for row in conn.call("jobs")["jobs"]):
                time.sleep(0.05)
            conn.call("daemon_stop")
        except Exception:  # noqa: BLE001 - best effort; the kills below still run
            pass
        conn.close()
    if daemon_pid is None:
        try:
            daemon_pid = int(paths.daemon_pidfile.read_text())
        except (OSError, ValueError):
            daemon_pid = None
    deadline = time.monotonic() + 5
    while daemon_pid is not None and is_alive(daemon_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [daemon_pid] if daemon_pid is not None and is_alive(daemon_pid) else []
    for record in paths.jobs_dir.glob("*.json"):
        try:
            pid = json.loads(record.read_text()).get("worker_pid")
        except (OSError, ValueError):
            continue
        if isinstance(pid, int) and is_alive(pid):
            pids.append(pid)
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    shutil.rmtree(home, ignore_errors=True)
