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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roost_core import __version__, view
from roost_core import attach as attach_cli
from roost_core import mcp as mcp_cli
from roost_core import web as web_cli
from roost_core.cli_support import (
    EXIT_INTERRUPTED,
    FLAG_DISABLED,
    SETTLED,
    TIMEOUT,
    CommandError,
    Parser,
    UsageError,
    check_states,
    client,
    disabled_plugins,
    format_answer,
    format_jobs,
    format_reply,
    format_started,
    guarded,
    host_names,
    keyed_call,
    local_hosts,
    local_manager,
    make_missing_home,
    read_text,
    socket_command,
    user_config,
    wait_for_job,
)
from roost_core.cli_workspace import removed_lines, started_lines
from roost_core.names import json_text, shown

#: What ``roost --help`` ends with: the exit statuses every command keeps.
EXIT_STATUSES = """exit status:
  0    ok
  1    error: one line on stderr, roost: CODE: message
  2    usage error
  124  timeout (roost wait, roost daemon stop)
  130  interrupted (Ctrl-C)
  141  output closed (roost jobs | head -1): nothing said"""

JSON_HELP = "print the result as JSON"
ID_HELP = "the job: its id, or its exact name"


class LazyText:
    """Text made when it is printed: ``--host``'s help lists the registered hosts, which
    means loading the plugins, and only ``--help`` should pay for that."""

    def __init__(self, make: Callable[[], str]) -> None:
        self.make = make

    def __str__(self) -> str:
        return self.make()


