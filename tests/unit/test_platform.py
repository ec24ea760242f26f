"""The platform module (``roost_core.platform``): each facility, on each implementation
this machine can run (Linux's and the portable one here; the portable one alone on macOS
and the BSDs), with real processes, sockets and files; and the rule that no module outside
it names a call of one kernel.

The whole suite runs once more with ``ROOST_PLATFORM=portable`` in CI (.ci/run), so the
daemon, the workers and the hosts run on the portable implementation there too; these
tests check each facility of it directly, in every run.
"""

from __future__ import annotations

import ast
import fcntl
import json
import os
import re
import socket
import struct
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from types import ModuleType

import psutil
import pytest

from roost_core import locks, platform
from roost_core.platform import portable

SRC = Path(__file__).resolve().parents[2] / "src"
ON_LINUX = sys.platform.startswith("linux")


def implementations() -> list[ModuleType]:
    if ON_LINUX:
        from roost_core.platform import linux

        return [linux, portable]
    return [portable]


@pytest.fixture(params=implementations(), ids=lambda impl: impl.NAME)
def impl(request) -> ModuleType:
    return request.param


# --------------------------------------------------------------------------- choosing


def test_the_native_implementation_unless_roost_platform_says_portable():
    assert platform.choose(None, "linux") == "linux" and platform.choose("", "linux") == "linux"
    assert platform.choose("portable", "linux") == "portable"
    assert platform.choose(None, "darwin") == "portable" and platform.choose(None, "freebsd14") == "portable"
    with pytest.raises(platform.PlatformError, match="not Linux"):
        platform.choose("linux", "darwin")
    with pytest.raises(platform.PlatformError, match="not one of linux, portable"):
        platform.choose("bsd", "linux")


