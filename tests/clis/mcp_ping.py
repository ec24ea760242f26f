"""A tiny stdio MCP server with one tool, ``ping``, for the agent-CLI tests.

``ping(message)`` answers ``pong: <message>`` and appends the message to the file named by
``$PING_LOG`` (when set), so a test sees the call reached the server, not only the model.

Run: ``python mcp_ping.py`` (the CLI under test starts it from its MCP config).
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("ping")


@server.tool()
def ping(message: str) -> str:
    """Answer pong with the message (and log it to $PING_LOG)."""
    log = os.environ.get("PING_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(message + "\n")
    return f"pong: {message}"


if __name__ == "__main__":
    server.run()