def build_parser(*, with_hosts: bool = True) -> argparse.ArgumentParser:
    """The ``roost`` parser; ``with_hosts`` adds the registered hosts' own commands
    (``roost pi ...``, ``roost claude ...``: :func:`add_host_commands`), which loads the
    plugins: a command of roost's own goes without them."""
    parser = Parser(
        prog="roost",
        description="Background agent sessions that talk to each other.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", "-V", action="version", version=f"roost {__version__}", help="print roost's version and exit")
    parser.add_argument("--disable-plugin", action="append", default=[], metavar="NAME", help="block a plugin by name (repeatable)")
    # A host's own command sets its run here (add_host_commands); roost's are in COMMANDS.
    parser.set_defaults(host_command=None)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    daemon = sub.add_parser("daemon", help="run the daemon in the foreground, or control it")
    daemon.add_argument("action", nargs="?", choices=["run", "status", "stop", "socket", "reload"], default="run",
                        help="run (default): in the foreground; status; stop; socket: print the socket path, starting the daemon if needed; "
                        "reload: read the user config again (the daemon does when the file changes) and say whether it is in force")
    daemon.add_argument("--jobs", action="store_true",
                        help="stop: also end every job's worker and what it started (running jobs are stopped, settled ones "
                        "keep their state and wake under the next daemon). Without it the workers keep running and wait "
                        "up to 5 minutes for a new daemon")
    daemon.add_argument("--json", action="store_true", help=JSON_HELP)

    start = sub.add_parser("start", help="start a background session (job)")
    add_text_arguments(start, "task", "the task (- reads it from stdin)", "read the task from a file (- for stdin)")
    start.add_argument("--name", help="the job's name (default: from the task); refused if another job has it")
    start.add_argument("--cwd", metavar="DIR", help="the folder the job works in (default: this one)")
    host = start.add_argument(
        "--host",
        help="the agent that runs the job: %(hosts)s (default: defaultHost from the project or user config, else pi when it is installed)",
    )
    # argparse fills %(hosts)s in from the action's attributes.
    vars(host)["hosts"] = LazyText(lambda: ", ".join(host_names()))
    start.add_argument("--scenario", help="scripted host: a scenario file, TOML text or a bundled name (demo-review, demo-team)")
    start.add_argument("--model", help="the model the agent uses (pi, claude; default: the project's defaultModel, else the agent's own)")
    start.add_argument("--thinking", metavar="LEVEL", help="the agent's thinking level (pi; claude: its effort; default: the project's defaultThinking)")
    start.add_argument("--worktree", action="store_true", help="run it in a new git worktree of the folder's repository, on a branch of its own (roost/NAME)")
    start.add_argument("--base", choices=["head", "carry"], help="--worktree from the repository's HEAD (default), or carry its uncommitted changes in too")
    start.add_argument("--json", action="store_true", help=JSON_HELP)

    jobs = sub.add_parser("jobs", help="list jobs")
    jobs.add_argument("--json", action="store_true", help=JSON_HELP)

    agents = sub.add_parser("agents", help="show the agent tree")
    agents.add_argument("--group", choices=["dir", "state"], default="dir", help="group by working folder (default) or by state")
    agents.add_argument("--json", action="store_true", help=JSON_HELP)

    reply = sub.add_parser("reply", help="send a job a user reply")
    reply.add_argument("id", help=ID_HELP)
    add_text_arguments(reply, "text", "the reply (- reads it from stdin)", "read the reply from a file (- for stdin)")
    reply.add_argument("--restart", action="store_true", help="a stopped shell job: run this reply as a command all the same (it is refused otherwise)")
    reply.add_argument("--json", action="store_true", help=JSON_HELP)

    answer = sub.add_parser("answer", help="answer a job's open dialog (a confirm, a choice, a permission prompt); without an answer, show it")
    answer.add_argument("id", help=ID_HELP)
    answer.add_argument("answer", nargs="?", help="one of the dialog's options (or its number), or the text an open question asks for")
    answer.add_argument("--json", action="store_true", help=JSON_HELP)

    for name, text in (("stop", "stop a job (it is not woken by messages)"), ("rm", "remove a job")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("id", help=ID_HELP)
        cmd.add_argument("--json", action="store_true", help=JSON_HELP)
        if name == "rm":
            cmd.add_argument("--force", action="store_true", help="also drop its worktree's work that is not merged anywhere (its branch and uncommitted changes)")
            cmd.add_argument("--keep-workspace", action="store_true", help="remove the job but keep its worktree and branch as they are")

    log = sub.add_parser("log", help="show a job's transcript")
    log.add_argument("id", help=ID_HELP)
    log.add_argument("--json", action="store_true", help="entries (with trace and hops) and the receipts of the items the job sent and received")
    log.add_argument("--follow", "-f", action="store_true", help="keep printing entries as the transcript grows")

    dead = sub.add_parser("dead", help="agent items that can never be delivered, with the reason")
    dead.add_argument("--json", action="store_true", help=JSON_HELP)

    wait = sub.add_parser("wait", help="wait until a job settles (not running)")
    wait.add_argument("id", help=ID_HELP)
    wait.add_argument("--state", action="append", help="wait for this state (repeatable): running, idle, needs_input, done, failed or stopped")
    wait.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="give up after this long (default 60): roost: timeout, exit 124")
    wait.add_argument("--json", action="store_true", help=JSON_HELP)

    plugins = sub.add_parser("plugins", help="list plugins")
    plugins.add_argument("--json", action="store_true", help=JSON_HELP)

    sub.add_parser("demo", help="play a small scenario end to end on a fresh temp home")
    view.add_parser(sub)
    attach_cli.add_parser(sub)
    web_cli.add_parser(sub)
    mcp_cli.add_parser(sub)
    if with_hosts:
        add_host_commands(sub)

    from roost_core.completion import JOBS_COMMAND, SHELLS

    completion = sub.add_parser("completion", help="print a shell completion script: eval \"$(roost completion bash)\"")
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    # The completion script's own (no help: not listed): job ids and names to complete.
    sub.add_parser(JOBS_COMMAND)
    return parser


def add_host_commands(sub: Any) -> None:
    """``roost NAME ...`` for each registered host with a command of its own
    (``HostSpec.command``: an install command, for one), under the host's name. A host
    whose name is a command of roost's own gets none (roost's is kept)."""
    for name, spec in local_hosts().items():
        if spec.command is None or name in COMMANDS:
            continue
        command = sub.add_parser(name, help=spec.command.help)
        spec.command.add_arguments(command)
        command.set_defaults(host_command=spec.command.run)


