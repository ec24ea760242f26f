"""``roost mcp``: roost as a stdio MCP server, on the official ``mcp`` SDK.

Tools: ``roost_agents``, ``roost_send`` and ``roost_spawn`` exactly as the daemon's tools
plugin defines them (names, descriptions, parameters and result texts come from the
daemon, as for the pi extension), plus ``roost_inbox``, which takes what waits for this
session (for clients that cannot be pushed to).

Two modes, chosen by the environment:

- **foreground** (a user's MCP client): the client's session is a roost peer
  (:class:`roost_core.mcp.peer.McpPeer`). When the client is Claude Code, or another agent
  CLI whose hooks speak Claude Code's protocol (``--hooks``, or its host named by
  ``--host`` / ``ROOST_MCP_HOST``: Codex, Qwen Code), the server also answers its hooks
  (``roost claude hook``, ``roost codex hook``, ``roost qwen hook``) over a private
  socket, so items are pushed.
- **job** (``ROOST_BRIDGE`` set: a background job of a host that runs an agent
  CLI, Claude Code, Codex or Qwen Code): the tools run through the job's worker over that
  bridge; the worker holds the job's identity.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from roost_core.hosts.handover import BRIDGE_ENV

log = logging.getLogger("roost.mcp")

INBOX_TOOL = {
    "name": "roost_inbox",
    # Short: every tool definition costs tokens in every request.
    "description": "Take the agent messages and reports waiting for you (not from the user). Do not poll.",
    "parameters": {"type": "object", "properties": {}},
}
#: The key of a job's tool (in the worker's ``hello``) that the worker answers with a bridge
#: op of its own (its value) on a connection of its own: a permission prompt's tool.
BRIDGE_OP = "bridgeOp"
MISSING_SDK = "mcp_missing: the MCP SDK is not installed; install roost with its MCP extra: pip install 'roost[mcp]'"


class McpMissing(RuntimeError):
    """The ``mcp`` package is not installed."""


def load_sdk() -> Any:
    try:
        import mcp.types as types
        from mcp.server.lowlevel.server import Server
        from mcp.server.stdio import stdio_server
    except ImportError as exc:
        raise McpMissing(MISSING_SDK) from exc
    return types, Server, stdio_server


def build_server(list_tools: Any, call_tool: Any) -> Any:
    """An MCP server whose tools are ``list_tools()`` (dicts as the daemon gives them) and
    whose calls go to ``call_tool(name, args) -> (ok, text)``."""
    types, Server, _ = load_sdk()
    from roost_core import __version__

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        tools = await list_tools()
        return types.ListToolsResult(
            tools=[types.Tool(name=t["name"], description=t.get("description"), input_schema=t.get("parameters") or {"type": "object"}) for t in tools]
        )

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        try:
            ok, text = await call_tool(params.name, dict(params.arguments or {}))
        except Exception as exc:  # the model reads the error; the server stays up
            log.exception("tool %s failed", params.name)
            ok, text = False, f"error: {exc or type(exc).__name__}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=not ok)

    return Server("roost", version=__version__, on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve_stdio(server: Any) -> None:
    _, _, stdio_server = load_sdk()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


# ---------------------------------------------------------------------- job mode


async def run_job_mode(bridge_path: str) -> None:
    from roost_core.hosts.bridge import AsyncBridgeClient

    bridge = await AsyncBridgeClient.connect(bridge_path)
    tools = (await bridge.call("hello")).get("tools") or []
    # A tool that waits for the user (a host's permission prompt) names its own bridge op.
    own_ops = {str(tool["name"]): str(tool[BRIDGE_OP]) for tool in tools if isinstance(tool, dict) and tool.get(BRIDGE_OP)}

    async def list_tools() -> list[dict[str, Any]]:
        return tools

    async def call_tool(name: str, args: dict[str, Any]) -> tuple[bool, str]:
        if name in own_ops:
            return True, await ask_permission(bridge_path, own_ops[name], args)
        answer = await bridge.call("tool_call", name=name, args=args)
        return bool(answer.get("ok")), str(answer.get("text", ""))

    try:
        await serve_stdio(build_server(list_tools, call_tool))
    finally:
        await bridge.aclose()


async def ask_permission(bridge_path: str, op: str, args: dict[str, Any]) -> str:
    """A host's permission prompt (a tool call of its agent asking to run a tool), asked of
    the worker with bridge op ``op`` on a connection of its own: it waits for the user,
    and the roost tools' calls must not wait behind it."""
    from roost_core.hosts.bridge import AsyncBridgeClient

    bridge = await AsyncBridgeClient.connect(bridge_path)
    try:
        answer = await bridge.call(op, tool_name=args.get("tool_name"), input=args.get("input"), tool_use_id=args.get("tool_use_id"))
    finally:
        await bridge.aclose()
    return str(answer.get("text", ""))


