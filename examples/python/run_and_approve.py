#!/usr/bin/env python3
"""run_and_approve.py: run an agent on a troupe daemon and approve its command from a second connection.

What it does, with the protocol by hand (JSON-RPC 2.0 over a WebSocket, protocol 20):

  1. opens two connections with the header `Authorization: Bearer <token>` and handshakes on both: the first
     runs and watches the session, the second plays a second client (another terminal, a phone) that answers
     the approval;
  2. writes a `local/scripted` script (a turn that calls the `shell` tool, then a text turn) and connects the
     `local` provider with it (`provider.connect`), so no model vendor or key is needed;
  3. creates a session in the current directory (`session.create`) and puts it in `ask` mode
     (`session.set_permission_mode`), so the command waits for a person;
  4. subscribes with a cursor (`events.subscribe`); the cursor is the `seq` of the last event printed. When the
     daemon reports that this client fell behind (an `events.subscription` notification of type `gap`: the
     subscription has ended) it subscribes again from that cursor, so the reply replays what was missed, and
     events at or below the cursor are skipped: each event is printed once, in order;
  5. starts a run on `local/scripted` (`run.start`) and prints its events; at `approval_requested` the second
     connection lists the pending approvals (`approval.list`) and approves the command once (`approval.respond`);
  6. stops at the run's terminal event: exit status 0 on `run_completed`, 1 on `run_failed`, `run_cancelled` or
     `run_interrupted`, 2 when the daemon cannot be reached or refuses a request;
  7. disconnects the `local` provider again (`provider.disconnect`), since the script it was given is deleted at
     exit: `local/scripted` goes back to having no script instead of pointing at a file that is gone.

How to run it: see the Python section of examples/README.md (the commands there are the ones CI runs).
Options: `--url` (or `TROUPE_URL`, default ws://127.0.0.1:7419/ws), `--token` (or `TROUPE_TOKEN`), `--delay
SECONDS` (pause after each event: a slow consumer; with a small `outbound_queue` under `[limits]` in the daemon's
config.toml the daemon sends a gap and you see the recovery). For a `wss://` URL whose certificate comes from a
private CA, point `SSL_CERT_FILE` at the CA's certificate (Python's ssl module reads it).
"""

import argparse
import asyncio
import collections
import json
import os
import ssl
import sys
import tempfile
import time

try:
    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
except ImportError:
    sys.exit("run_and_approve.py needs the `websockets` package (13 or newer): pip install -r requirements.txt")

DEFAULT_URL = "ws://127.0.0.1:7419/ws"
PROTOCOL_VERSION = 20
MODEL = "local/scripted"
# What the scripted model answers: first a command (which needs approval in `ask` mode), then, once it has the
# command's result, a sentence. The format is described in docs/protocol.md (`provider.connect`) and README.md.
SCRIPT = {
    "turns": [
        {
            "text": "I will run a command.",
            "tool_calls": [{"tool": "shell", "arguments": {"command": "echo hello from an approved command"}}],
        },
        {"text": "The command ran and said hello."},
    ]
}
TERMINAL = {"run_completed", "run_failed", "run_cancelled", "run_interrupted"}
# OpenSSL's verify codes for a trusted certificate issued for another name (X509_V_ERR_HOSTNAME_MISMATCH) or
# address (X509_V_ERR_IP_ADDRESS_MISMATCH): a CA file would not help.
NAME_MISMATCH = {62, 64}


class RpcError(Exception):
    """A JSON-RPC error object from the daemon. Branch on `code` and `data["code"]`, never on the message."""

    def __init__(self, method, error):
        self.code = error.get("code")
        self.data = error.get("data") or {}
        detail = self.data.get("detail") or error.get("message")
        super().__init__(f"{method}: {error.get('message')} ({self.code}): {detail}")


class Connection:
    """JSON-RPC 2.0 over one WebSocket, read by one coroutine.

    `call` sends a request and reads frames until its reply arrives; notifications read meanwhile are kept, in
    order, for `next_notification`. Nothing reads the socket while the program is busy elsewhere, so a slow
    consumer really is slow from the daemon's point of view (which is what produces a gap).
    """

    def __init__(self, websocket):
        self.websocket = websocket
        self.next_id = 0
        self.backlog = collections.deque()

    @classmethod
    async def open(cls, url, token, name):
        # max_size=None: a subscribe reply carrying a long session's history can exceed websockets' 1 MiB default.
        websocket = await ws_connect(url, additional_headers={"Authorization": f"Bearer {token}"}, max_size=None)
        connection = cls(websocket)
        hello = await connection.call("handshake", {"protocol_version": PROTOCOL_VERSION})
        server = hello["server"]
        version = f"{server['name']} {server['version']}, protocol {hello['protocol_version']}"
        print(f"[{name}] connected to {url}: {version}")
        return connection

    async def _read(self):
        """The messages of the next frame (a batch reply is a JSON array)."""
        message = json.loads(await self.websocket.recv())
        return message if isinstance(message, list) else [message]

    async def call(self, method, params):
        self.next_id += 1
        request_id = self.next_id
        await self.websocket.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
        while True:
            for message in await self._read():
                if "method" in message:
                    self.backlog.append(message)
                elif message.get("id") == request_id:
                    if "error" in message:
                        raise RpcError(method, message["error"])
                    return message["result"]
                # Any other reply belongs to a request this program no longer waits for.

    async def next_notification(self):
        while not self.backlog:
            for message in await self._read():
                if "method" in message:
                    self.backlog.append(message)
        return self.backlog.popleft()

    async def close(self):
        await self.websocket.close()