def command_named(argv: list[str]) -> tuple[str | None, list[str]]:
    """The command ``argv`` names (its first word that is not an option or an option's
    value; None for none, ``roost --help``) and the plugins its ``--disable-plugin``
    options block: read before the parser is built, since the hosts' commands come from
    the plugins that are not blocked."""
    command, blocked = None, []
    words = iter(argv)
    for word in words:
        if word == "--disable-plugin":
            blocked.append(next(words, ""))
        elif word.startswith("--disable-plugin="):
            blocked.append(word.partition("=")[2])
        elif not word.startswith("-"):
            command = word
            break
    return command, [name for name in blocked if name]


def add_text_arguments(parser: argparse.ArgumentParser, name: str, text_help: str, file_help: str) -> None:
    """A long text's two ways in beside argv (which holds at most 128 KiB an argument):
    ``-`` for stdin, or ``--file F``; exactly one of the three. The text is sent as it
    is read (no newline stripped)."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(name, nargs="?", help=text_help)
    group.add_argument("--file", metavar="FILE", help=file_help)


#: The commands that run a daemon of their own (in the foreground, or the demo's in its
#: throwaway home): ``--disable-plugin`` sets that daemon's plugins. On every other
#: command it blocks the plugin in the command's own set only.
OWN_DAEMON = frozenset({"daemon", "demo"})


def main(argv: list[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        command, blocked = command_named(argv)
        if command not in COMMANDS:
            # A host's own command (or --help) comes from the plugins this command runs: a
            # host blocked here has none. (Never a daemon's set: see below.)
            FLAG_DISABLED.extend(blocked)
        # The hosts' commands load the plugins: only when the command is not roost's own.
        parser = build_parser(with_hosts=command not in COMMANDS)
        args = parser.parse_args(argv)
        if args.command == "daemon" and args.jobs and args.action != "stop":
            parser.error("--jobs goes with `roost daemon stop`")
        if args.disable_plugin:
            if args.command in OWN_DAEMON:
                # The daemon this command runs, and its workers, start with them blocked.
                os.environ["ROOST_DISABLE_PLUGINS"] = ",".join([*disabled_plugins(), *args.disable_plugin])
            else:
                # This command's own plugins only: never a daemon it happens to start.
                FLAG_DISABLED.extend(name for name in args.disable_plugin if name not in FLAG_DISABLED)
        handler = COMMANDS.get(args.command, args.host_command)
        return guarded(lambda: run_command(handler, args))
    except KeyboardInterrupt:
        # Ctrl-C outside a command's own run (guarded handles it there): the same line.
        print("roost: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


#: roost's commands that keep nothing in the home: completion (a tab press makes no
#: folder) and the demo (a throwaway home of its own).
NO_HOME = frozenset({"completion", "_jobs", "demo"})


def run_command(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run ``handler``, after making a missing ``ROOST_HOME`` (said once) for a command of
    roost's own that keeps its files there."""
    if args.command in COMMANDS and args.command not in NO_HOME:
        make_missing_home()
    return handler(args)


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json_text(data))
    else:
        print(text)


def cmd_daemon(args: argparse.Namespace) -> int:
    from roost_core.client import Client, DaemonUnavailable
    from roost_core.paths import resolve_paths

    paths = resolve_paths()
    if args.action == "socket":
        return socket_command()
    if args.action == "run":
        from roost_core.daemon import run_daemon

        return run_daemon(paths, disabled=disabled_plugins())
    try:
        # With --jobs the daemon answers once the workers are gone (each gets a grace).
        with Client(paths.socket, timeout=30 if args.jobs else 10) as conn:
            if args.action == "status":
                status = conn.call("daemon_status")
                line = f"running: pid {status['pid']}, {status['jobs']} jobs, {status['live_workers']} live workers, socket {status['socket']}"
                emit(args, {"running": True, **status}, line + config_text(status.get("config") or {}))
                return 0
            if args.action == "reload":
                config = conn.call("daemon_reload")
                emit(args, config, f"config {config['file']} in force" + config_text(config))
                return 0
            answer = conn.call("daemon_stop", jobs=True) if args.jobs else conn.call("daemon_stop")
            ended: dict[str, Any] = {key: answer[key] for key in ("stoppedJobs", "reapedJobs", "liveWorkers") if key in answer}
    except DaemonUnavailable:
        if args.action == "stop" and args.jobs:
            # No daemon: the workers a stopped (or dead) daemon left wait for the next
            # one; the user asked for them to end, so end them here.
            killed = end_orphan_workers(paths)
            emit(args, {"running": False, "endedWorkers": killed}, f"not running; ended {len(killed)} worker(s) left waiting for a daemon")
            return 0
        emit(args, {"running": False}, "not running")
        return 1 if args.action in ("status", "reload") else 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            Client(paths.socket, timeout=1).close()
        except DaemonUnavailable:
            emit(args, {"stopped": True, **ended}, "stopped" + describe_ended(ended))
            return 0
        time.sleep(0.05)
    raise CommandError(TIMEOUT, "the daemon did not stop within 10s")


