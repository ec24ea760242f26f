"""What the ``roost`` commands share. :mod:`~roost_core.cli`, :mod:`~roost_core.demo` and
:mod:`~roost_core.view` sit side by side above this module and never import each other.

- the error boundary: every failure is one line, ``roost: CODE: message`` (:func:`guarded`),
  and the exit statuses (:data:`EXIT_ERROR`...);
- the daemon connection (:func:`client`) and the plugin manager the CLI renders with
  (:func:`local_manager`);
- job references: :func:`find_job` resolves an id or name by the daemon's own rule
  (``routing.resolve_ref``), and :func:`wait_for_job` waits on what it found;
- the lines the commands print: :func:`format_jobs`, :func:`format_started`,
  :func:`format_reply`, :func:`plugin_notes`.

Only the standard library is imported at module level (``roost --help`` stays instant).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

from roost_core.dialogs import dialog_line, options_text
from roost_core.names import shell_word, shown
from roost_core.peerstate import background_text, progress_text
from roost_core.protocol import BAD_CONFIG

#: States in which a job is not running: what ``roost wait`` waits for by default.
SETTLED = ("idle", "needs_input", "done", "failed", "stopped")
#: States after which a job has nothing left to do until someone replies.
FINISHED = ("done", "failed", "stopped")

# Exit statuses of every ``roost`` command besides 0, success (README, docs/protocol.md
# "Exit statuses").
#: An error: ``roost: CODE: message`` on stderr.
EXIT_ERROR = 1
#: A usage error (argparse's): the usage, then ``roost: bad_args: message``.
EXIT_USAGE = 2
#: A wait ran out of time (``roost: timeout: ...``), as timeout(1) exits.
EXIT_TIMEOUT = 124
#: Interrupted (Ctrl-C, SIGINT): 128 + 2, as a shell reports it.
EXIT_INTERRUPTED = 130
#: Its output was closed (``roost jobs | head -1``, EPIPE): 128 + SIGPIPE, what a shell
#: reports for a program SIGPIPE ended, and nothing said (the reader wanted no more).
EXIT_OUTPUT_CLOSED = 141

# Codes of errors the CLI finds itself (the daemon's are in docs/protocol.md).
#: A wait ran out of time.
TIMEOUT = "timeout"
#: No daemon answers and none could be started.
UNAVAILABLE = "unavailable"
#: ``ROOST_HOME`` (or a folder roost keeps its files in) is a file or cannot be made.
BAD_HOME = "bad_home"
#: A third-party plugin failed to load and ``ROOST_STRICT_PLUGINS=1``.
PLUGIN_ERROR = "plugin_error"
#: A host's install command (``roost claude install``, ``roost pi install``) could not
#: write one of its agent's settings files (the files written before it are put back).
WRITE_FAILED = "write_failed"


class CommandError(Exception):
    """A failure a command reports as ``roost: CODE: message`` (exit status 1, or 124
    for ``timeout``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def error_line(code: str, message: str) -> str:
    """The one line a failure prints: the message (which may quote a name or a path as
    given) drawn safely, control, bidi and line-separator characters as escapes."""
    return f"roost: {code}: {shown(message)}"


class UsageError(CommandError):
    """A usage error found after argparse (a value it cannot check itself): ``roost:
    bad_args: message``, exit status 2, as argparse's own."""

    def __init__(self, message: str) -> None:
        super().__init__("bad_args", message)


class Parser(argparse.ArgumentParser):
    """argparse, with its errors in the same shape as every other: the usage, then
    ``roost: bad_args: message`` (exit status 2, argparse's)."""

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(2, error_line("bad_args", message) + "\n")


def guarded(run: Callable[[], int]) -> int:
    """Run a command; any failure it meets is printed as ``roost: CODE: message`` on
    stderr and gives exit status 1 (124 for a ``timeout``); Ctrl-C gives
    ``roost: interrupted`` and 130, never a traceback; a closed stdout ends it quietly
    with 141 (:func:`output_closed`); a :class:`UsageError` gives 2. The one error
    boundary of every ``roost`` command."""
    try:
        status = run()
        # What is still buffered is written here, inside the boundary: a reader that
        # went away is seen now, not as a traceback when the interpreter exits.
        sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        print("roost: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The daemon's connection never raises this bare (the client makes every socket
        # failure a DaemonUnavailable): it is this process's own output that was closed.
        return output_closed()
    except Exception as exc:
        # The classes are imported only now: a command that succeeds never pays for them.
        code_message = classify(exc)
        if code_message is None:
            raise
        print(error_line(*code_message), file=sys.stderr, flush=True)
        if isinstance(exc, UsageError):
            return EXIT_USAGE
        return EXIT_TIMEOUT if code_message[0] == TIMEOUT else EXIT_ERROR


def output_closed() -> int:
    """The reader of stdout went away (EPIPE): say nothing (it wanted no more, as ``head``
    does) and exit 141, as a shell reports a program SIGPIPE ended. stdout is pointed at
    ``/dev/null`` first, so the interpreter's last flush at exit finds nothing to fail on."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return EXIT_OUTPUT_CLOSED


def make_missing_home() -> None:
    """Make a ``ROOST_HOME`` that does not exist (owner-only), and say so once on stderr:
    a mistyped path must not quietly become a second, empty roost. A home that is a
    file, or cannot be made, is :class:`~roost_core.paths.HomeError` (``bad_home``)."""
    from pathlib import Path

    from roost_core.paths import HomeError, check_home, private_dir

    home = os.environ.get("ROOST_HOME")
    if not home:
        return
    root = Path(home).expanduser().absolute()
    if root.exists():
        return
    check_home(root)
    try:
        private_dir(root)
    except OSError as exc:
        raise HomeError(f"ROOST_HOME={str(root)!r} cannot be made: {exc.strerror or exc}") from exc
    print(f"roost: note: ROOST_HOME={str(root)!r} did not exist; made it", file=sys.stderr, flush=True)


def classify(exc: BaseException) -> tuple[str, str] | None:
    """The code and message of a failure a command reports, or None for a bug."""
    from roost_core.config import ConfigError
    from roost_core.paths import HomeError
    from roost_core.plugins import PluginError
    from roost_core.protocol import BAD_ARGS, ProtocolError
    from roost_core.settingsfile import SettingsFileError, SettingsWriteError

    if isinstance(exc, (CommandError, ProtocolError)):
        return exc.code, exc.message
    if isinstance(exc, HomeError):
        return BAD_HOME, str(exc)
    if isinstance(exc, ConnectionError):
        return UNAVAILABLE, f"no daemon answers: {exc}"
    if isinstance(exc, (ConfigError, SettingsFileError)):
        # The user config, or an agent's settings file an install command edits.
        return BAD_CONFIG, str(exc)
    if isinstance(exc, SettingsWriteError):
        return WRITE_FAILED, str(exc.strerror)
    if isinstance(exc, PluginError):
        return PLUGIN_ERROR, str(exc)
    if isinstance(exc, ValueError):
        # A scenario that cannot be read (ScenarioError) gets the code the daemon's
        # `start` answers for one; so does any other value the CLI was given.
        return BAD_ARGS, str(exc)
    return None


# ---------------------------------------------------------------------------- input


#: The argument that stands for stdin (``roost reply JOB -``), as in git and gh.
STDIN = "-"


def read_text(value: str | None, file: str | None, what: str) -> str:
    """The text a command was given: ``value`` from argv, all of stdin when it is ``-``
    (or ``--file -``), else the whole of ``file``. UTF-8, kept exactly as read (a
    trailing newline too); anything unreadable is ``bad_args``."""
    from roost_core.protocol import BAD_ARGS

    source = file if file is not None else value
    if source is None:
        raise CommandError(BAD_ARGS, f"no {what}: give it, or - for stdin, or --file FILE")
    if file is None and value != STDIN:
        return source  # the value itself
    try:
        if source == STDIN:
            data = sys.stdin.buffer.read()
            where = "stdin"
        else:
            where = source
            with open(source, "rb") as fh:
                data = fh.read()
    except OSError as exc:
        raise CommandError(BAD_ARGS, f"cannot read the {what} from {where}: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(BAD_ARGS, f"the {what} in {where} is not UTF-8 (byte {exc.start})") from exc


# --------------------------------------------------------------------------- the daemon and plugins


def client() -> Any:
    """A connection to this user's daemon, started if none answers (warning when a
    ``--disable-plugin`` flag names a plugin the daemon runs)."""
    from roost_core.blockingclient import connect  # not roost_core.client: no async stack

    conn = connect()
    warn_flag_not_in_daemon(conn)
    return conn


def keyed_call(op: str, **args: Any) -> dict[str, Any]:
    """A request that changes something (``start``, ``reply``), made with a key: when the
    daemon dies before answering, it is asked again with the same key of a daemon started
    anew, which answers what the first ask did (done once, never twice). Gives up once no
    daemon has answered for ``client.REASK_SECONDS``."""
    from roost_core.client import REASK_SECONDS, connect, new_key

    args["key"] = new_key()
    deadline = time.monotonic() + REASK_SECONDS
    while True:
        try:
            with connect() as conn:
                warn_flag_not_in_daemon(conn)
                return conn.call(op, **args)
        except ConnectionError:  # no daemon, or it died before answering (reset)
            if time.monotonic() >= deadline:
                raise
            # Asked again from now on, and said so (the protocol's ``again``): the first
            # ask may have been taken although its answer was lost.
            args["again"] = True


def local_hosts() -> dict[str, Any]:
    """The hosts the plugins register here (``HostSpec`` by name, as the daemon builds its
    set); none when the config or the plugins cannot be read (help text and completion
    must print whatever is broken; the command that needs them reports why)."""
    from roost_core.hosts import registered_hosts

    try:
        return registered_hosts(local_manager())
    except Exception:  # noqa: BLE001 - see above
        return {}


def host_names() -> list[str]:
    """The hosts a job can name here, in the order the plugins register them."""
    return list(local_hosts())


def socket_command() -> int:
    """``roost daemon socket``: print this user's daemon socket, starting the daemon if
    none answers (the pi extension runs this to find the same socket roost uses)."""
    from roost_core.client import DaemonUnavailable, connect
    from roost_core.paths import resolve_paths

    paths = resolve_paths()
    try:
        connect(paths).close()
    except DaemonUnavailable as exc:
        print(error_line(UNAVAILABLE, f"no daemon answers: {exc}"), file=sys.stderr)
        return 1
    print(paths.socket)
    return 0


#: The names ``roost --disable-plugin`` blocked on this command line. They block the
#: plugin in this command's own manager (``roost log``, ``roost view``, ``roost
#: plugins``); a daemon gets them only from ``roost --disable-plugin NAME daemon``, never
#: from a command that happens to start it.
FLAG_DISABLED: list[str] = []


def disabled_plugins() -> tuple[str, ...]:
    """The names this command blocks: ``ROOST_DISABLE_PLUGINS`` and the flags."""
    from roost_core.plugins import disabled_from_env

    return (*disabled_from_env(), *FLAG_DISABLED)


def warn_flag_not_in_daemon(conn: Any) -> None:
    """Say on stderr when a ``--disable-plugin`` name of this command is a plugin the
    daemon runs: the flag does not reach a running daemon, and must not look as if it
    did."""
    if not FLAG_DISABLED:
        return
    answer = conn.call("plugins")
    running = {row["name"] for row in answer["plugins"]}
    for name in dict.fromkeys(FLAG_DISABLED):
        if name in running:
            print(
                f"roost: warning: --disable-plugin {name} blocks it in this command only; the daemon "
                f"(pid {answer['pid']}) runs {name!r} (see `roost plugins`). To block it there: "
                f"`roost daemon stop`, then `roost --disable-plugin {name} daemon`.",
                file=sys.stderr,
            )


def user_config() -> tuple[Any, Any]:
    """The user config and the path it is read from."""
    from roost_core.config import load_user_config
    from roost_core.paths import resolve_paths

    path = resolve_paths().config_file
    return load_user_config(path), path


def local_manager(config: Any = None) -> Any:
    """The plugin manager the daemon would build here (user config, blocked names,
    installed entry points): what the CLI renders transcripts with."""
    from roost_core.plugins import make_plugin_manager

    if config is None:
        config, _ = user_config()
    return make_plugin_manager(config, disabled=disabled_plugins())


# ---------------------------------------------------------------------------- jobs


def find_job(rows: list[dict[str, Any]], ref: str) -> dict[str, Any]:
    """The row of ``jobs`` that ``ref`` names, by the rule the daemon's ops use (an id,
    else an exact unique name): raises ``not_found`` or ``ambiguous`` as they do."""
    from roost_core.routing import resolve_ref

    return resolve_ref(ref, rows, id_of=lambda row: row["id"], name_of=lambda row: row["name"], framed_of=lambda row: row.get("framedName"))


def check_states(states: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``states`` if each is a job state; else ``bad_args`` naming the states there are."""
    from roost_core.protocol import BAD_ARGS
    from roost_core.records import JOB_STATES

    unknown = [state for state in states if state not in JOB_STATES]
    if unknown:
        raise CommandError(BAD_ARGS, f"{', '.join(map(repr, unknown))} is not a job state (one of: {', '.join(JOB_STATES)})")
    return tuple(states)


