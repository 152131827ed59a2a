"""A synthetic MCP server (official Python SDK, low-level API) exporting a large tool catalog,
for the tool-search tests: 10 systems x 10 objects x 5 verbs = 500 tools, each with a
description and one required parameter. A call answers with the tool's name and arguments,
so a test can tell which tool ran on the server.

Usage: python catalog_server.py [COUNT]   (stdio; COUNT tools of the 500, default all)
"""

import json
import sys

import anyio
import mcp.server.stdio
from mcp import types
from mcp.server.lowlevel import Server

OBJECTS = ["invoice", "customer", "ticket", "calendar", "repository",
           "payment", "email", "document", "shipment", "contract"]
VERBS = ["create", "get", "list", "update", "delete"]

TOOLS = [
    types.Tool(
        name=f"s{system}_{verb}_{obj}",
        description=f"{verb.capitalize()} a {obj} in system {system}.",
        input_schema={
            "type": "object",
            "properties": {f"{obj}_id": {"type": "string", "description": f"The {obj}'s id."}},
            "required": [f"{obj}_id"],
        },
    )
    for system in range(10)
    for obj in OBJECTS
    for verb in VERBS
][: int(sys.argv[1]) if len(sys.argv) > 1 else 500]
NAMES = {tool.name for tool in TOOLS}


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    if params.name not in NAMES:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"unknown tool {params.name}")],
            is_error=True,
        )
    text = f"{params.name} ran with {json.dumps(params.arguments or {}, sort_keys=True)}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("catalog", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with mcp.server.stdio.stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


anyio.run(main)