def unique_id(what):
    """An idempotency key: the daemon answers a repeated request with the same key the way it answered the first."""
    return f"python-example-{what}-{os.getpid()}-{time.time_ns()}"


def describe(event, how):
    payload = dict(event["payload"])
    kind = payload.pop("type", "?")
    text = json.dumps(payload)
    if len(text) > 160:
        text = text[:157] + "..."
    return f"#{event['seq']:<3} [{how}] {kind} {text}"


class Watcher:
    """The run's subscription, its cursor, and what to do at each event."""

    def __init__(self, watcher, approver, session_id, delay):
        self.watcher = watcher  # the first connection: subscribes and runs
        self.approver = approver  # the second connection: answers approvals
        self.session_id = session_id
        self.cursor = 0  # the seq of the last event printed (0: none yet, replay from the first event)
        self.delay = delay
        self.run_id = None
        self.outcome = None  # the terminal event's kind, once seen

    async def subscribe(self, how):
        result = await self.watcher.call("events.subscribe", {"session_id": self.session_id, "cursor": self.cursor})
        # The reply comes before the subscription's first notification, and notifications continue at
        # last_seq + 1, so handling the reply's events first keeps the order.
        for event in result["events"]:
            await self.show(event, how)
        return result["last_seq"]

    async def show(self, event, how):
        if event["seq"] <= self.cursor:
            return  # already handled (a replay overlapping what we had)
        self.cursor = event["seq"]
        kind = event["payload"].get("type")
        if kind != "text_delta":  # the streamed words are repeated in model_turn_committed
            print(describe(event, how))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.run_id is None or event.get("run_id") != self.run_id:
            return
        if kind == "approval_requested":
            await self.approve(event["payload"]["approval"])
        elif kind in TERMINAL:
            self.outcome = kind

    async def approve(self, requested):
        """Answers from the second connection, as another client would: it finds the approval by listing."""
        listed = await self.approver.call("approval.list", {"root_session_id": self.session_id, "status": "pending"})
        record = next(a for a in listed["approvals"] if a["approval_id"] == requested["approval_id"])
        operation = record["operation"]
        # The summary holds the model's command: printed quoted, so control characters in it stay inert.
        print(f"[approver] pending approval {record['approval_id']}: {json.dumps(operation['summary'])}")
        answer = await self.approver.call(
            "approval.respond",
            {
                "session_id": record["session_id"],
                "approval_id": record["approval_id"],
                # The revision and fingerprint name exactly the operation that was shown: a changed operation is
                # refused instead of approved by mistake.
                "request_revision": record["revision"],
                "operation_fingerprint": record["operation_fingerprint"],
                "client_response_id": unique_id("answer"),
                "decision": "approve_once",
            },
        )
        print(f"[approver] approved once: the approval is now {answer['approval']['status']}")

    async def follow(self):
        """Handles notifications until the run's terminal event."""
        while self.outcome is None:
            notification = await self.watcher.next_notification()
            params = notification.get("params") or {}
            if notification["method"] != "events.subscription" or params.get("session_id") != self.session_id:
                continue  # runtime.changed, tool output streams: not needed here
            if params.get("type") == "event":
                await self.show(params["event"], "live")
            elif params.get("type") == "gap":
                print(
                    f"-- gap: the daemon ended this subscription after #{params.get('last_delivered_seq')};"
                    f" subscribing again from #{self.cursor}"
                )
                last_seq = await self.subscribe("catch-up")
                print(f"-- caught up through #{last_seq}")
            # Other types may appear in later builds: skip them.


async def release_local_provider(connection, generation):
    """Disconnects the `local` provider this program connected, so the daemon is not left with a script path that
    is deleted at exit. Only while the connection is still this program's (`expected_connection_generation`):
    one made by someone else meanwhile is theirs to keep."""
    try:
        await connection.call(
            "provider.disconnect",
            {
                "provider_id": "local",
                "expected_runtime_revision": None,
                "expected_connection_generation": generation,
                "client_request_id": unique_id("disconnect"),
            },
        )
        print("disconnected the local provider: local/scripted has no script again")
    except (RpcError, ConnectionClosed, OSError) as error:
        print(f"left the local provider connected ({error})", file=sys.stderr)


