"""The interface between a worker and the agent it runs.

A worker does not care which agent it runs. A host opens (or restores) a session file,
runs a prompt made of queued items, applies steered items at tool boundaries, and says
how each run settled. The worker owns the daemon connection, the queue and its gating;
the host reaches them only through :class:`WorkerServices`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import attrs

from roost_core.queue import Item

if TYPE_CHECKING:
    from roost_core.config import Config


@attrs.frozen
class JobInfo:
    """What a worker knows about its job (from the daemon's hello answer)."""

    id: str
    name: str
    host: str
    cwd: str
    session: str
    task: str
    scenario: Any = None
    model: str | None = None
    thinking: str | None = None
    parentPeer: str | None = None

    @classmethod
    def from_hello(cls, data: dict[str, Any]) -> JobInfo:
        fields = {f.name for f in attrs.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in fields})


@attrs.frozen
class RunOutcome:
    """How a run settled: ``state`` is ``done``, ``idle``, ``needs_input``, ``failed`` or
    ``aborted``; ``final_text`` is the run's last assistant text. ``explained``: the
    error is the agent's own account of the failure (its event stream said why), so the
    worker adds nothing from its stderr."""

    state: str
    final_text: str = ""
    question: str | None = None
    error: str | None = None
    explained: bool = False


class WorkerServices(Protocol):
    """What a host may ask of its worker."""

    #: The user config as the daemon holds it (a host never reads the file: it may have
    #: changed since to something the daemon refused).
    config: Config

    def take_steer(self) -> list[Item]:
        """Items to apply at this tool boundary (empty while a dialog is open)."""

    def delivered(self, item: Item) -> None:
        """The item's entry is in the transcript (its ``message_end``): it may be acked."""

    def unrecorded(self, items: list[Item]) -> None:
        """The agent's process ended during the run before its transcript showed
        ``items`` (handed to it, never written): the worker keeps them, in order, for the
        next run. They start none by themselves: an agent that died is started again by
        the next item, as after any death, so a prompt that kills it cannot loop."""

    def seen(self, seqs: list[int]) -> None:
        """The agent's model had the items ``seqs`` in a model request (their senders'
        receipts say ``seen``). A host that cannot tell never calls it."""

    async def call_tool(self, name: str, args: dict[str, Any]) -> tuple[bool, str]:
        """Run a roost tool (``roost_agents``, ``roost_send``...) through the daemon:
        ``(ok, text for the model)``."""

    def tool_names(self) -> list[str]:
        """The roost tools this session has (empty with ``agentTools: false``)."""

    async def dialog(self, question: str, options: Sequence[str] = ()) -> Item:
        """Open a dialog and wait for the user's answer (a reply item, not yet delivered).
        With ``options`` it is a choice: ``roost answer`` takes only one of them (as
        written here); without, any text answers it."""

    async def status(self, **fields: Any) -> None:
        """Tell the daemon about a change (``status``, ``summary``...)."""

    async def start_host_process(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> Any:
        """Start the agent's own process (an ``anyio`` process, stdin and stdout piped).
        The worker owns it: its pid is the job's host pid, and whatever it leaves behind
        when it exits is ended. Hosts start processes only through these two methods."""

    async def run_command(self, argv: list[str], *, cwd: str | None = None) -> Any:
        """Run a tool's command to its end (``subprocess.CompletedProcess``, output
        captured); what it leaves running ends with the job."""
    def usage_total(self, tokens: int, cost: float) -> None:
        """The session's spending so far, as the host's own usage records sum it (every
        model call in the session file, across workers): the daemon sums a tree's budget
        from it. Call it again whenever the total grows."""


class AgentHost(Protocol):
    async def open(self, job: JobInfo, services: WorkerServices) -> set[int]:
        """Create or restore the session; return the queue seqs already in its transcript."""

    async def run(self, items: list[Item]) -> RunOutcome:
        """Run a prompt made of ``items``; write each item's entry and call
        ``services.delivered`` for it; apply ``services.take_steer()`` at tool boundaries."""

    async def close(self) -> None:
        """Release the session (writer lock, child processes)."""


async def until_exited(process: Any, grace: float) -> None:
    """Wait up to ``grace`` seconds for an agent CLI whose output ended (killed, crashed)
    to exit. A host calls it before it fails the run: the worker ends what that process
    left behind once it has exited (:meth:`~roost_core.worker.supervisor.Supervisor.settled`),
    so nothing the run started outlives its end."""
    if process is None:
        return
    with anyio.move_on_after(grace):
        await process.wait()


async def end_agent_process(process: Any, grace: float) -> None:
    """End an agent CLI the way it ends cleanly: close its stdin and give it ``grace``
    seconds, then SIGTERM and 2 more, then SIGKILL; the process handle is closed after."""
    with contextlib.suppress(Exception):
        await process.stdin.aclose()
    with anyio.move_on_after(grace):
        await process.wait()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        with anyio.move_on_after(2):
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    with contextlib.suppress(Exception):
        await process.aclose()
