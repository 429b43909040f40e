#!/usr/bin/env python3
"""file_watch: a troupe plugin (extension protocol 0.0.6) that watches one file and forwards each new line.

It offers one tool, `watch`: called in a session, it starts forwarding the file's new lines into that session,
each as a producer message (`plugin/producer/send`, mode `queue` unless the call asked for `steer`) and as a
plugin event (`plugin/emit`, name `line`). Sessions it serves are kept in a state file, so after a restart the
plugin registers again during the recovery handshake and goes on where it left off.

Standard library only. Configure it in the daemon's config.toml:

    [plugins.file_watch]
    command = "/usr/bin/python3"
    args = ["/path/to/examples/plugins/file_watch.py"]
    env = { WATCH_FILE = "/var/log/app.log", STATE_FILE = "/var/lib/file_watch/state.json" }

Environment: WATCH_FILE (required), STATE_FILE (default: WATCH_FILE + ".troupe-watch.json"), POLL_MS (200),
PLUGIN_NAME (file_watch: it must equal the config key).

Everything but protocol messages goes to stderr, which the daemon copies to its log.
"""

import json
import os
import sys
import threading
import time

VERSION = "0.0.6"
NAME = os.environ.get("PLUGIN_NAME", "file_watch")
WATCH_FILE = os.environ.get("WATCH_FILE", "")
STATE_FILE = os.environ.get("STATE_FILE") or (WATCH_FILE + ".troupe-watch.json")
POLL = int(os.environ.get("POLL_MS", "200")) / 1000.0

out_lock = threading.Lock()
state_lock = threading.Lock()
pending = {}  # request id -> [threading.Event, answer]
next_id = [0]
# session id -> {"mode": "queue"|"steer", "producer_id": str|None}
sessions = {}
stopping = threading.Event()


def log(*parts):
    print("file_watch:", *parts, file=sys.stderr, flush=True)


def send(message):
    message["jsonrpc"] = "2.0"
    line = json.dumps(message, separators=(",", ":"))
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def request(method, params, timeout=30.0):
    """Sends a request to the daemon and waits for its answer: (result, error)."""
    with state_lock:
        next_id[0] += 1
        rid = "fw-%d" % next_id[0]
        slot = [threading.Event(), None]
        pending[rid] = slot
    send({"id": rid, "method": method, "params": params})
    if not slot[0].wait(timeout):
        with state_lock:
            pending.pop(rid, None)
        return None, {"message": "timed out"}
    answer = slot[1]
    return answer.get("result"), answer.get("error")


def save_state():
    with state_lock:
        data = {sid: {"mode": s["mode"]} for sid, s in sessions.items()}
    tmp = STATE_FILE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, STATE_FILE)


def load_state():
    try:
        with open(STATE_FILE) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return
    with state_lock:
        for sid, entry in data.items():
            sessions[sid] = {"mode": entry.get("mode", "queue"), "producer_id": None}


def register(session_id):
    result, error = request("plugin/producer/register", {"session_id": session_id})
    if error:
        log("could not register for", session_id, error.get("message"))
        return None
    with state_lock:
        if session_id in sessions:
            sessions[session_id]["producer_id"] = result["producer_id"]
    return result["producer_id"]


def recover():
    """Runs after each (re)start: registrations are gone, so register again for every session served."""
    load_state()
    with state_lock:
        served = list(sessions)
    ok = all(register(sid) is not None for sid in served)
    outcome = {"status": "ready"} if ok else {"status": "failed", "detail": "a registration failed"}
    request("plugin/recovery/complete", {"outcome": outcome})
    log("recovered", len(served), "session(s):", outcome["status"])


