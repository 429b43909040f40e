"""A small MCP server, on the Python standard library alone: JSON-RPC 2.0 over stdio, one message a line, as the MCP
stdio transport specifies. troupe's tests use it (tests/suite/mcp.rs), and it is a way to try MCP servers as tools
without installing one (README, "Daily use"):

    [mcp_servers.probe]
    command = "python3"
    args = ["/path/to/troupe/examples/mcp/probe_server.py"]

Tools:
- echo {text}: the text back, a 1x1 PNG, and a resource link;
- hang {}: never answers (for timeouts and a server killed mid-call);
- fail {}: a result with isError: true;
- read {path}: the file's text, or the error reading it (isError), and the server's TMPDIR;
- grow {}: adds a tool `extra` and says so (notifications/tools/list_changed).
"""

import json
import os
import sys

# A 1x1 transparent PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

TOOLS = [
    {
        "name": "echo",
        "description": "Says the text back.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "What to say."}},
            "required": ["text"],
        },
    },
    {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "read", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "grow", "description": "Adds a tool.", "inputSchema": {"type": "object", "properties": {}}},
]
EXTRA = {"name": "extra", "description": "Added by grow.", "inputSchema": {"type": "object", "properties": {}}}


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request):
    method = request.get("method")
    params = request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "probe", "version": "1.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        name = params.get("name")
        arguments = params.get("arguments") or {}
        if name == "echo":
            return {
                "content": [
                    {"type": "text", "text": "echo: " + str(arguments.get("text"))},
                    {"type": "image", "data": PNG, "mimeType": "image/png"},
                    {"type": "resource_link", "uri": "file:///srv/notes.md", "name": "notes", "mimeType": "text/markdown"},
                ]
            }
        if name == "hang":
            return None
        if name == "grow":
            if EXTRA not in TOOLS:
                TOOLS.append(EXTRA)
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            return {"content": [{"type": "text", "text": "grown"}]}
        if name == "extra":
            return {"content": [{"type": "text", "text": "extra"}]}
        if name == "fail":
            return {"content": [{"type": "text", "text": "the probe failed on purpose"}], "isError": True}
        if name == "read":
            tmpdir = "TMPDIR=" + os.environ.get("TMPDIR", "")
            try:
                with open(arguments["path"]) as file:
                    return {"content": [{"type": "text", "text": tmpdir}, {"type": "text", "text": file.read()}]}
            except OSError as error:
                text = "%s: %s" % (type(error).__name__, error.strerror)
                return {"content": [{"type": "text", "text": tmpdir}, {"type": "text", "text": text}], "isError": True}
        raise KeyError(name)
    raise LookupError(method)


def note(request):
    """Appends a notification's method (and a cancelled request's id) to $MCP_PROBE_NOTES, when it is set."""
    path = os.environ.get("MCP_PROBE_NOTES")
    if path:
        with open(path, "a") as notes:
            params = request.get("params") or {}
            notes.write("%s %s\n" % (request.get("method"), params.get("requestId", "")))


def main():
    print("probe MCP server started", file=sys.stderr, flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        request = json.loads(line)
        if "id" not in request:
            note(request)
            continue
        try:
            result = answer(request)
        except (KeyError, LookupError) as error:
            send({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "unknown: %s" % error}})
            continue
        if result is not None:
            send({"jsonrpc": "2.0", "id": request["id"], "result": result})


main()
