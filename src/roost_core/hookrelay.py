"""The relay an agent CLI's hook command runs: the hook's JSON object in on stdin, one
request to the roost side of the session over its bridge socket, the answer out on stdout.

An agent CLI starts the hook command as a new process on every event of its loop (Claude
Code runs ``PostToolUse`` after every tool call), so this module imports the standard
library's smallest parts only (json, os, sys, the interpreter's own socket and sha256
modules) and roost's ``platform`` for the process table: ``roost NAME hook EVENT``
reaches it through :mod:`roost_core.launch` without the CLI, the plugins or the daemon's
modules (``bench/commands.py`` measures it, ``tests/unit/test_fast_commands.py`` checks
what it imports).

Which socket: a background job's (``ROOST_BRIDGE``, set by its worker), else the
``roost mcp`` server of the agent CLI that runs the hook, found under a name made of the
roost home, that CLI's pid and its start time (:func:`socket_name`). The hook does not know
which of its ancestors is that CLI, so it tries each. It first makes the name from the
environment alone (:func:`guessed_socket`), as the server's standard-library and
platformdirs calls make it in every usual setup; when no socket is there it makes it as
the server did (:func:`foreground_socket`), which costs those imports.
"""

from __future__ import annotations

import _socket
import json
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path
    from typing import IO, Any

#: The environment variable that points hooks and the MCP server at a worker's bridge.
BRIDGE_ENV = "ROOST_BRIDGE"
#: The longest request line a bridge reads.
MAX_FRAME = 4 * 1024 * 1024
#: How long a hook waits for the roost side (it answers at once; the agent CLI's own hook
#: timeout is longer).
REQUEST_TIMEOUT = 20.0
#: sun_path is 108 bytes including the terminating NUL (``roost_core.paths``).
MAX_SOCKET_PATH = 107
#: Room a socket's name takes in the short-socket folder (``roost_core.paths``).
SOCKET_NAME_ROOM = 32


# ---------------------------------------------------------------------- one request


def checked_line(frame: dict[str, Any]) -> bytes:
    """``frame`` as a request line, refused (``RuntimeError``, as an error answer is)
    when it is longer than the bridge reads: it is never sent."""
    line = json.dumps(frame, ensure_ascii=False).encode() + b"\n"
    if len(line) - 1 > MAX_FRAME:
        raise RuntimeError(f"frame_too_large: request of {len(line) - 1} bytes, the bridge reads at most {MAX_FRAME}; nothing was sent")
    return line


def request(path: str | Path, op: str, *, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
    """One blocking request on a bridge; its result, or ``RuntimeError`` for an error answer."""
    line = checked_line({"id": 1, "op": op, **args})
    # ``_socket``, not ``socket``: the module around it makes enums of every constant, which
    # costs a hook more than its request does.
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(line)
        buffer = b""
        while b"\n" not in buffer:
            data = sock.recv(256 * 1024)
            if not data:
                raise ConnectionError("the bridge closed the connection")
            buffer += data
    finally:
        sock.close()
    answer = json.loads(buffer.split(b"\n", 1)[0])
    if not answer.get("ok"):
        error = answer.get("error") or {}
        raise RuntimeError(f"{error.get('code', 'error')}: {error.get('message', '')}")
    result: dict[str, Any] = answer.get("result") or {}
    return result


# ---------------------------------------------------------------------- which socket


def socket_name(home: str, client_pid: int, start_time: float | None) -> str:
    """The file name of the hook socket of the ``roost mcp`` server of process
    ``client_pid`` in roost home ``home``: its start time too, so a reused pid never
    finds an old socket."""
    return f"cc-{sha256_hex(f'{home}:{client_pid}:{start_time}')[:20]}.sock"


def sha256_hex(text: str) -> str:
    """The SHA-256 of ``text`` (UTF-8), in hex: from the interpreter's own module where it
    has one (``hashlib`` loads OpenSSL, which costs a hook more than the rest of it)."""
    # Python 3.12 renamed the module; a name that is not there costs a search of sys.path.
    try:
        module = __import__("_sha2" if sys.version_info >= (3, 12) else "_sha256")
        return str(module.sha256(text.encode()).hexdigest())
    except ImportError:
        pass
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def foreground_socket(home: Path, client_pid: int) -> Path:
    """Where the ``roost mcp`` server of process ``client_pid`` listens for its hooks, in
    the per-user 0700 short-socket folder (made here when missing)."""
    from roost_core import platform
    from roost_core.paths import private_dir, short_socket_dir

    return private_dir(short_socket_dir()) / socket_name(str(home), client_pid, platform.process_start_time(client_pid))


def guessed_home(env: Mapping[str, str]) -> str | None:
    """The roost home ``roost_core.paths.resolve_paths`` finds, made from the environment
    alone; None where that takes more than the usual rules (then the caller asks it)."""
    home = env.get("ROOST_HOME")
    if home:
        folder = os.path.expanduser(home)
        if not os.path.isabs(folder):
            folder = os.path.join(os.getcwd(), folder)
        if folder.startswith("//") and not folder.startswith("///"):
            return None  # pathlib keeps a leading "//"
        # pathlib's spelling: no empty or "." parts (it keeps "..").
        return "/" + "/".join(part for part in folder.split("/") if part not in ("", "."))
    if not sys.platform.startswith("linux"):
        return None
    state = env.get("XDG_STATE_HOME", "").strip()
    if state:
        return guessed_home({"ROOST_HOME": os.path.join(state, "roost")}) if os.path.isabs(state) else None
    user_home = env.get("HOME", "")
    return guessed_home({"ROOST_HOME": os.path.join(user_home, ".local", "state", "roost")}) if os.path.isabs(user_home) else None


def guessed_socket_dir(env: Mapping[str, str]) -> str:
    """``roost_core.paths.short_socket_dir`` as ``tempfile.gettempdir`` makes it in the
    usual case: the first of ``TMPDIR``, ``TEMP``, ``TMP``, ``/tmp``, ``/var/tmp``,
    ``/usr/tmp`` that is a folder this user can write."""
    base = next(
        (os.path.abspath(folder) for folder in (env.get("TMPDIR"), env.get("TEMP"), env.get("TMP"), "/tmp", "/var/tmp", "/usr/tmp")
         if folder and os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK)),
        os.getcwd(),
    )
    folder = os.path.join(base, f"roost-{os.getuid()}")
    if len(os.fsencode(folder)) + SOCKET_NAME_ROOM <= MAX_SOCKET_PATH:
        return folder
    return f"/tmp/roost-{os.getuid()}"


