"""Every facility roost takes from the operating system, behind one interface: the rest of
roost asks here and never names a call of one kernel (tests/unit/test_platform.py checks).

Two implementations:

* :mod:`roost_core.platform.linux` — Linux: ``SO_PEERCRED``, ``/proc``, the child
  subreaper, pidfds, ``RWF_DSYNC``;
* :mod:`roost_core.platform.portable` — macOS, the BSDs, any Unix psutil knows:
  ``LOCAL_PEERCRED``/``LOCAL_PEERPID`` (and each BSD's own), psutil, tracked descendants
  and process groups, kqueue, ``F_FULLFSYNC``.

Linux gets the first, every other system the second. ``ROOST_PLATFORM=portable`` makes
Linux take the portable one too (CI runs the suite so, so every fallback runs here);
``ROOST_PLATFORM=linux`` asks for the Linux one (an error elsewhere). Read once, at the
first import: every process of roost (daemon, worker, CLI) reads it from its environment,
which it inherits.

The facilities (docs/reliability.md says what each guarantee rests on, per platform):

* who connected: :func:`peer_credentials`;
* processes: :func:`process_start_time`, :func:`pids`, :func:`parent_links`, :func:`parent_of`,
  :func:`is_running`, :func:`zombie_children`, :func:`processes_with_env`,
  :func:`command_line`;
* fds: :func:`close_inherited_fds`;
* owning what a job starts: :class:`Family` (:data:`ADOPTS_ORPHANS`);
* exit watches: :func:`watch_exit` (:data:`CAN_WATCH_EXITS`, :class:`NoExitWatch`);
* durable writes: :func:`sync_file`, :func:`sync_data`, :func:`write_synced`.
"""

from __future__ import annotations

import os
import sys

from roost_core.platform.common import NoExitWatch

#: The environment variable that picks the implementation.
PLATFORM_VARIABLE = "ROOST_PLATFORM"
#: Its values.
CHOICES = ("linux", "portable")


class PlatformError(ValueError):
    """``ROOST_PLATFORM`` names no implementation this system can run."""


def choose(value: str | None, system: str = sys.platform) -> str:
    """The implementation for ``ROOST_PLATFORM`` = ``value`` on ``system``: the native
    one when unset or empty, else the one it names (``linux`` only on Linux)."""
    native = "linux" if system.startswith("linux") else "portable"
    if not value:
        return native
    if value not in CHOICES:
        raise PlatformError(f"{PLATFORM_VARIABLE}={value!r}: not one of {', '.join(CHOICES)} (or unset: {native} here)")
    if value == "linux" and native != "linux":
        raise PlatformError(f"{PLATFORM_VARIABLE}=linux: this is {system}, not Linux (leave it unset, or say portable)")
    return value


if choose(os.environ.get(PLATFORM_VARIABLE)) == "linux":
    from roost_core.platform import linux as _chosen
else:
    from roost_core.platform import portable as _chosen  # type: ignore[no-redef]

#: ``linux`` or ``portable``: the implementation this process runs.
NAME: str = _chosen.NAME
#: Orphans among a worker's descendants come back to it (a subreaper), so walking parent
#: links finds them all; False: the worker tracks them (:class:`Family`).
ADOPTS_ORPHANS: bool = _chosen.ADOPTS_ORPHANS
#: This system can watch a process's exit on an fd (the kernel may still refuse).
CAN_WATCH_EXITS: bool = _chosen.CAN_WATCH_EXITS

peer_credentials = _chosen.peer_credentials
process_start_time = _chosen.process_start_time
pids = _chosen.pids
parent_links = _chosen.parent_links
parent_of = _chosen.parent_of
is_running = _chosen.is_running
zombie_children = _chosen.zombie_children
processes_with_env = _chosen.processes_with_env
command_line = _chosen.command_line
close_inherited_fds = _chosen.close_inherited_fds
Family = _chosen.Family
watch_exit = _chosen.watch_exit
sync_file = _chosen.sync_file
sync_data = _chosen.sync_data
write_synced = _chosen.write_synced

__all__ = [
    "ADOPTS_ORPHANS", "CAN_WATCH_EXITS", "CHOICES", "NAME", "PLATFORM_VARIABLE", "Family", "NoExitWatch",
    "PlatformError", "choose", "close_inherited_fds", "command_line", "is_running", "parent_links", "parent_of", "peer_credentials",
    "pids", "process_start_time", "processes_with_env", "sync_data", "sync_file", "watch_exit",
    "write_synced", "zombie_children",
]
