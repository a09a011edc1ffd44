"""Tools: MCP servers' tools that plan steps may call (docs/tools.md).

`base` holds what the loop sees of tools (a `Toolbox`: the tools' specs, and a call that
returns a `ToolResult`); `mcp` connects a Toolbox to the servers `AEON_MCP_CONFIG` names, with
the official `mcp` SDK.
"""
