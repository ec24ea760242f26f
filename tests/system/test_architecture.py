"""docs/architecture.md stays true: every function it names exists, and each of its
numbered paths is called in its order during a real send and a real hand-back.

The daemon runs in this test's process (``daemon.server.serve``, on its real socket in a
throwaway ``ROOST_HOME``), so its calls can be recorded (``sys.setprofile``) with those of
the foreground session that speaks to it from the same event loop; the child is a real
scripted job in its own worker process (its steps in the page are named, not traced).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import pytest

from roost_core.client import AsyncClient
from roost_core.daemon.core import Daemon
from roost_core.daemon.server import serve
from roost_core.foreground import ForegroundSession
from roost_core.paths import resolve_paths
from roost_core.plugins import make_plugin_manager
from roost_core.testing import make_config

pytestmark = pytest.mark.smoke

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
#: Set into the recorded calls where the test's send begins.
SEND_MARK = "-- the send begins --"


def subsections(page: str) -> dict[str, str]:
    """The ``###`` subsections of the page's path section, by title."""
    body = page.split("## The path of one send and one hand-back", 1)[1]
    parts = re.split(r"^### (.+)$", body, flags=re.M)
    return {title.strip(): text for title, text in zip(parts[1::2], parts[2::2], strict=True)}


def numbered(text: str) -> list[str]:
    """The functions of a numbered list, in its order."""
    return re.findall(r"^\d+\. `([\w.]+)`", text, flags=re.M)


def named(text: str) -> list[str]:
    """Every dotted roost name the text puts in backticks."""
    return re.findall(r"`((?:roost_core|roost_plugins)\.[\w.]+)`", text)


def resolve(dotted: str) -> Any:
    """The object ``dotted`` names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ModuleNotFoundError(dotted)


def in_order(calls: list[str], path: list[str]) -> list[str]:
    """The steps of ``path`` not found in ``calls`` in that order (none: all were)."""
    position = 0
    for number, step in enumerate(path):
        try:
            position = calls.index(step, position) + 1
        except ValueError:
            return path[number:]
    return []


def test_the_page_names_paths_that_exist() -> None:
    sections = subsections(PAGE.read_text(encoding="utf-8"))
    assert len(sections) == 3, list(sections)
    for title, text in sections.items():
        assert numbered(text), f"{title}: no numbered path"
        for name in named(text):
            assert callable(resolve(name)), f"{title}: {name} is not a function"


def run_send_and_hand_back(home: Path) -> tuple[list[str], Daemon]:
    """Spawn a child from a foreground session, wait for its report, send it a message
    and wait until it has acked it; every roost call of this process, recorded."""
    calls: list[str] = []

    def record(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith(("roost_core.", "roost_plugins.")):
                calls.append(f"{module}.{frame.f_code.co_qualname}")

    paths = resolve_paths({"ROOST_HOME": str(home)})
    paths.ensure()
    config = make_config({})
    kept: list[Daemon] = []

    async def main() -> None:
        with anyio.fail_after(60):
            await story()

    async def story() -> None:
        async with anyio.create_task_group() as tg:
            daemon: Daemon = await tg.start(lambda task_status: serve(paths, config, make_plugin_manager(config), durable=False, task_status=task_status))
            kept.append(daemon)
            changed = anyio.Event()
            watching: list[Any] = []

            async def on_event(event: dict[str, Any]) -> None:
                if event.get("event") == "agents":
                    watching[0].set()

            watching.append(changed)
            watcher = await AsyncClient.open(paths.socket, on_event)
            tg.start_soon(watcher.run)
            await watcher.call("watch")
            async with ForegroundSession(str(home / "parent.jsonl"), name="parent", paths=paths) as parent:
                await parent.ensure_registered()
                sys.setprofile(record)
                try:
                    ok, text, spawned = await parent.call_tool("roost_spawn", {"task": "count the files", "name": "kid"})
                    assert ok, text
                    await parent.wait_for_delivery(1)  # the child's report
                    calls.append(SEND_MARK)
                    ok, text, sent = await parent.call_tool("roost_send", {"to": "kid", "message": "and the folders"})
                    assert ok and sent["result"] == "delivered", (text, sent)
                    job = daemon.jobs[spawned["id"]]
                    # Until the child's worker has acked the message and the ack is durable
                    # (its stage forgotten): each ack makes the agent table change.
                    while job.queue.acked < sent["seq"] or job.stages:
                        watching[0] = anyio.Event()
                        await watching[0].wait()
                finally:
                    sys.setprofile(None)
                await parent.call("daemon_stop", jobs=True)
            await watcher.aclose()

    anyio.run(main)
    return calls, kept[0]


def test_one_send_and_one_hand_back_take_the_documented_paths(tmp_path: Path, roost_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # The child's worker inherits this process's environment: the test's own home.
    for key in [key for key in os.environ if key.startswith("ROOST_")]:
        monkeypatch.delenv(key)
    for key, value in roost_env.items():
        if key.startswith("ROOST_"):
            monkeypatch.setenv(key, value)
    calls, daemon = run_send_and_hand_back(Path(roost_env["ROOST_HOME"]))
    assert not any(job.has_worker for job in daemon.jobs.values()), "the child's worker outlived the test"
    sections = subsections(PAGE.read_text(encoding="utf-8"))
    # The send's paths are looked for from where it began; the hand-back's from the
    # start (the parent's ack of the report may reach the daemon after the send began).
    after = calls[calls.index(SEND_MARK) :]
    (send, transcript, hand_back) = sections
    assert in_order(after, numbered(sections[send])) == [], f"{send}: called out of the documented order"
    assert in_order(after, numbered(sections[transcript])) == [], f"{transcript}: called out of the documented order"
    assert in_order(calls, numbered(sections[hand_back])) == [], f"{hand_back}: called out of the documented order"
