"""Where roost keeps things: ROOST_HOME, short socket paths, private folders."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from roost_core.paths import MAX_SOCKET_PATH, private_dir, resolve_paths, short_socket_dir


def test_roost_home_puts_everything_in_one_folder(tmp_path):
    paths = resolve_paths({"ROOST_HOME": str(tmp_path)})
    assert paths.home == tmp_path
    assert paths.socket == tmp_path / "roost.sock"
    assert paths.state_dir == tmp_path / "state"
    assert paths.jobs_dir == tmp_path / "state" / "jobs"
    assert paths.sessions_dir == tmp_path / "state" / "sessions"
    assert paths.journal == tmp_path / "state" / "queue.journal"
    assert paths.config_file == tmp_path / "roost.json"
    assert paths.daemon_pidfile == tmp_path / "daemon.pid"


def test_roost_config_overrides_the_config_file(tmp_path):
    paths = resolve_paths({"ROOST_HOME": str(tmp_path), "ROOST_CONFIG": str(tmp_path / "other.toml")})
    assert paths.config_file == tmp_path / "other.toml"


def test_a_relative_roost_home_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = resolve_paths({"ROOST_HOME": "rel"})
    assert paths.home == tmp_path / "rel"
    assert paths.home.is_absolute()


def test_a_long_roost_home_moves_the_socket_to_a_short_deterministic_path(tmp_path):
    home = tmp_path / ("a" * 80) / ("b" * 80)
    assert len(str(home)) > 120
    paths = resolve_paths({"ROOST_HOME": str(home)})
    sock = paths.socket
    assert len(os.fsencode(str(sock))) <= MAX_SOCKET_PATH
    assert sock.parent == short_socket_dir()
    assert sock.suffix == ".sock"
    # Every process computes the same path for the same home, and another home differs.
    assert resolve_paths({"ROOST_HOME": str(home)}).socket == sock
    assert resolve_paths({"ROOST_HOME": str(home) + "x"}).socket != sock


def test_the_socket_path_limit_is_exact(tmp_path):
    base = str(tmp_path) + "/"
    # runtime_dir + "/roost.sock" of exactly 107 bytes stays; 108 moves.
    fits = base + "h" * (MAX_SOCKET_PATH - len(base) - len("/roost.sock"))
    assert resolve_paths({"ROOST_HOME": fits}).socket == Path(fits) / "roost.sock"
    assert len(os.fsencode(str(Path(fits) / "roost.sock"))) == MAX_SOCKET_PATH
    too_long = fits + "h"
    assert resolve_paths({"ROOST_HOME": too_long}).socket.parent == short_socket_dir()


def test_a_non_ascii_home_is_measured_in_bytes(tmp_path):
    base = str(tmp_path) + "/"
    # Few characters, many bytes: "é" is two bytes in UTF-8.
    chars = (MAX_SOCKET_PATH - len(base) - len("/roost.sock")) // 2 + 1
    home = base + "é" * chars
    assert len(home + "/roost.sock") <= MAX_SOCKET_PATH
    sock = resolve_paths({"ROOST_HOME": home}).socket
    assert len(os.fsencode(str(sock))) <= MAX_SOCKET_PATH


def test_ensure_makes_private_folders_and_fixes_an_open_one(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    paths = resolve_paths({"ROOST_HOME": str(home)})
    paths.ensure()
    for folder in (paths.runtime_dir, paths.state_dir, paths.jobs_dir, paths.sessions_dir, paths.socket.parent):
        assert folder.is_dir()
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_ensure_for_a_long_home_makes_the_short_socket_folder_private(tmp_path):
    paths = resolve_paths({"ROOST_HOME": str(tmp_path / ("c" * 120))})
    paths.ensure()
    assert stat.S_IMODE(short_socket_dir().stat().st_mode) == 0o700
    assert short_socket_dir().stat().st_uid == os.getuid()


def test_private_dir_creates_parents(tmp_path):
    folder = private_dir(tmp_path / "x" / "y")
    assert folder.is_dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_temp_folder_too_deep_for_a_socket_falls_back_to_tmp(tmp_path, monkeypatch):
    from roost_core.hosts.bridge import foreground_socket, private_folder

    deep = tmp_path / ("t" * 90)
    deep.mkdir()
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    assert tempfile.gettempdir() == str(deep)
    assert short_socket_dir() == Path("/tmp") / f"roost-{os.getuid()}"
    # The sockets that live there fit: a long home's daemon socket, a Claude Code
    # session's hook socket and a background Claude job's bridge socket.
    sock = resolve_paths({"ROOST_HOME": str(tmp_path / ("h" * 120))}).socket
    hook = foreground_socket(tmp_path, os.getpid())
    job_folder = private_folder()  # a background Claude job's bridge folder
    shutil.rmtree(job_folder)
    assert job_folder.parent == short_socket_dir()
    for path in (sock, hook, job_folder / "bridge.sock"):
        assert path.parent in (short_socket_dir(), job_folder)
        assert len(os.fsencode(str(path))) <= MAX_SOCKET_PATH, path


def test_a_temp_folder_with_room_for_a_socket_is_used_up_to_the_byte(monkeypatch):
    from roost_core.paths import SOCKET_NAME_ROOM

    base = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))
    try:
        name = f"/roost-{os.getuid()}"
        pad = MAX_SOCKET_PATH - SOCKET_NAME_ROOM - len(str(base)) - 1 - len(name)
        fits = base / ("p" * pad)
        fits.mkdir()
        (base / ("p" * (pad + 1))).mkdir()
        monkeypatch.setattr(tempfile, "tempdir", None)
        monkeypatch.setenv("TMPDIR", str(fits))
        assert short_socket_dir() == fits / name.lstrip("/")
        assert len(os.fsencode(str(short_socket_dir()))) + SOCKET_NAME_ROOM == MAX_SOCKET_PATH
        monkeypatch.setattr(tempfile, "tempdir", None)
        monkeypatch.setenv("TMPDIR", str(base / ("p" * (pad + 1))))
        assert short_socket_dir() == Path("/tmp") / name.lstrip("/")
    finally:
        shutil.rmtree(base)