def client_pids(env: Mapping[str, str]) -> list[int]:
    """The processes whose ``roost mcp`` server may serve this hook: ``CLAUDE_PID`` when
    set, then every ancestor of this process, nearest first."""
    from roost_core import platform

    found = [int(env["CLAUDE_PID"])] if env.get("CLAUDE_PID", "").isdigit() else []
    pid: int | None = os.getppid()
    while pid and pid > 0 and pid not in found:
        found.append(pid)
        pid = platform.parent_of(pid)
    return found


def bridge_path(env: Mapping[str, str] | None = None) -> str | None:
    """The socket of the roost side of this session, if there is one."""
    env = os.environ if env is None else env
    if env.get(BRIDGE_ENV):
        return env[BRIDGE_ENV]
    pids = client_pids(env)
    for path in guessed_sockets(env, pids):
        if os.path.exists(path):
            return path
    from roost_core.paths import resolve_paths

    home = resolve_paths(env).home
    for pid in pids:
        exact = foreground_socket(home, pid)
        if exact.exists():
            return str(exact)
    return None


def guessed_sockets(env: Mapping[str, str], pids: list[int]) -> Iterator[str]:
    """Where each of ``pids``' server listens, as :func:`guessed_home` and
    :func:`guessed_socket_dir` make it (nothing when the home takes more)."""
    from roost_core import platform

    home = guessed_home(env)
    if home is None:
        return
    folder = guessed_socket_dir(env)
    for pid in pids:
        yield os.path.join(folder, socket_name(home, pid, platform.process_start_time(pid)))


# ---------------------------------------------------------------------- the relay


def read_input(stdin: IO[str]) -> dict[str, Any] | None:
    """The hook's JSON object (None for anything else: the hook then says nothing)."""
    try:
        data = json.loads(stdin.read() or "{}")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def main(event: str, stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    """Relay hook ``event`` of an agent CLI that speaks Claude Code's hook protocol
    (Claude Code, Codex, Qwen Code, roost's OpenCode plugin): print the roost side's
    answer, nothing when it has none or there is no roost side (roost not in use in this
    session, no daemon). Always exit 0: a hook must never break the agent CLI."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    data = read_input(stdin)
    if data is None:
        return 0
    try:
        path = bridge_path()
        if path is None:
            return 0
        result = request(path, "hook", event=event, input=data, timeout=REQUEST_TIMEOUT)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"roost: hook {event}: {exc}", file=sys.stderr)
        return 0
    output = result.get("output")
    if output:
        stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
        stdout.flush()
    return 0


if __name__ == "__main__":
    # ``python -m roost_core.hookrelay EVENT``: the hook command a job's settings name.
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else 2)
