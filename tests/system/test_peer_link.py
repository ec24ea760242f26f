"""The one daemon link every registering client keeps (``roost_core.peerlink``), seen
through a foreground session against the real daemon."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest
from fg import run_async

from roost_core.foreground import ForegroundSession
from roost_core.protocol import ProtocolError


def test_a_refused_register_ends_the_link_and_every_call_hears_why(daemon, tmp_path):
    """The daemon refuses the session (it claims a pid that is gone): the refusal reaches
    the caller, the link ends instead of registering again and again, and a later call
    hears the same refusal at once."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()

    async def story() -> None:
        async with ForegroundSession(None, name="ghost", paths=daemon.paths, cwd=str(tmp_path), register_pid=dead.pid) as me:
            with pytest.raises(ProtocolError) as first:
                await me.ensure_registered()
            assert first.value.code == "unauthorized"
            with anyio.fail_after(30):
                await me.link.ended.wait()
            assert me.client is None and not me.link.is_linked
            with pytest.raises(ProtocolError) as again:
                await me.call_tool("roost_agents", {})
            assert again.value.code == "unauthorized"

    run_async(story)
    assert daemon.call("daemon_status")["foreground"] == 0
