"""Exit notices (``roost_core.daemon.exits``) by the platform's exit watch (a pidfd on
Linux, a kqueue on macOS and the BSDs): a watched process's exit arrives as a loop
callback, on asyncio's loop and on uvloop (the daemon's), and a pid that names another
process now is never watched; where exits cannot be watched (the portable implementation
on Linux, a kernel without pidfds) the caller is told to check liveness. Real child
processes, real pidfds."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from roost_core import locks, platform
from roost_core.daemon.exits import ExitWatches

#: For the tests of a watch: where the platform has none, the test below of its absence runs.
watches_exits = pytest.mark.skipif(not platform.CAN_WATCH_EXITS, reason="this platform watches no exits (pidfds are Linux's, kqueue the BSDs')")


def run_on(loop: str, story: Callable[[], Awaitable[None]]) -> None:
    (uvloop.run if loop == "uvloop" else asyncio.run)(story())


@watches_exits
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_watched_process_exit_arrives_once_as_a_callback(loop, sleepers):
    child = sleepers()
    started = locks.create_time(child.pid)

    async def story() -> None:
        seen: list[tuple[str, int]] = []
        arrived = asyncio.Event()

        def on_exit(key: str, pid: int) -> None:
            seen.append((key, pid))
            arrived.set()

        watches = ExitWatches(on_exit)
        assert watches.watch("j1", child.pid, started) is True
        assert watches.watch("j1", child.pid, started) is True  # watched already: no second pidfd
        assert len(watches) == 1
        child.kill()
        await asyncio.wait_for(arrived.wait(), 30)
        assert seen == [("j1", child.pid)]
        assert "j1" not in watches

    run_on(loop, story)


@watches_exits
def test_a_pid_that_names_another_process_or_none_is_not_watched(sleepers):
    child, gone = sleepers(), sleepers()
    gone_started = locks.create_time(gone.pid)
    gone.kill()
    gone.wait()

    async def story() -> None:
        watches = ExitWatches(lambda key, pid: pytest.fail(f"no exit was watched, yet {key} got one"))
        # The pid runs, but not the process that started then: a newcomer with a reused pid.
        assert watches.watch("j1", child.pid, locks.create_time(child.pid) - 5.0) is False
        # (Had the pid been reused since, its create time would not match either.)
        assert watches.watch("j2", gone.pid, gone_started) is False
        assert len(watches) == 0

    run_on("asyncio", story)


@watches_exits
def test_a_forgotten_watch_says_nothing_of_its_exit(sleepers):
    first, second = sleepers(), sleepers()

    async def story() -> None:
        seen: list[str] = []
        arrived = asyncio.Event()

        def on_exit(key: str, _pid: int) -> None:
            seen.append(key)
            arrived.set()

        watches = ExitWatches(on_exit)
        assert watches.watch("first", first.pid, locks.create_time(first.pid))
        assert watches.watch("second", second.pid, locks.create_time(second.pid))
        watches.forget("first")
        first.kill()
        first.wait()  # gone before the second is killed: its pidfd, were it read, is ready first
        second.kill()
        await asyncio.wait_for(arrived.wait(), 30)
        assert seen == ["second"]

    run_on("asyncio", story)


def test_where_exits_cannot_be_watched_the_caller_is_told_to_check_liveness(sleepers, monkeypatch):
    """On Linux: a kernel without pidfds (``pidfd_open`` refused); on the portable
    implementation with no kqueue (Linux with ``ROOST_PLATFORM=portable``): always."""
    child = sleepers()

    def refused(_pid: int) -> int:
        raise OSError(errno.ENOSYS, "Function not implemented")

    if platform.NAME == "linux":
        monkeypatch.setattr(os, "pidfd_open", refused)
    elif platform.CAN_WATCH_EXITS:
        pytest.skip("this system watches every exit (kqueue)")

    async def story() -> None:
        watches = ExitWatches(lambda key, pid: None)
        assert watches.watch("j1", child.pid, locks.create_time(child.pid)) is None
        assert watches.supported is False
        assert len(watches) == 0

    run_on("asyncio", story)


@watches_exits
def test_a_loop_that_cannot_watch_the_pidfd_leaves_the_check_to_the_caller(sleepers):
    child = sleepers()

    async def story() -> None:
        loop = asyncio.get_running_loop()

        def cannot(_fd: int, *_args: object) -> None:
            raise OSError(errno.EPERM, "Operation not permitted")

        loop.add_reader = cannot  # type: ignore[method-assign]
        watches = ExitWatches(lambda key, pid: None)
        assert watches.watch("j1", child.pid, locks.create_time(child.pid)) is None
        assert len(watches) == 0 and watches.supported  # this fd, this time: the next round tries again

    run_on("asyncio", story)