def config_text(config: dict[str, Any]) -> str:
    """What ``daemon status`` and ``daemon reload`` add of the user config: that the file
    is refused and why, and keys that wait for the next daemon start."""
    text = ""
    if config.get("refused"):
        text += f"\nconfig refused (the config read before stays in force): {config['refused']}"
    if config.get("atNextStart"):
        text += f"\nconfig: {', '.join(config['atNextStart'])} changed; in force at the next daemon start"
    return text


def describe_ended(ended: dict[str, Any]) -> str:
    """What ``daemon stop --jobs`` ended, for its line (nothing without ``--jobs``)."""
    if not ended:
        return ""
    text = f"; ended the workers of {len(ended['stoppedJobs']) + len(ended['reapedJobs'])} job(s)"
    if ended["stoppedJobs"]:
        text += f" (stopped, they were running: {', '.join(ended['stoppedJobs'])})"
    if ended["liveWorkers"]:
        text += f"; still alive: {', '.join(ended['liveWorkers'])}"
    return text


def end_orphan_workers(paths: Any) -> list[int]:
    """End the workers the job records name that still run with no daemon (each waits up
    to ``ROOST_WORKER_ORPHAN_SECONDS`` for one): SIGTERM to its process group (the
    worker ends what it started), SIGKILL after a grace, then whatever carries its mark.
    Returns the pids ended. The next daemon sees them gone, as after a crash."""
    import signal

    from roost_core.locks import is_alive
    from roost_core.worker import proctree

    workers = []
    for record in sorted(paths.jobs_dir.glob("*.json")):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        pid, created = data.get("worker_pid"), data.get("worker_create_time")
        if isinstance(pid, int) and is_alive(pid, created):
            workers.append((pid, created, data.get("worker_mark")))
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid, created, _ in workers:
            if is_alive(pid, created):
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signum)
                        break
                    except (ProcessLookupError, PermissionError):
                        continue
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and any(is_alive(pid, created) for pid, created, _ in workers):
            time.sleep(0.05)
    for _, _, mark in workers:
        if mark:
            proctree.kill_marked(mark)
    return [pid for pid, _, _ in workers]


def cmd_start(args: argparse.Namespace) -> int:
    from roost_core.hosts.scripted import load_scenario
    from roost_core.protocol import NO_HOST, ProtocolError

    request: dict[str, Any] = {"task": read_text(args.task, args.file, "task"), "cwd": str(Path(args.cwd or os.getcwd()).resolve())}
    for key in ("name", "host", "model", "thinking", "base"):
        if getattr(args, key):
            request[key] = getattr(args, key)
    if args.worktree or args.base:
        request["workspace"] = "worktree"
    if args.scenario:
        # Parsed here, so the job does not depend on the caller's cwd or files later.
        request["scenario"] = load_scenario(args.scenario)
    try:
        result = keyed_call("start", **request)
    except ProtocolError as exc:
        if exc.code == NO_HOST:
            raise ProtocolError(NO_HOST, exc.message + found_here(args.host)) from None
        raise
    emit(args, result, "\n".join([format_started(result), *started_lines(result.get("workspace"))]))
    for warning in result.get("warnings", ()):
        print(f"roost: warning: {shown(warning)}", file=sys.stderr)
    return 0


