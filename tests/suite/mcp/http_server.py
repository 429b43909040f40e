"""A small streamable-HTTP MCP server for troupe's tests, on the standard library alone: each POST to /mcp carries
one JSON-RPC message and is answered with JSON (a request) or 202 (a notification); GET and DELETE are 405 (no
server-initiated stream, no session to end). It answers only requests carrying `Authorization: Bearer <token>` and
`X-Org: <org>` (the token and org given as arguments), else 401, and prints the port it listens on.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN, ORG = sys.argv[1], sys.argv[2]

TOOLS = [
    {
        "name": "lookup",
        "description": "Looks a word up.",
        "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    }
]


def answer(request):
    method = request.get("method")
    params = request.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "web", "version": "1"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call" and params.get("name") == "lookup":
        word = (params.get("arguments") or {}).get("word")
        return {"content": [{"type": "text", "text": "%s: a word the HTTP server knows" % word}]}
    return None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(405)

    def do_DELETE(self):
        self.reply(405)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Authorization") != "Bearer " + TOKEN or self.headers.get("X-Org") != ORG:
            self.reply(401, {"error": "who are you?"})
            return
        message = json.loads(body)
        if "id" not in message:
            self.reply(202)
            return
        result = answer(message)
        if result is None:
            self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "unknown"}})
        else:
            self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "result": result})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
