"""An MCP server (official Python SDK) for the client's tests: it records what a test cannot
see from the client side (that a cancellation arrived), fails on purpose, and grows its tool
list at runtime.

Usage: python fixture_server.py DIR [PORT]   (stdio, or streamable HTTP on 127.0.0.1:PORT/mcp;
DIR receives the marker files)
"""

import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer

marker_dir = sys.argv[1]
server = MCPServer("fixture")


@server.tool()
async def wait(seconds: float) -> str:
    """Waits for `seconds`; writes DIR/cancelled when the wait is cancelled."""
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        with open(f"{marker_dir}/cancelled", "w") as marker:
            marker.write("cancelled")
        raise
    return "waited"


@server.tool()
def fail() -> str:
    """Always fails (the result has isError: true)."""
    raise ValueError("broken on purpose")


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `extra` and tells the client its tool list changed."""

    def extra(x: int) -> int:
        """Doubles x."""
        return 2 * x

    server.add_tool(extra, name="extra")
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
def headers(ctx: Context) -> dict:
    """The request's Authorization and X-Agentry-Test headers (HTTP only)."""
    request = ctx.request_context.request
    if request is None:
        return {}
    return {
        "authorization": request.headers.get("authorization"),
        "x_agentry_test": request.headers.get("x-agentry-test"),
    }


if len(sys.argv) > 2:
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
else:
    server.run("stdio")
