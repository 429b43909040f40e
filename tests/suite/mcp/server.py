"""A small MCP server for troupe's tests, on the standard library alone: JSON-RPC 2.0 over stdio, one message a
line, as the MCP stdio transport specifies.

Tools:
- echo {text}: the text back, a 1x1 PNG, and a resource link;
- hang {}: never answers (for timeouts and a server killed mid-call);
- fail {}: a result with isError: true;
- read {path}: the file's text, or the error reading it (isError), and the server's TMPDIR.
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
]


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


def main():
    print("probe MCP server started", file=sys.stderr, flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        try:
            result = answer(request)
        except (KeyError, LookupError) as error:
            send({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "unknown: %s" % error}})
            continue
        if result is not None:
            send({"jsonrpc": "2.0", "id": request["id"], "result": result})


main()
