"""The bench's MCP server, over stdio, written with the official SDK: one tool, `add`, that
answers at once, so what the tools section measures is Aeon's side of a call (the protocol
round trip, the schema check, the memo write), not a tool's own work.

    python bench/mcp_server.py
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("aeon-bench-tools")


@server.tool("add")
def add(a: int, b: int) -> str:
    """Add two whole numbers."""
    return str(a + b)


if __name__ == "__main__":
    server.run("stdio")
