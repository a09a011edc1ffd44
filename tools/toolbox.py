"""The tools a worker has for its life: the servers AEON_MCP_CONFIG names, connected, or none.

Kept apart from reading the file (tools/config.py) and from the MCP client (tools/mcp.py), so
that the client depends on the file's models and nothing depends back on the client. The MCP
SDK is imported only when a file is set, so a deployment without tools starts no slower.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aeonloop.tools.base import NoTools, Toolbox
from aeonloop.tools.config import ToolSettings, load_servers


@contextlib.asynccontextmanager
async def open_toolbox(settings: ToolSettings) -> AsyncIterator[Toolbox]:
    """The tools of the servers AEON_MCP_CONFIG names, connected for the life of the block
    (ToolsNotReady if one cannot start or answer); NoTools when it is unset."""
    if settings.mcp_config is None:
        yield NoTools()
        return
    servers = load_servers(settings.mcp_config)
    # Imported here: the SDK costs start-up that a deployment without tools never needs.
    from aeonloop.tools.mcp import connect

    toolbox = await connect(servers, settings.mcp_start_timeout_s)
    try:
        yield toolbox
    finally:
        await toolbox.aclose()
