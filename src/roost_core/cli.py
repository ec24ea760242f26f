"""The ``roost`` command line. Heavy imports stay inside commands so ``--help`` is instant.

What the commands share with ``roost demo`` and ``roost view`` (the error boundary, job
lookups and waits, the printed lines) is in :mod:`roost_core.cli_support`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from roost_core import view
from roost_core import mcp as mcp_cli
from roost_core.claude import cli as claude_cli
from roost_core.cli_support import (
    SETTLED,
    TIMEOUT,
    CommandError,
    Parser,
    check_states,
    client,
    disabled_plugins,
    format_jobs,
    format_reply,
    format_started,
    guarded,
    local_manager,
    plugin_notes,
    user_config,
    wait_for_job,
)
from roost_core.pi import cli as pi_cli


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="roost", description="Background agent sessions that talk to each other.")
    parser.add_argument("--disable-plugin", action="append", default=[], metavar="NAME", help="block a plugin by name (repeatable)")
    sub = parser.add_subparsers(dest="command", required=True)

    daemon = sub.add_parser("daemon", help="run the daemon in the foreground, or control it")
    daemon.add_argument("action", nargs="?", choices=["run", "status", "stop", "socket"], default="run",
                        help="socket: print the socket path, starting the daemon if needed")
    daemon.add_argument("--json", action="store_true")

    start = sub.add_parser("start", help="start a background session (job)")
    start.add_argument("task")
    start.add_argument("--name")
    start.add_argument("--cwd")
    start.add_argument("--host", help="scripted, shell or pi (default: defaultHost from the config, else pi when it is installed)")
    start.add_argument("--scenario", help="scripted host: a scenario file, TOML text or a bundled name (demo-review, demo-team)")
    start.add_argument("--model")
    start.add_argument("--thinking")
    start.add_argument("--json", action="store_true")

    jobs = sub.add_parser("jobs", help="list jobs")
    jobs.add_argument("--json", action="store_true")

    agents = sub.add_parser("agents", help="show the agent tree")
    agents.add_argument("--group", choices=["dir", "state"], default="dir")
    agents.add_argument("--json", action="store_true")

    reply = sub.add_parser("reply", help="send a job a user reply")
    reply.add_argument("id")
    reply.add_argument("text")
    reply.add_argument("--json", action="store_true")

    for name, text in (("stop", "stop a job (it is not woken by messages)"), ("rm", "remove a job")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("id")
        cmd.add_argument("--json", action="store_true")

    log = sub.add_parser("log", help="show a job's transcript")
    log.add_argument("id")
    log.add_argument("--json", action="store_true", help="entries (with trace and hops) and the job's sent-item receipts")
    log.add_argument("--follow", "-f", action="store_true", help="keep printing entries as the transcript grows")

    dead = sub.add_parser("dead", help="agent items that can never be delivered, with the reason")
    dead.add_argument("--json", action="store_true")

    wait = sub.add_parser("wait", help="wait until a job settles (not running)")
    wait.add_argument("id")
    wait.add_argument("--state", action="append", help="wait for this state (repeatable): running, idle, needs_input, done, failed or stopped")
    wait.add_argument("--timeout", type=float, default=60.0)
    wait.add_argument("--json", action="store_true")

    plugins = sub.add_parser("plugins", help="list plugins")
    plugins.add_argument("--json", action="store_true")

    sub.add_parser("demo", help="play a small scenario end to end on a fresh temp home")
    view.add_parser(sub)
    pi_cli.add_parser(sub)
    claude_cli.add_parser(sub)
    mcp_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.disable_plugin:
        os.environ["ROOST_DISABLE_PLUGINS"] = ",".join([*disabled_plugins(), *args.disable_plugin])
    handler = COMMANDS[args.command]
    return guarded(lambda: handler(args))


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, ensure_ascii=False, indent=2))
    else:
        print(text)


def cmd_daemon(args: argparse.Namespace) -> int:
    from roost_core.client import Client, DaemonUnavailable
    from roost_core.paths import resolve_paths

    paths = resolve_paths()
    if args.action == "socket":
        return pi_cli.socket_command()
    if args.action == "run":
        from roost_core.daemon import run_daemon

        return run_daemon(paths, disabled=disabled_plugins())
    try:
        with Client(paths.socket, timeout=10) as conn:
            if args.action == "status":
                status = conn.call("daemon_status")
                emit(args, {"running": True, **status}, f"running: pid {status['pid']}, {status['jobs']} jobs, {status['live_workers']} live workers, socket {status['socket']}")
                return 0
            conn.call("daemon_stop")
    except DaemonUnavailable:
        emit(args, {"running": False}, "not running")
        return 1 if args.action == "status" else 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            Client(paths.socket, timeout=1).close()
        except DaemonUnavailable:
            emit(args, {"stopped": True}, "stopped")
            return 0
        time.sleep(0.05)
    raise CommandError(TIMEOUT, "the daemon did not stop within 10s")


def cmd_start(args: argparse.Namespace) -> int:
    from roost_core.hosts.scripted import load_scenario

    request: dict[str, Any] = {"task": args.task, "cwd": str(Path(args.cwd or os.getcwd()).resolve())}
    for key in ("name", "host", "model", "thinking"):
        if getattr(args, key):
            request[key] = getattr(args, key)
    if args.scenario:
        # Parsed here, so the job does not depend on the caller's cwd or files later.
        request["scenario"] = load_scenario(args.scenario)
    with client() as conn:
        result = conn.call("start", **request)
    emit(args, result, format_started(result))
    for warning in result.get("warnings", ()):
        print(f"roost: warning: {warning}", file=sys.stderr)
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    with client() as conn:
        rows = conn.call("jobs")["jobs"]
    emit(args, rows, format_jobs(rows))
    return 0


def cmd_agents(args: argparse.Namespace) -> int:
    from roost_core.treeview import render_by_dir, render_by_state

    with client() as conn:
        rows = conn.call("agents")["agents"]
    emit(args, rows, render_by_dir(rows) if args.group == "dir" else render_by_state(rows))
    return 0


def cmd_reply(args: argparse.Namespace) -> int:
    with client() as conn:
        result = conn.call("reply", job=args.id, text=args.text)
    emit(args, result, format_reply(result))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    with client() as conn:
        result = conn.call("stop", job=args.id)
    emit(args, result, f"{result['id']}: stopped (was {result['was']})")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    with client() as conn:
        result = conn.call("remove", job=args.id)
    emit(args, result, f"{result['id']}: removed")
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    from roost_core.transcript import iter_rendered, read_entries

    with client() as conn:
        result = conn.call("log", job=args.id)
    if args.json:
        print(json.dumps({"id": result["id"], "session": result["session"], "entries": read_entries(result["session"]), "sent": result.get("sent", [])}, ensure_ascii=False, indent=2))
        return 0
    pm = local_manager()
    if args.follow:
        return follow_log(pm, result["session"])
    for text in iter_rendered(pm, result["session"]):
        print(text)
    return 0


def follow_log(pm: Any, session: str, *, poll: float = 0.1) -> int:
    """Print a transcript, then each entry as it is appended (until Ctrl-C)."""
    from roost_core.policy import render_entry
    from roost_core.transcript import parse_entries

    offset = 0
    partial = b""
    try:
        while True:
            try:
                with open(session, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read()
            except FileNotFoundError:
                data = b""
            if data:
                offset += len(data)
                lines = (partial + data).split(b"\n")
                partial = lines.pop()  # an entry still being written
                for line in lines:
                    try:
                        raw = json.loads(line)
                    except ValueError:
                        continue
                    for entry in parse_entries(raw) if isinstance(raw, dict) else ():
                        text = render_entry(pm, entry)
                        if text:
                            print(text, flush=True)
            else:
                time.sleep(poll)
    except KeyboardInterrupt:
        return 0


def cmd_dead(args: argparse.Namespace) -> int:
    with client() as conn:
        letters = conn.call("dead")["dead"]
    lines = [f"{d['sender']} → {d['toName']} ({d['to']})  {d['kind']}  {d['reason']}  {d['preview']!r}" for d in letters]
    emit(args, letters, "\n".join(lines) if lines else "no dead letters")
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    # Checked before anything else: a state no job can reach would wait out the timeout.
    states = check_states(args.state) if args.state else SETTLED
    with client() as conn:
        row = wait_for_job(conn, args.id, states, args.timeout)
    emit(args, row, f"{row['id']}: {row['state']}")
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    """Name, version, source and hooks of every loaded plugin, then the blocked names, then
    how the set differs from roost's defaults (and how to change that)."""
    from roost_core.plugins import blocked_plugins, describe_plugins, known_plugin_names

    config, config_file = user_config()
    pm = local_manager(config)
    rows = describe_plugins(pm)
    blocked = blocked_plugins(pm)
    unknown = sorted(set(blocked) - known_plugin_names())
    table = [("NAME", "VERSION", "SOURCE", "HOOKS")]
    table += [(row["name"], row["version"] or "-", row["source"], ", ".join(row["hooks"]) or "-") for row in rows]
    widths = [max(len(line[column]) for line in table) for column in range(3)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line[:3], widths)) + "  " + line[3] for line in table]
    if blocked:
        lines.append("blocked: " + ", ".join(f"{name} (no such plugin)" if name in unknown else name for name in blocked))
    notes = plugin_notes(pm, config, config_file)
    if notes:
        lines += ["", "not the default set:", *(f"- {note}" for note in notes)]
    emit(args, {"plugins": rows, "blocked": blocked, "unknown_blocked": unknown, "notes": notes}, "\n".join(lines))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from roost_core.demo import run_demo

    return run_demo()


COMMANDS = {
    "daemon": cmd_daemon,
    "start": cmd_start,
    "jobs": cmd_jobs,
    "agents": cmd_agents,
    "reply": cmd_reply,
    "stop": cmd_stop,
    "rm": cmd_rm,
    "log": cmd_log,
    "wait": cmd_wait,
    "plugins": cmd_plugins,
    "dead": cmd_dead,
    "view": view.run,
    "pi": pi_cli.run,
    "claude": claude_cli.run,
    "mcp": mcp_cli.run,
    "demo": cmd_demo,
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
