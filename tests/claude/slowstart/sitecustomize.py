"""Test-only: a ``roost mcp`` that is slow to start, as on a loaded machine.

With this folder on ``PYTHONPATH`` and ``ROOST_TEST_MCP_START_DELAY=SECONDS``, a Python
process whose command line runs roost's MCP server (``roost mcp``, ``python -m
roost_core.mcp``) spends that long starting before it answers Claude Code, as Python and
the MCP SDK do when the machine is busy (test_claude_first_call.py). Every other process
(hooks, the daemon, workers) starts as usual.
"""

import os
import time

_delay = os.environ.get("ROOST_TEST_MCP_START_DELAY")
if _delay:
    try:
        with open("/proc/self/cmdline", "rb") as _fh:
            _argv = _fh.read().split(b"\0")
    except OSError:
        _argv = []
    if b"mcp" in _argv[1:3] or b"roost_core.mcp" in _argv:
        time.sleep(float(_delay))  # the slow start itself, not a wait for anything
