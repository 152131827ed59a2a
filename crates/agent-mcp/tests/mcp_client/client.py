"""Drives an MCP server with the official Python SDK (PyPI `mcp`), for agentry's tests.

Usage: client.py PLAN_JSON

PLAN_JSON is {"transport": "stdio", "command": ..., "args": [...]} or
{"transport": "http", "url": ..., "key": ... or null}, plus "steps": a list of
  {"list": true}                          -> {"tools": [{"name", "inputSchema", "outputSchema"}]}
  {"call": NAME, "arguments": {...}}      -> {"isError", "content", "structuredContent", "progress"}
                                             or {"error": {"code", "message"}}
  {"cancel": NAME, "after": SECONDS}      -> {"cancelled": true} once the call was abandoned
                                             (the SDK sends notifications/cancelled)
  {"until": NAME, "text": TEXT}           -> calls NAME until its text is TEXT (10 s at most)
Each step prints one JSON line on stdout.
"""

import json
import sys

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


def dump(value):
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run_steps(session, steps):
    await session.initialize()
    for step in steps:
        if "list" in step:
            listed = await session.list_tools()
            tools = [dump(tool) for tool in listed.tools]
            print(json.dumps({"tools": [
                {"name": t["name"], "inputSchema": t.get("inputSchema"),
                 "outputSchema": t.get("outputSchema")} for t in tools]}), flush=True)
        elif "call" in step:
            progress = []

            async def on_progress(done, total, message):
                progress.append(message)

            try:
                result = await session.call_tool(
                    step["call"], step.get("arguments", {}), progress_callback=on_progress)
                out = dump(result)
                print(json.dumps({
                    "isError": out.get("isError", False),
                    "content": out.get("content", []),
                    "structuredContent": out.get("structuredContent"),
                    "progress": progress,
                }), flush=True)
            except MCPError as error:
                print(json.dumps({"error": {"code": error.error.code,
                                            "message": error.error.message}}), flush=True)
        elif "cancel" in step:
            with anyio.move_on_after(float(step["after"])) as scope:
                await session.call_tool(step["cancel"], step.get("arguments", {}))
            print(json.dumps({"cancelled": scope.cancelled_caught}), flush=True)
        elif "until" in step:
            text = None
            with anyio.move_on_after(10):
                while True:
                    result = await session.call_tool(step["until"], {})
                    text = result.content[0].text
                    if text == step["text"]:
                        break
                    await anyio.sleep(0.05)
            print(json.dumps({"until": text}), flush=True)


async def main():
    plan = json.loads(sys.argv[1])
    if plan["transport"] == "stdio":
        params = StdioServerParameters(command=plan["command"], args=plan.get("args", []),
                                       env=plan.get("env"), cwd=plan.get("cwd"))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await run_steps(session, plan["steps"])
    else:
        headers = {}
        if plan.get("key"):
            headers["Authorization"] = "Bearer " + plan["key"]
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(plan["url"], http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await run_steps(session, plan["steps"])


anyio.run(main)