def is_settled(row: dict[str, Any]) -> bool:
    """The job of ``row`` runs nothing by itself now: nothing waits in its queue, or it is
    stopped, or failed with no worker (given up after crashes, its items wait for the
    next reply or message, which starts it again)."""
    return row["pending"] == 0 or row["state"] == "stopped" or (row["state"] == "failed" and not row["live"])


def why_not_done(row: dict[str, Any], states: tuple[str, ...]) -> str:
    """What a wait for ``done`` that ran out of time on a settled ``idle`` job is told:
    its last run took only agent items, and only a user's reply makes it ``done``."""
    if row["state"] != "idle" or "done" not in states or not is_settled(row):
        return ""
    return (
        "; idle: its last run answered agent messages only, and it becomes done only after a run"
        " that takes a reply of yours (`roost wait` with no --state returns once it settles)"
    )


def wait_for_job(conn: Any, ref: str, states: tuple[str, ...] = SETTLED, timeout: float = 60.0, *, poll: float = 0.05) -> dict[str, Any]:
    """Poll ``jobs`` until the job ``ref`` names is in one of ``states`` and settled
    (:func:`is_settled`). ``ref`` is resolved once, as every
    command resolves it; raises ``timeout`` when ``timeout`` seconds pass first."""
    from roost_core.protocol import NOT_FOUND, ProtocolError

    states = check_states(states)
    deadline = time.monotonic() + timeout
    job_id = find_job(conn.call("jobs")["jobs"], ref)["id"]
    while True:
        row: dict[str, Any] | None = next((row for row in conn.call("jobs")["jobs"] if row["id"] == job_id), None)
        if row is None:
            raise ProtocolError(NOT_FOUND, f"job {job_id} was removed while waiting for it")
        if row["state"] in states and is_settled(row):
            return row
        if time.monotonic() > deadline:
            raise CommandError(TIMEOUT, f"job {job_id} ({shown(row['name'])}) still {row['state']} after {timeout:g}s, waiting for {' or '.join(states)}{why_not_done(row, states)}")
        time.sleep(poll)