# ---------------------------------------------------------------------- foreground mode


def daemon_tools(paths: Any) -> list[dict[str, Any]]:
    """The agent tools, from the daemon (started if none runs)."""
    from roost_core.client import connect

    with connect(paths) as conn:
        return list(conn.call("tools").get("tools") or [])


#: Names the host an MCP client runs when it is another agent CLI with hooks (a host's
#: install command sets it in the server's environment): the hook bridge is served for it,
#: and its session file is read with that host's ``transcript_seqs``.
HOST_ENV = "ROOST_MCP_HOST"


def host_seqs_reader(host: str) -> Any:
    """The ``transcript_seqs`` of the registered host ``host`` (None: no such host, or it
    writes roost's own format)."""
    from roost_core.hosts import registered_hosts
    from roost_core.plugins import make_plugin_manager

    spec = registered_hosts(make_plugin_manager()).get(host)
    return spec.transcript_seqs if spec is not None else None


async def run_foreground(args: argparse.Namespace) -> None:
    from roost_core.mcp.peer import McpPeer
    from roost_core.paths import resolve_paths

    paths = resolve_paths()
    client_pid = os.getppid()
    claude_session_id = os.environ.get("CLAUDE_CODE_SESSION_ID") or None
    claude = bool(claude_session_id or os.environ.get("CLAUDECODE"))
    session = args.session or os.environ.get("ROOST_MCP_SESSION") or None
    cwd = os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    name = args.name or os.environ.get("ROOST_NAME") or Path(cwd).name or "mcp"
    tools = await anyio.to_thread.run_sync(daemon_tools, paths)
    # The client's host: named by --host (Qwen Code's install) or ROOST_MCP_HOST (Codex's).
    host = None if claude else args.host or os.environ.get(HOST_ENV) or None
    # With --hooks (Qwen Code) an item is acknowledged once a hook hands it over: Qwen
    # Code's session file does not keep what a blocked stop handed over. Codex's rollout
    # keeps everything, so there an item is acknowledged once the file shows it.
    read_seqs = host_seqs_reader(host) if host and not args.hooks else None

    async with McpPeer(paths, name=name, cwd=cwd, client_pid=client_pid, session=session, claude=claude,
                       claude_session_id=claude_session_id, host=host, read_seqs=read_seqs) as peer:

        async def list_tools() -> list[dict[str, Any]]:
            return [*(peer.tools or tools), INBOX_TOOL]

        async def call_tool(name: str, tool_args: dict[str, Any]) -> tuple[bool, str]:
            if name == INBOX_TOOL["name"]:
                return True, await peer.inbox_text()
            return await peer.tool_call(name, tool_args)

        server = build_server(list_tools, call_tool)
        async with anyio.create_task_group() as tg:
            if claude or host or args.hooks:
                await start_hook_bridge(tg, peer, paths, client_pid)
            await serve_stdio(server)
            tg.cancel_scope.cancel()


async def start_hook_bridge(tg: Any, peer: Any, paths: Any, client_pid: int) -> None:
    """Listen for the client's hooks (see ``roost_plugins.claude.hook``)."""
    from roost_core.hosts.bridge import BridgeServer, foreground_socket

    async def answer(frame: dict[str, Any]) -> dict[str, Any]:
        if frame.get("op") != "hook":
            raise ValueError(f"unknown op {frame.get('op')!r}")
        return {"output": await peer.answer_hook(str(frame.get("event")), dict(frame.get("input") or {}))}

    bridge = BridgeServer(foreground_socket(paths.home, client_pid), answer, lambda: client_pid)
    try:
        await bridge.open()
    except OSError as exc:
        log.warning("no hook bridge (items are pulled with roost_inbox only): %s", exc)
        return

    async def serve() -> None:
        try:
            await bridge.serve()
        finally:
            with anyio.CancelScope(shield=True):
                await bridge.close()

    tg.start_soon(serve)


# ---------------------------------------------------------------------- the command


def run(args: argparse.Namespace) -> int:
    try:
        load_sdk()
    except McpMissing as exc:
        print(f"roost: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s roost-mcp %(levelname)s %(message)s", stream=sys.stderr)
    bridge = os.environ.get(BRIDGE_ENV)
    try:
        if bridge:
            anyio.run(run_job_mode, bridge)
        else:
            anyio.run(run_foreground, args)
    except KeyboardInterrupt:
        return 0
    return 0


def main(argv: list[str] | None = None) -> int:
    from roost_core.mcp.args import add_arguments

    parser = add_arguments(argparse.ArgumentParser(prog="roost mcp"))
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
