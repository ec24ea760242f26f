"""Agent tools in the daemon: a call of a tool is its declaration's ``run``, with the
caller's authenticated identity and what the daemon does for it.

Every tool, the built-in ones (``roost_agents``, ``roost_send``, ``roost_spawn``) and a
team's, is a :class:`~roost_core.records.ToolDef` contributed by a plugin: its
``parameters`` are what every host shows the model and what the call's arguments are
checked against (:mod:`~roost_core.toolschema`), its ``run`` what the daemon does. No table
maps tool names to ops. :class:`CallerServices` is the ``roost`` a run gets: the ops a
session may do, done as that session, with each op's own argument checks
(:mod:`~roost_core.daemon.optable`), reach and limits.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

from roost_core import policy
from roost_core.daemon.callers import caller_of, sender_info
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import settle
from roost_core.daemon.optable import OPS
from roost_core.hosts import session_lines, transcript_reader
from roost_core.protocol import NOT_FOUND, UNREACHABLE, ProtocolError
from roost_core.records import ToolCall, ToolDef, ToolServices, TranscriptEntry
from roost_core.toolschema import check_tool_args

log = logging.getLogger("roost.daemon")

#: The most entries ``transcript`` gives a tool at once.
MAX_TRANSCRIPT_ENTRIES = 200


def offered_tools(pm: Any, config: Any, hosts: Sequence[str] = ()) -> list[ToolDef]:
    """The tools the plugins contribute that can run (a declaration without ``run`` is
    left out, with a log line: offering it would give the model a tool whose every call
    fails). ``hosts``: the names of the registered hosts (a tool may offer a choice)."""
    tools = []
    for tool in policy.tool_definitions(pm, config, hosts):
        if tool.run is None:
            log.warning("agent tool %r has no run (its ToolDef names no code to run it): not offered", tool.name)
            continue
        tools.append(tool)
    return tools


class ToolBox:
    """The agent tools, by name: every declaration the plugins contribute that can run
    (:func:`offered_tools`), worked out again when the plugin set changes."""

    def __init__(self, pm: Any, config: Any, hosts: Sequence[str]) -> None:
        self.pm = pm
        self.config = config
        #: The names of the registered hosts (a tool may offer a choice of them).
        self.hosts = tuple(hosts)
        #: The agent tools as last worked out, with the plugin set's generation then.
        self._tools: tuple[int | None, dict[str, ToolDef]] | None = None

    def by_name(self) -> dict[str, ToolDef]:
        """The tools that can run, by name."""
        generation = getattr(self.pm, "generation", None)
        if self._tools is None or self._tools[0] != generation or generation is None:
            self._tools = (generation, {tool.name: tool for tool in offered_tools(self.pm, self.config, self.hosts)})
        return self._tools[1]

    def forget(self) -> None:
        """Work the tools out again when next asked (the config changed)."""
        self._tools = None

    def listed(self) -> list[dict[str, Any]]:
        """The tools as every host shows them to the model (name, description, parameters)."""
        return [tool.to_json() for tool in self.by_name().values()]


async def run_tool(tool: ToolDef, call: ToolCall) -> dict[str, Any]:
    """Run one call; the data of its result (a tool's ``run`` may be plain or async)."""
    data = tool.run(call)
    if inspect.isawaitable(data):
        data = await data
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TypeError(f"agent tool {tool.name!r} returned {type(data).__name__}, not a JSON object")
    return data


def tool_call(tool: ToolDef, caller: Any, args: Any, services: ToolServices) -> ToolCall:
    """A call of ``tool`` with ``args`` checked against its parameters (``bad_args``)."""
    return ToolCall(caller=caller, args=check_tool_args(tool.name, tool.parameters, args, tool.absent), roost=services)


class CallerServices(ToolServices):
    """:class:`~roost_core.records.ToolServices` for one call, as the session bound to
    ``conn``. ``messaging`` is the messaging service whose ops it does
    (:class:`~roost_core.daemon.ops_messaging.Messaging`); ``key`` the call's request key,
    which a send or spawn keeps (asked again, the same message or the same child);
    ``again``: the call is that key asked again."""

    def __init__(self, messaging: Any, conn: Connection, key: str | None, again: bool = False) -> None:
        self.messaging = messaging
        self.conn = conn
        self.key = key
        self.again = again

    def _args(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` as op ``op`` checks them (its limits, written once in the op table)."""
        given = {name: value for name, value in args.items() if value is not None}
        if self.key is not None and OPS[op].keyed:
            given["key"] = self.key
            if self.again:
                given["again"] = True
        return OPS[op].check(given)

    async def peers(self, watch: str | None = None) -> dict[str, Any]:
        listed: dict[str, Any] = await self.messaging.op_peers(self.conn, self._args("peers", {"watch": watch}))
        return listed

    async def send(self, to: str, message: str, reply_to: str | None = None, urgent: bool | None = None) -> dict[str, Any]:
        args = self._args("send", {"to": to, "message": message, "reply_to": reply_to, "urgent": urgent})
        if self.key is None:
            sent: dict[str, Any] = await self.messaging.op_send(self.conn, args)
            return sent
        # Through the ledger, as the send op is: a foreground push waits for the answer's
        # record, and the send asked again finds its first answer.
        messaging, conn = self.messaging, self.conn
        return await settle(messaging.ledger.accept(caller_of(conn), "send", self.key, lambda: messaging.accept_send(conn, args), args=args))

    async def spawn(self, task: str, **fields: Any) -> dict[str, Any]:
        # Through a tool, a host is the agent's choice (checked by the limits plugin).
        spawned: dict[str, Any] = await self.messaging.op_spawn(self.conn, self._args("spawn", {"task": task, **fields}), via_tool=True)
        return spawned

    async def transcript(self, peer: str, last: int = 20) -> list[TranscriptEntry]:
        tables = self.messaging.tables
        target, decision = tables.route(sender_info(tables, self.conn), peer)
        if not decision.allowed:
            raise ProtocolError(UNREACHABLE, decision.reason or f"peer {target.id} is not reachable")
        if not target.session:
            raise ProtocolError(NOT_FOUND, f"{target.id} has no transcript")
        spec = self.messaging.hosts.get(target.host or "")
        read = transcript_reader(spec)  # the host's own format
        entries = [entry for raw in session_lines(spec, target.session) for entry in read(raw)]
        return entries[-max(0, min(last, MAX_TRANSCRIPT_ENTRIES)) :] if last > 0 else []