def found_here(host: str | None) -> str:
    """For a ``no_host`` refusal: where this shell finds the program of ``host`` (of the
    default agents when none is named), which the daemon, looking on the PATH it was
    started with, does not; empty when this shell finds none either."""
    import shutil

    names = [host] if host else [name for name, spec in local_hosts().items() if spec.default_agent]
    for name in names:
        found = shutil.which(name)
        if found:
            return (
                f". This shell finds `{name}` at {found}, but the daemon looks on the PATH it was started with: "
                "stop it (roost daemon stop) and the next roost command starts it with this shell's PATH"
            )
    return ""


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
    text = read_text(args.text, args.file, "reply")  # read first: a bad file starts no daemon
    result = keyed_call("reply", job=args.id, text=text, **({"restart": True} if args.restart else {}))
    emit(args, result, format_reply(result))
    return 0


def cmd_answer(args: argparse.Namespace) -> int:
    """``roost answer JOB [ANSWER]``: the dialog with its options, or the answer given."""
    if args.answer is None:
        with client() as conn:
            result = conn.call("answer", job=args.id)
    else:
        result = keyed_call("answer", job=args.id, text=args.answer)
    emit(args, result, format_answer(result))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    with client() as conn:
        result = conn.call("stop", job=args.id)
    failure = f"; it had failed ({result['error']}), as roost jobs still shows" if result.get("stoppedFrom") == "failed" and result["was"] == "failed" else ""
    emit(args, result, f"{result['id']}: stopped (was {result['was']}){failure}")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    flags = {key: True for key, given in (("force", args.force), ("keepWorkspace", args.keep_workspace)) if given}
    with client() as conn:
        result = conn.call("remove", job=args.id, **flags)
    emit(args, result, "\n".join([f"{result['id']}: removed", *removed_lines(result.get("workspace"))]))
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    from roost_core.hosts import registered_hosts, session_lines, transcript_reader
    from roost_core.transcript import iter_rendered, received_by_seq

    with client() as conn:
        result = conn.call("log", job=args.id)
    pm = local_manager()
    # The job's host says where its transcript is and how it reads (roost's own format
    # in the one session file when it says nothing).
    spec = registered_hosts(pm).get(result.get("host") or "")
    lines = session_lines(spec, result["session"])
    if args.json:
        print(json_text({
            "id": result["id"], "session": result["session"], "entries": lines,
            "sent": result.get("sent", []), "received": result.get("received", []),
        }))
        return 0
    read = transcript_reader(spec)
    if args.follow:
        return follow_log(pm, result["session"], read)
    printed = False
    for text in iter_rendered(pm, result["session"], read, received_by_seq(result.get("received")), lines):
        print(shown(text, keep=LOG_KEEPS))
        printed = True
    if not printed and result.get("task") is not None:
        # Nothing in the transcript yet (an agent that failed before its first answer
        # wrote none): the task as the job record keeps it.
        print(shown(f"› you: {result['task']}", keep=LOG_KEEPS))
    if result.get("state") == "failed":
        print(shown(f"✗ failed: {result.get('error') or 'no error given'}", keep=LOG_KEEPS))
    return 0


#: What ``roost log`` draws as it is: line breaks and tabs (a transcript's text and tool
#: output); every other control, bidi or invisible format character (in a sender's name,
#: in an agent's words) is drawn as an escape (``names.shown``).
LOG_KEEPS = "\n\t"


def follow_log(pm: Any, session: str, read: Any, *, poll: float = 0.1) -> int:
    """Print a transcript, then each entry as it is appended, until Ctrl-C (which the
    command's error boundary reports: ``roost: interrupted``, exit 130); ``read`` is how
    one of its lines reads (the host's)."""
    from roost_core.policy import render_entry

    offset = 0
    partial = b""
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
                for entry in read(raw) if isinstance(raw, dict) else ():
                    text = render_entry(pm, entry)
                    if text:
                        print(shown(text, keep=LOG_KEEPS), flush=True)
        else:
            time.sleep(poll)