# ---------------------------------------------------------------------------- text


def cut(text: str, width: int, *, collapse: bool = True) -> str:
    """``text`` on one line, at most ``width`` characters: a longer text ends with ``…``
    after its last whole word (a word longer than half the room is cut inside).
    ``collapse``: runs of white space become one space, none at the ends (a detail);
    without it (a name, whose spaces are its own) they stay as they are."""
    if collapse:
        text = " ".join(text.split())
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    room = text[: width - 1]
    space = room.rfind(" ")
    if text[width - 1] != " " and space >= (width - 1) // 2:
        room = room[:space]  # the last word did not fit whole: drop it
    return room.rstrip(" ,.;:-") + "…"


def job_live(row: dict[str, Any]) -> bool:
    """Whether ``roost jobs`` calls a job live: a worker runs it and it is not finished
    (a done job's worker only waits, until reaped, in case a reply comes)."""
    return bool(row.get("live")) and row["state"] not in FINISHED


def job_detail(row: dict[str, Any]) -> str:
    """The question of a job that asks, else its error, else its summary; a job stopped
    after it had failed says so first (the stop does not hide the failure), and a job that
    keeps processes running says how many and which (``[1 background process: ...]``)."""
    if row.get("dialog"):
        return f"waits for you: {dialog_line(row.get('question'), row.get('dialogOptions'))} (roost answer {row['id']})"
    if row["state"] == "needs_input":
        return row.get("question") or ""
    if row["state"] == "stopped" and row.get("stoppedFrom") == "failed":
        return f"failed, then stopped: {row.get('error') or 'no error given'}"
    detail = row.get("error") or row.get("summary") or ""
    working = progress_text(row, time.time())
    if working:
        detail = f"[{working}] {detail}".rstrip()
    background = background_text(row)
    # A settled job that keeps processes running says so first: it is not hibernated.
    return f"[{background}] {detail}".rstrip() if background else detail