def test_a_bad_roost_platform_is_a_clear_cli_error_before_any_daemon_starts(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("ROOST_")}
    env.update(ROOST_HOME=str(tmp_path / "home"), ROOST_PLATFORM="bsd")
    result = subprocess.run([sys.executable, "-m", "roost_core.cli", "jobs"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().endswith("roost: bad_args: ROOST_PLATFORM='bsd': not one of linux, portable (or unset: " + platform.choose(None) + " here)")
    assert not (tmp_path / "home" / "state" / "daemon.log").exists()


def test_roost_platform_portable_makes_roost_run_the_portable_implementation():
    env = dict(os.environ, ROOST_PLATFORM="portable")
    code = "from roost_core import platform; print(platform.NAME, platform.ADOPTS_ORPHANS, platform.peer_credentials.__module__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out == ["portable", "False", "roost_core.platform.portable"]


# --------------------------------------------------------------------------- peer credentials


def test_peer_credentials_name_the_process_that_connected(impl, tmp_path):
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen()
        code = f"import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect({str(path)!r}); sys.stdin.read()"
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
        try:
            conn, _ = listener.accept()
            with conn:
                assert impl.peer_credentials(conn) == (child.pid, os.getuid())
        finally:
            child.kill()
            child.wait()


def test_a_socket_with_no_peer_gives_no_credentials(impl):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        assert impl.peer_credentials(sock) == (0, -1)


def test_the_portable_peer_query_reads_each_systems_struct():
    # macOS: struct xucred (version, uid, ngroups, groups[16]); the pid comes from LOCAL_PEERPID.
    mac = struct.pack("@IIh16I", 0, 501, 2, 20, 12, *[0] * 14)
    assert portable.parse_xucred(mac) == (0, 501)
    # FreeBSD 13 on: the same, then a union whose pid_t is cr_pid.
    freebsd = bytearray(portable.XUCRED_WITH_PID)
    portable.XUCRED.pack_into(freebsd, 0, 0, 1001, 1, 1001, *[0] * 15)
    struct.pack_into("@i", freebsd, portable.XUCRED_PID_OFFSET, 4242)
    assert portable.parse_xucred(bytes(freebsd)) == (4242, 1001)
    # Another layout (version) or a short answer is not guessed at.
    assert portable.parse_xucred(struct.pack("@IIh16I", 1, 501, 0, *[0] * 16)) == (0, -1)
    assert portable.parse_xucred(b"\0" * 8) == (0, -1)
    for system in ("darwin", "freebsd14", "openbsd7", "netbsd10", "linux"):
        assert portable.peer_query(system) is not None, system


def test_a_system_with_no_known_peer_credentials_gives_none_and_the_daemon_refuses(monkeypatch):
    from roost_core.daemon.connection import Connection

    monkeypatch.setattr(portable.sys, "platform", "plan9")
    assert portable.peer_query("plan9") is None
    left, right = socket.socketpair()
    with left, right:
        credentials = portable.peer_credentials(left)
    assert credentials == (0, -1)
    assert not Connection(1, credentials=credentials).same_user


# --------------------------------------------------------------------------- the process table


def test_start_times_are_psutils_and_roost_pi_start_time_prints_them(impl, sleepers):
    child = sleepers()
    assert impl.process_start_time(child.pid) == psutil.Process(child.pid).create_time() == locks.create_time(child.pid)
    # The pi extension asks the CLI: it must print what roost's Python reads.
    env = dict(os.environ, ROOST_PLATFORM=impl.NAME)
    out = subprocess.run([sys.executable, "-m", "roost_core.cli", "pi", "start-time", str(child.pid)], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == impl.process_start_time(child.pid)
    child.kill()
    child.wait()
    assert impl.process_start_time(child.pid) is None
    gone = subprocess.run([sys.executable, "-m", "roost_core.cli", "pi", "start-time", str(child.pid)], env=env, capture_output=True, text=True, timeout=60)
    assert (gone.returncode, gone.stdout.strip()) == (0, "null")
    bad = subprocess.run([sys.executable, "-m", "roost_core.cli", "pi", "start-time"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == "roost: bad_args: start-time needs a process id: roost pi start-time PID"


def test_parents_states_and_zombies(impl, sleepers):
    child = sleepers()
    assert child.pid in impl.pids()
    assert impl.parent_links()[child.pid] == os.getpid()
    assert impl.parent_of(child.pid) == os.getpid() and impl.parent_of(os.getpid()) == os.getppid()
    assert impl.is_running(child.pid)
    assert child.pid not in impl.zombie_children(os.getpid())
    child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # a zombie now, not collected
    assert not impl.is_running(child.pid)
    assert child.pid not in impl.parent_links()
    assert impl.parent_of(child.pid) is None
    assert child.pid in impl.zombie_children(os.getpid())
    child.wait()
    assert child.pid not in impl.zombie_children(os.getpid())


def test_a_command_line_is_its_arguments_joined_and_none_once_gone(impl):
    code = "import sys; print(flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # running (exec'd)
        assert impl.command_line(child.pid) == f"{sys.executable} -c {code}"
    finally:
        child.kill()
        child.wait()
    assert impl.command_line(child.pid) is None


def test_the_environment_a_process_started_with_is_found_not_one_it_set_later(impl):
    entry = f"ROOST_TEST_MARK={uuid.uuid4().hex}"
    name, value = entry.split("=")
    waits = "import os, sys; print(flush=True); sys.stdin.read()"
    started = subprocess.Popen([sys.executable, "-c", waits], env={**os.environ, name: value}, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    later = subprocess.Popen([sys.executable, "-c", f"import os; os.environ[{name!r}] = {value!r}; " + waits.split("; ", 1)[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        for child in (started, later):
            child.stdout.readline()  # running, its environment set
        assert impl.processes_with_env(entry) == [started.pid]
        assert impl.processes_with_env(entry, skip=[started.pid]) == []
    finally:
        for child in (started, later):
            child.kill()
            child.wait()


# --------------------------------------------------------------------------- fds


def test_a_child_closes_every_fd_it_inherited(impl):
    code = textwrap.dedent(f"""
        import os
        from roost_core.platform import {impl.__name__.rsplit(".", 1)[1]} as impl
        pipes = [os.pipe() for _ in range(20)]
        os.dup2(pipes[0][0], 900)
        impl.close_inherited_fds()
        still = []
        for fd in range(3, 1024):
            try:
                os.fstat(fd)
            except OSError:
                continue
            still.append(fd)
        print(still)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]"


# --------------------------------------------------------------------------- owning descendants

#: A stand-in worker: a session leader that makes the implementation's Family, then, per
#: case, has a child A start a grandchild G after the family's last scan (or before it,
#: for "tracked"), A exits, and the family is asked where G is. G prints its own pid once
#: it runs as it will (its session made, its environment cleared): the scan that follows
#: sees it as it is. Prints {case: found}.
FAMILY_SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    from importlib import import_module
    impl = import_module("roost_core.platform." + sys.argv[1])
    mark = sys.argv[2]
    name, value = mark.split("=")
    family = impl.Family(mark)
    me = os.getpid()
    g_runs = "sh -c 'echo $$; exec sleep 300'"
    # Each case: (G's command in A, whether the family scans once G runs, A's env).
    cases = {
        "tracked": ("env -i setsid " + g_runs, True, {}),    # seen before its parent died
        "group": ("env -i " + g_runs, False, {}),            # A's group, never seen
        "mark": ("setsid " + g_runs, False, {name: value}),   # its own session, the mark
        "unseen": ("env -i setsid " + g_runs, False, {}),    # none of these: portable misses it
    }
    found, grandchildren = {}, []
    for case, (command, seen, extra) in cases.items():
        env = {key: val for key, val in os.environ.items() if key != name}
        env.update(extra)
        script = f"{command} & read go" if seen else f"read go; {command} &"
        a = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True, text=True)
        if seen:
            g = int(a.stdout.readline())
        family.track()
        a.stdin.write("go\\n")
        a.stdin.flush()
        if not seen:
            g = int(a.stdout.readline())
        a.wait()
        grandchildren.append(g)
        links = family.links()
        parent, seen_at = g, set()
        while parent in links and parent != me and parent not in seen_at:
            seen_at.add(parent)
            parent = links[parent]
        found[case] = parent == me
    for g in grandchildren:
        os.kill(g, 9)
    print(json.dumps({"found": found, "adopts": family.adopts_orphans}))
""")


def test_a_family_keeps_what_its_children_leave_behind(impl):
    """Linux: the worker is the subreaper, every orphan is its own. Portable: an orphan
    it had seen, one in a process group of the family, one with the job's mark; not one
    that escaped all three before any scan (docs/reliability.md says so)."""
    mark = f"ROOST_WORKER_MARK={uuid.uuid4().hex}"
    result = subprocess.run([sys.executable, "-c", FAMILY_SCRIPT, impl.__name__.rsplit(".", 1)[1], mark],
                            capture_output=True, text=True, timeout=120, start_new_session=True)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    if impl.ADOPTS_ORPHANS:
        assert answer == {"found": {"tracked": True, "group": True, "mark": True, "unseen": True}, "adopts": True}
    else:
        assert answer == {"found": {"tracked": True, "group": True, "mark": True, "unseen": False}, "adopts": False}


# --------------------------------------------------------------------------- exit watches


def test_an_exit_watch_is_readable_once_its_process_exits_or_there_is_none(impl, sleepers):
    import select

    child = sleepers()
    if not impl.CAN_WATCH_EXITS:
        with pytest.raises(platform.NoExitWatch):
            impl.watch_exit(child.pid)
        return
    watch = impl.watch_exit(child.pid)
    try:
        assert select.select([watch.fileno()], [], [], 0)[0] == []
        child.kill()
        assert select.select([watch.fileno()], [], [], 30)[0] == [watch.fileno()]
    finally:
        watch.close()
    child.wait()
    with pytest.raises(ProcessLookupError):
        impl.watch_exit(child.pid)


# --------------------------------------------------------------------------- durable writes


def test_durable_writes_write_and_sync(impl, tmp_path, monkeypatch):
    calls: list[str] = []
    for name in ("fsync", "fdatasync"):
        if hasattr(os, name):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, lambda fd, real=real, name=name: (calls.append(name), real(fd))[1])
    real_fcntl = fcntl.fcntl
    monkeypatch.setattr(fcntl, "fcntl", lambda fd, cmd, arg=0: (calls.append("full fsync") if cmd == getattr(fcntl, "F_FULLFSYNC", None) else None, real_fcntl(fd, cmd, arg))[1])
    real_pwritev = os.pwritev
    monkeypatch.setattr(os, "pwritev", lambda fd, buffers, offset, flags=0: (calls.append("dsync write") if flags else None, real_pwritev(fd, buffers, offset, flags))[1])
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        impl.write_synced(fd, b"hello world", 0)
        impl.write_synced(fd, b"HELLO", 0)
        impl.sync_data(fd)
        impl.sync_file(fd)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"HELLO world"
    full = hasattr(fcntl, "F_FULLFSYNC")
    if impl.NAME == "linux":
        assert calls == ["dsync write", "dsync write", "fdatasync", "fsync"]
    elif full:
        assert calls == ["full fsync"] * 4
    else:
        assert calls == ["fdatasync", "fdatasync", "fdatasync", "fsync"]


# ------------------------------------------------------------------- no kernel's call outside


#: Names (attributes, variables, imports) that are one kernel's, or the durability calls
#: that differ per platform: only roost_core/platform may use them.
FORBIDDEN_NAMES = {
    "SO_PEERCRED", "LOCAL_PEERCRED", "LOCAL_PEERPID", "LOCAL_PEEREID", "SO_PEERSEC",
    "pidfd_open", "pidfd_send_signal", "RWF_DSYNC", "RWF_SYNC", "F_FULLFSYNC",
    "PR_SET_CHILD_SUBREAPER", "PR_GET_CHILD_SUBREAPER", "prctl", "fsync", "fdatasync", "kqueue", "kevent",
}
#: Text that names one kernel's interface, in a string (paths, getattr names) or JS code.
FORBIDDEN_TEXT = re.compile(r"/proc\b|/dev/fd\b|SO_PEERCRED|LOCAL_PEER|pidfd_open|RWF_DSYNC|F_FULLFSYNC|SUBREAPER|\bprctl\b|\bfdatasync\b")


def _shown(path: Path) -> str:
    return str(path.relative_to(SRC)) if SRC in path.parents else path.name


def _python_findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        elif isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.alias):
            names.append(node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if FORBIDDEN_TEXT.search(node.value):
                found.append(f"{_shown(path)}:{node.lineno}: {node.value[:60]!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "pwritev" and len(node.args) > 3:
            found.append(f"{_shown(path)}:{node.lineno}: pwritev with flags")
        found.extend(f"{_shown(path)}:{node.lineno}: {name}" for name in names if name in FORBIDDEN_NAMES)
    return sorted(found, key=lambda entry: int(entry.split(":")[1]))


def _script_findings(path: Path) -> list[str]:
    # Comments say what they like; code may not name it.
    code = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    found = []
    for number, line in enumerate(code.splitlines(), 1):
        line = re.sub(r"(^|\s)//.*$", "", line)
        if FORBIDDEN_TEXT.search(line):
            found.append(f"{_shown(path)}:{number}: {line.strip()[:60]}")
    return found


def test_no_module_outside_the_platform_module_names_a_kernels_call():
    platform_dir = SRC / "roost_core" / "platform"
    found = []
    for path in sorted(SRC.rglob("*")):
        if platform_dir in path.parents or not path.is_file():
            continue
        if path.suffix == ".py":
            found.extend(_python_findings(path))
        elif path.suffix in (".ts", ".js", ".mjs"):
            found.extend(_script_findings(path))
    assert found == []


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The check above would see each kind of use (so an empty answer means something)."""
    sample, script = tmp_path / "sample.py", tmp_path / "sample.ts"
    sample.write_text('"""Mentions /proc and SO_PEERCRED in prose: fine."""\nimport os, socket\n'
                      'socket.SO_PEERCRED\nos.fsync(3)\nopen("/proc/self/stat")\nos.pwritev(3, [], 0, 4)\n')
    script.write_text('// /proc in a comment is fine\nconst stat = fs.readFileSync(`/proc/${pid}/stat`);\n')
    found = _python_findings(sample) + _script_findings(script)
    assert [entry.split(": ", 1)[1] for entry in found] == ["SO_PEERCRED", "fsync", "'/proc/self/stat'", "pwritev with flags", "const stat = fs.readFileSync(`/proc/${pid}/stat`);"]