def cmd_dead(args: argparse.Namespace) -> int:
    with client() as conn:
        letters = conn.call("dead")["dead"]
    lines = [f"{shown(d['sender'])} → {shown(d['toName'] or '')} ({d['to']})  {d['kind']}  {d['reason']}  {d['preview']!r}" for d in letters]
    emit(args, letters, "\n".join(lines) if lines else "no dead letters")
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    # Checked before anything else: a state no job can reach would wait out the timeout.
    # A usage error, as argparse's own are (exit 2).
    try:
        states = check_states(args.state) if args.state else SETTLED
    except CommandError as exc:
        raise UsageError(exc.message) from exc
    with client() as conn:
        row = wait_for_job(conn, args.id, states, args.timeout)
    emit(args, row, f"{row['id']}: {row['state']}")
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    """The running daemon's plugins (name, version, source and hooks of each loaded one),
    then the blocked names, how the set differs from roost's defaults and how this
    command's own set (which renders `roost log` and `roost view`) differs from the
    daemon's. With no daemon running: this command's set, said so (nothing is started)."""
    from roost_core.client import DaemonUnavailable, connect
    from roost_core.plugins import plugin_notes, plugin_set, set_differences

    config, config_file = user_config()
    pm = local_manager(config)
    local = {**plugin_set(pm), "notes": plugin_notes(pm, config, config_file)}
    try:
        with connect(autostart=False) as conn:
            daemon: dict[str, Any] | None = conn.call("plugins")
    except DaemonUnavailable:
        daemon = None
    shown = daemon if daemon is not None else local
    differs = set_differences(daemon, local) if daemon is not None else []
    table = [("NAME", "VERSION", "SOURCE", "HOOKS")]
    table += [(row["name"], row["version"] or "-", row["source"], ", ".join(row["hooks"]) or "-") for row in shown["plugins"]]
    widths = [max(len(line[column]) for line in table) for column in range(3)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line[:3], widths, strict=True)) + "  " + line[3] for line in table]
    unknown = shown["unknown_blocked"]
    if shown["blocked"]:
        lines.append("blocked: " + ", ".join(f"{name} (no such plugin)" if name in unknown else name for name in shown["blocked"]))
    if daemon is not None:
        lines.append(f"(the set the daemon, pid {daemon['pid']}, runs)")
    else:
        lines.append("(no daemon is running: this command's own set; a daemon started by a command runs the config's set and ROOST_DISABLE_PLUGINS, without --disable-plugin)")
    if shown["notes"]:
        lines += ["", "not the default set:", *(f"- {note}" for note in shown["notes"])]
    if differs:
        lines += ["", "this command's own set differs (it renders `roost log` and `roost view` here):", *(f"- {note}" for note in differs)]
    data = {key: shown[key] for key in ("plugins", "blocked", "unknown_blocked", "notes")}
    data["daemon"] = daemon["pid"] if daemon is not None else None
    data["differs"] = differs
    emit(args, data, "\n".join(lines))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from roost_core.demo import run_demo

    return run_demo()


def cmd_job_refs(args: argparse.Namespace) -> int:
    """``roost _jobs``: what the completion script completes a job with."""
    from roost_core.completion import print_job_refs

    return print_job_refs()


def cmd_completion(args: argparse.Namespace) -> int:
    """Print the completion script for ``args.shell``, made from this parser."""
    from roost_core.completion import script
    from roost_core.records import JOB_STATES

    print(script(args.shell, build_parser(), {"host": host_names(), "state": JOB_STATES}), end="")
    return 0


COMMANDS = {
    "daemon": cmd_daemon,
    "start": cmd_start,
    "jobs": cmd_jobs,
    "agents": cmd_agents,
    "reply": cmd_reply,
    "answer": cmd_answer,
    "stop": cmd_stop,
    "rm": cmd_rm,
    "log": cmd_log,
    "wait": cmd_wait,
    "plugins": cmd_plugins,
    "dead": cmd_dead,
    "view": view.run,
    "attach": attach_cli.run,
    "web": web_cli.run,
    "mcp": mcp_cli.run,
    "demo": cmd_demo,
    "completion": cmd_completion,
    "_jobs": cmd_job_refs,
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