NAME_WIDTH = 30
#: The longest detail when the output is not a terminal (no width to fit).
DETAIL_WIDTH = 100


def output_width() -> int | None:
    """The terminal's width when stdout is one (or ``COLUMNS`` says), else None: output
    going to a pipe or a file has no width to fit."""
    if os.environ.get("COLUMNS") or sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def format_jobs(rows: list[dict[str, Any]], width: int | None = None) -> str:
    """The ``roost jobs`` table: a header row, then one line per job. Names longer than
    30 characters and details longer than what is left of ``width`` (default: the
    terminal's; 100 characters of detail when there is none) end in ``…`` after a
    whole word."""
    if not rows:
        return "no jobs"
    width = width or output_width()
    table = [("ID", "STATE", "LIVE", "HOST", "NAME")]
    table += [(row["id"], row["state"], "live" if job_live(row) else "-", row["host"], cut(shown(row["name"]), NAME_WIDTH, collapse=False)) for row in rows]
    widths = [max(len(line[column]) for line in table) for column in range(5)]
    lines = []
    for index, line in enumerate(table):
        head = "  ".join(cell.ljust(size) for cell, size in zip(line, widths, strict=True))
        detail = "DETAIL" if index == 0 else job_detail(rows[index - 1])
        room = max(width - len(head) - 2, 20) if width else DETAIL_WIDTH
        if index and rows[index - 1].get("dialog"):
            room = max(room, len(detail))  # a dialog's options and command are never cut off
        lines.append(f"{head}  {shown(cut(detail, room))}".rstrip())
    return "\n".join(lines)


