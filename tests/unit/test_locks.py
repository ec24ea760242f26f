"""Process liveness (pid and create time) and session writer locks, on real processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from conftest import wait_until

from roost_core.locks import (
    WriterLock,
    create_time,
    is_alive,
    is_descendant,
    lock_holder,
    lock_path,
    read_lock,
)


@pytest.fixture
def child(sleepers):
    """A live child process of this one (killed and reaped after the test)."""
    return sleepers()


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(10)
    return process.pid


def test_is_alive_for_this_process_with_and_without_create_time():
    me = os.getpid()
    assert is_alive(me)
    assert is_alive(me, create_time(me))


def test_is_alive_is_false_when_the_create_time_differs(child):
    started = create_time(child.pid)
    assert started is not None
    assert is_alive(child.pid, started)
    # A reused pid: same number, another process.
    assert not is_alive(child.pid, started - 5.0)
    assert not is_alive(child.pid, started + 1.0)


@pytest.mark.parametrize("pid", [None, 0, -1, True, "123", 2**31 + 5])
def test_is_alive_is_false_for_non_pids(pid):
    assert not is_alive(pid)


def test_is_alive_is_false_for_an_exited_process():
    assert not is_alive(dead_pid())


def test_is_alive_is_false_for_a_zombie():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # Not waited for: the exited child stays a zombie until reaped.
        wait_until(lambda: not is_alive(process.pid), timeout=10, what="child exit")
        os.kill(process.pid, 0)  # the pid still exists (zombie) ...
    finally:
        process.wait(10)


def test_writer_lock_acquire_names_this_process_and_release_removes_it(tmp_path):
    session = tmp_path / "deep" / "s.jsonl"
    lock = WriterLock(session)
    lock.acquire()
    data = read_lock(session)
    assert data == {"pid": os.getpid(), "createTime": create_time(os.getpid())}
    assert lock_holder(session) == os.getpid()
    assert stat.S_IMODE(os.stat(lock_path(session)).st_mode) == 0o600
    lock.acquire()  # re-acquiring our own lock is fine
    lock.release()
    assert not lock_path(session).exists()
    assert lock_holder(session) is None
    lock.release()  # twice is fine
    assert sorted(p.name for p in session.parent.iterdir()) == []


def test_writer_lock_as_context_manager(tmp_path):
    session = tmp_path / "s.jsonl"
    with WriterLock(session) as lock:
        assert lock_holder(session) == lock.pid == os.getpid()
    assert lock_holder(session) is None


def test_a_lock_held_by_another_live_process_refuses(tmp_path, child):
    session = tmp_path / "s.jsonl"
    WriterLock(session, pid=child.pid).acquire()
    assert lock_holder(session) == child.pid
    with pytest.raises(RuntimeError, match=str(child.pid)):
        WriterLock(session).acquire()
    # Release by someone else does not remove it.
    WriterLock(session).release()
    assert lock_holder(session) == child.pid


def test_lock_holder_of_a_dead_pid_is_none_and_the_lock_can_be_taken_over(tmp_path):
    session = tmp_path / "s.jsonl"
    lock_path(session).write_text(json.dumps({"pid": dead_pid(), "createTime": 1.0}))
    assert lock_holder(session) is None
    WriterLock(session).acquire()
    assert lock_holder(session) == os.getpid()


def test_lock_holder_of_a_reused_pid_is_none(tmp_path):
    session = tmp_path / "s.jsonl"
    lock_path(session).write_text(json.dumps({"pid": os.getpid(), "createTime": create_time(os.getpid()) - 100}))
    assert lock_holder(session) is None


@pytest.mark.parametrize("content", ["", "{", "[1]", '{"pid": "12"}', '{"pid": true}', '"x"'])
def test_lock_holder_of_a_broken_lock_file_is_none(tmp_path, content):
    session = tmp_path / "s.jsonl"
    lock_path(session).write_text(content)
    assert lock_holder(session) is None


def test_is_descendant(child):
    me = os.getpid()
    assert is_descendant(me, me)
    assert is_descendant(child.pid, me)
    assert is_descendant(me, os.getppid())
    assert not is_descendant(me, child.pid)
    assert not is_descendant(dead_pid(), me)


def test_is_descendant_of_a_grandchild():
    process = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print(p.pid, flush=True); p.wait()"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        grandchild = int(process.stdout.readline())
        assert is_descendant(grandchild, os.getpid())
        assert is_descendant(grandchild, process.pid)
        assert not is_descendant(process.pid, grandchild)
    finally:
        os.kill(grandchild, 9)
        process.wait(10)
