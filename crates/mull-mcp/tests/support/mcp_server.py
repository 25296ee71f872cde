"""A small MCP server for mull-mcp's tests, written with the official Python SDK.

Run as `mcp_server.py stdio` (the default) or `mcp_server.py http`; over HTTP it binds a free
port on 127.0.0.1 and prints `listening on http://127.0.0.1:PORT/mcp` before serving. Each tool
call appends one JSON line to the file named by MCP_CALL_LOG, when set, so a test can tell
whether the server was called at all.
"""

import asyncio
import json
import os
import socket
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("mull-test")


def note(tool: str, arguments: dict) -> None:
    path = os.environ.get("MCP_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@server.tool()
def echo(text: str) -> str:
    """Returns the text it was given."""
    note("echo", {"text": text})
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    note("add", {"a": a, "b": b})
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    note("fail", {"reason": reason})
    raise ToolError(reason)


@server.tool()
async def sleep(seconds: float) -> str:
    """Answers after the given number of seconds."""
    note("sleep", {"seconds": seconds})
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
def crash() -> str:
    """Ends the server process at once, without answering."""
    note("crash", {})
    sys.stdout.flush()
    os._exit(3)


def serve_http() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn accepts them
    port = sock.getsockname()[1]
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning")
    print(f"listening on http://127.0.0.1:{port}/mcp", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        serve_http()
    else:
        server.run()