def format_started(result: dict[str, Any]) -> str:
    """What ``roost start`` says: the job, its host, that it runs in the background and
    how to follow it."""
    ref = shell_word(result["name"])
    return "\n".join(
        [
            f"started job {result['id']} ({shown(result['name'])}) on host {result['host']}; it runs in the background",
            f"  follow it:   roost log {ref} --follow",
            f"  wait for it: roost wait {ref}",
        ]
    )


#: What ``reply``'s result says about the reply.
REPLY_OUTCOMES = {
    "delivered": "delivered to its running worker",
    "queued": "queued; its worker takes it when it connects",
    "started": "a worker was started for it",
    "stopped": "kept; the job is stopped",
}


def format_reply(result: dict[str, Any]) -> str:
    """The one line every command prints for a user reply: the job, the reply's seq in
    the job's queue, and what happened to it."""
    outcome = REPLY_OUTCOMES.get(result["result"], result["result"])
    return f"{result['id']}: reply is item {result['seq']} of the job's queue (its seq); {outcome}"


def format_answer(result: dict[str, Any]) -> str:
    """What ``roost answer`` prints: the dialog and its numbered options (shown only), or
    the answer given and where it went."""
    if "answer" in result:
        return f"{result['id']}: answered {result['answer']!r}; the dialog closes and the job goes on"
    lines = [f"{result['id']} ({shown(result['name'])}) asks: {result.get('question') or ''}"]
    if result.get("options"):
        lines.append(f"  {options_text(result['options'])}")
        lines.append(f"answer with: roost answer {result['id']} CHOICE (an option or its number)")
    else:
        lines.append(f"answer with: roost answer {result['id']} TEXT")
    return "\n".join(lines)