def forward(line, offset):
    with state_lock:
        targets = [(sid, s["mode"], s["producer_id"]) for sid, s in sessions.items()]
    for sid, mode, producer_id in targets:
        _, error = request("plugin/emit", {"session_id": sid, "name": "line", "payload": {"file": WATCH_FILE, "line": line}})
        if error:
            log("emit refused:", error.get("message"))
        if producer_id is None:
            continue
        params = {
            "session_id": sid,
            "producer_id": producer_id,
            "mode": mode,
            # The same line at the same offset is the same message: a retry returns the original receipt.
            "idempotency_key": "line-%d" % offset,
            "body": line,
        }
        _, error = request("plugin/producer/send", params)
        if error:
            log("send refused:", error.get("message"))


def watch():
    """Polls the file and forwards every complete new line; starts at the file's end."""
    try:
        offset = os.path.getsize(WATCH_FILE)
    except OSError:
        offset = 0
    buffered = b""
    while not stopping.is_set():
        time.sleep(POLL)
        try:
            size = os.path.getsize(WATCH_FILE)
        except OSError:
            continue
        if size < offset:  # truncated: start over
            offset, buffered = 0, b""
        if size == offset:
            continue
        with open(WATCH_FILE, "rb") as f:
            f.seek(offset)
            chunk = f.read(size - offset)
        start = offset - len(buffered)
        offset += len(chunk)
        buffered += chunk
        while b"\n" in buffered:
            raw, buffered = buffered.split(b"\n", 1)
            text = raw.decode("utf-8", "replace")
            if text:
                forward(text, start)
            start += len(raw) + 1


def call_tool(params):
    if params.get("tool") != "watch":
        return {"output": {"type": "single", "text": "unknown tool"}, "is_error": True}
    sid = params["session_id"]
    mode = params.get("arguments", {}).get("mode", "queue")
    if mode not in ("queue", "steer"):
        return {"output": {"type": "single", "text": "mode is queue or steer"}, "is_error": True}
    with state_lock:
        sessions[sid] = {"mode": mode, "producer_id": None}
    save_state()
    registered = register(sid) is not None
    text = "watching %s: new lines arrive in this session as %s messages" % (WATCH_FILE, mode)
    if not registered:
        text += " (producer registration failed; lines arrive as plugin events only)"
    return {
        "output": {"type": "named", "outputs": {"file": WATCH_FILE, "status": text}},
        "display": "watching " + os.path.basename(WATCH_FILE),
    }


def handle(message):
    method = message.get("method")
    mid = message.get("id")
    if method is None:  # an answer to one of our requests
        with state_lock:
            slot = pending.pop(mid, None)
        if slot:
            slot[1] = message
            slot[0].set()
        return
    params = message.get("params") or {}
    if method == "plugin/initialize":
        send({"id": mid, "result": {
            "protocol_version": VERSION,
            "name": NAME,
            "version": "1.0.0",
            "capabilities": {"tools": True, "producer_messaging": True},
            "tools": [{
                "name": "watch",
                "description": "Forward each new line of %s into this session" % (WATCH_FILE or "the watched file"),
                "input_schema": {
                    "type": "object",
                    "properties": {"mode": {"type": "string", "enum": ["queue", "steer"]}},
                    "additionalProperties": False,
                },
            }],
        }})
    elif method == "plugin/recovery/start":
        threading.Thread(target=recover, daemon=True).start()
    elif method == "plugin/ping":
        send({"id": mid, "result": {}})
    elif method == "plugin/tools/call":
        # Answered on a thread: registering waits for the daemon, whose answer this loop must read.
        threading.Thread(target=lambda: send({"id": mid, "result": call_tool(params)}), daemon=True).start()
    elif method == "plugin/shutdown":
        stopping.set()
    elif mid is not None:
        send({"id": mid, "error": {"code": -32601, "message": "Method not found"}})


def main():
    if not WATCH_FILE:
        log("WATCH_FILE is not set")
        return 2
    threading.Thread(target=watch, daemon=True).start()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            handle(json.loads(line))
        except (ValueError, KeyError, TypeError) as error:
            log("bad message:", type(error).__name__)
        if stopping.is_set():
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