async def run(args, script_path):
    watcher = await Connection.open(args.url, args.token, "watcher")
    approver = await Connection.open(args.url, args.token, "approver")
    generation = None  # the `local` connection this program made, once made
    try:
        connected = await watcher.call(
            "provider.connect",
            {
                "provider_id": "local",
                "expected_catalog_revision": None,
                "setup_values": {"script": script_path},
                "auth_method": "none",
                "auth_values": {},
                "client_connect_id": unique_id("connect"),
            },
        )
        generation = connected["durable_connection"]["generation"]
        print(f"connected the local provider with the script {script_path} (it replaces any script it had)")
        selection = {"agent": "default", "model": {"model": MODEL, "variant": None}, "preset": None}
        created = await watcher.call("session.create", {"selection": selection, "cwd": os.getcwd()})
        session_id = created["session"]["session_id"]
        print(f"created session {session_id} in {os.getcwd()}")
        await watcher.call("session.set_permission_mode", {"session_id": session_id, "mode": "ask"})

        follower = Watcher(watcher, approver, session_id, args.delay)
        last_seq = await follower.subscribe("replay")
        print(f"-- subscribed from cursor 0 (last stored seq {last_seq})")
        started = await watcher.call(
            "run.start",
            {
                "session_id": session_id,
                "client_run_id": unique_id("run"),
                "selection": selection,
                "input": "Say hello with a shell command.",
            },
        )
        follower.run_id = started["run_id"]
        print(f"started run {follower.run_id} on {MODEL}")
        # Events that arrived while waiting for the reply are kept in order in the backlog, and `follow` handles
        # them now that the run's id is known.
        await follower.follow()
        print(f"the run ended: {follower.outcome}")
        return 0 if follower.outcome == "run_completed" else 1
    finally:
        if generation is not None:
            await release_local_provider(watcher, generation)
        await approver.close()
        await watcher.close()


def refusal_hint(status):
    """What to check when the daemon answers the WebSocket upgrade with an HTTP error."""
    if status == 401:
        return "the token is missing or wrong: set TROUPE_TOKEN to the daemon's token (`troupe token` prints it)"
    if status == 403:
        return "the daemon refused this Origin: add it to allowed_origins in the daemon's config.toml"
    if status == 404:
        return "no WebSocket at this path: TROUPE_URL should end in /ws (or the proxy's path to it)"
    return "see the daemon's log (`troupe serve`'s stderr, or journalctl -u troupe)"


def main():
    parser = argparse.ArgumentParser(description="Run an agent and approve its command from a second connection.")
    parser.add_argument(
        "--url", default=os.environ.get("TROUPE_URL", DEFAULT_URL), help="default: $TROUPE_URL or %(default)s"
    )
    parser.add_argument("--token", default=os.environ.get("TROUPE_TOKEN"), help="default: $TROUPE_TOKEN")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to pause after each event (a slow consumer)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # each line at once, also into a pipe
    if not args.token:
        parser.error("no token: set TROUPE_TOKEN (`troupe token` prints it) or pass --token")
    with tempfile.TemporaryDirectory(prefix="troupe-example-") as scratch:
        # The daemon reads the script at each model request, so it must outlive the run.
        script_path = os.path.join(scratch, "script.json")
        with open(script_path, "w", encoding="utf-8") as script:
            json.dump(SCRIPT, script)
        try:
            status = asyncio.run(run(args, script_path))
        except InvalidStatus as error:
            print(f"the daemon refused the connection to {args.url}: {error}", file=sys.stderr)
            print(f"  hint: {refusal_hint(error.response.status_code)}", file=sys.stderr)
            status = 2
        except InvalidHandshake as error:
            print(f"the WebSocket handshake with {args.url} failed: {error}", file=sys.stderr)
            print("  hint: check that TROUPE_URL names the daemon's /ws path", file=sys.stderr)
            status = 2
        except ssl.SSLCertVerificationError as error:
            print(f"cannot trust the certificate of {args.url}: {error.verify_message}", file=sys.stderr)
            if error.verify_code in NAME_MISMATCH:
                hint = "put a name or address the certificate has (its subjectAltName) in TROUPE_URL"
            else:
                hint = "for a private CA or a self-signed certificate, run with SSL_CERT_FILE=<the CA's .pem>"
            print(f"  hint: {hint}", file=sys.stderr)
            status = 2
        except OSError as error:
            print(f"cannot reach {args.url}: {error}", file=sys.stderr)
            print(
                "  hint: start the daemon with `troupe serve`, or set TROUPE_URL to where it listens", file=sys.stderr
            )
            status = 2
        except RpcError as error:
            print(str(error), file=sys.stderr)
            status = 2
        except ConnectionClosed as closed:
            print(f"the connection to the daemon closed: {closed}", file=sys.stderr)
            status = 2
    sys.exit(status)


if __name__ == "__main__":
    main()
