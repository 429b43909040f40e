#!/usr/bin/env python3
"""watch.py: follow a troupe session's events from Python, with gap recovery.

What it does:

  1. connects to the daemon's WebSocket with the header `Authorization: Bearer <token>`;
  2. handshakes (protocol 20) and lists the root sessions (`session.list`);
  3. subscribes (`events.subscribe`) to the session given on the command line, or creates one (agent `default`,
     model `local/echo`, in the current directory) when none is given;
  4. prints the stored events, then every new event as it arrives, until Ctrl-C.

It keeps a cursor: the `seq` of the last event it printed. When the daemon reports that this client fell behind
(an `events.subscription` notification of type `gap`; the subscription has ended), it subscribes again from that
cursor, so the reply replays what was missed. Events at or below the cursor are duplicates and are skipped, so
every event is printed exactly once, in order.

How to run it, against a daemon started from the repository root with `cargo run --release -- serve`:

    pip install websockets                     # any version; 14 or newer recommended
    export TROUPE_TOKEN=$(cargo run --release --quiet -- token)
    python3 examples/python/watch.py                 # creates a session and follows it
    python3 examples/python/watch.py <session-id>    # follows an existing session
    cargo run --release -- rename <session-id> "A new title"   # in another terminal: one more event

Options: `--url` (or `TROUPE_URL`, default ws://127.0.0.1:7419/ws), `--token` (or `TROUPE_TOKEN`), `--cursor N`
(start after event N instead of replaying everything) and `--delay SECONDS` (pause after each event, to play a slow
consumer: with a small `outbound_queue` under `[limits]` in the daemon's config.toml and a burst of events, the
daemon sends a gap and you can watch the recovery).
"""

import argparse
import asyncio
import collections
import json
import os
import sys

try:
    import websockets
except ImportError:
    sys.exit("watch.py needs the `websockets` package: pip install websockets")

try:
    # websockets >= 13 has the new asyncio implementation, which takes `additional_headers` (and is the
    # default `websockets.connect` from 14 on).
    from websockets.asyncio.client import connect as ws_connect

    HEADERS_KEYWORD = "additional_headers"
except ImportError:
    # Older releases: the legacy implementation, which takes `extra_headers`.
    from websockets import connect as ws_connect

    HEADERS_KEYWORD = "extra_headers"

DEFAULT_URL = "ws://127.0.0.1:7419/ws"
PROTOCOL_VERSION = 20


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

    async def _read(self):
        """The messages of the next frame (a batch reply is a JSON array)."""
        message = json.loads(await self.websocket.recv())
        return message if isinstance(message, list) else [message]

    async def call(self, method, params):
        self.next_id += 1
        request_id = self.next_id
        await self.websocket.send(
            json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        )
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


def describe(event, how):
    payload = dict(event["payload"])
    kind = payload.pop("type", "?")
    return f"#{event['seq']:<4} {event['timestamp']}  [{how}]  {kind}  {json.dumps(payload)}"


def describe_session(session):
    title = session.get("title") or "(untitled)"
    return f"{session['session_id']}  {session['status']:<11}  {title}  {session['cwd']}"


class Follower:
    """One session's subscription and its cursor."""

    def __init__(self, connection, session_id, cursor, delay):
        self.connection = connection
        self.session_id = session_id
        self.cursor = cursor  # the seq of the last event printed; None before the first
        self.delay = delay

    async def show(self, event, how):
        if self.cursor is not None and event["seq"] <= self.cursor:
            return  # already printed (a replay overlapping what we had)
        print(describe(event, how))
        self.cursor = event["seq"]
        if self.delay:
            await asyncio.sleep(self.delay)

    async def subscribe(self, how):
        params = {"session_id": self.session_id}
        if self.cursor is not None:
            params["cursor"] = self.cursor
        result = await self.connection.call("events.subscribe", params)
        # The reply always comes before the subscription's first live event, and live events continue at
        # last_seq + 1, so printing the reply's events first keeps the order.
        for event in result["events"]:
            await self.show(event, how)
        return result["last_seq"]

    async def handle(self, notification):
        method, params = notification["method"], notification.get("params") or {}
        if method == "events.subscription" and params.get("session_id") == self.session_id:
            if params.get("type") == "event":
                await self.show(params["event"], "live")
            elif params.get("type") == "gap":
                print(
                    f"-- gap: the daemon dropped this subscription after #{params.get('last_delivered_seq')};"
                    f" re-subscribing from #{self.cursor}",
                )
                last_seq = await self.subscribe("catch-up")
                print(f"-- caught up through #{last_seq}")
            # Other types may appear in later builds: skip them.
        elif method == "runtime.changed":
            snapshot = params.get("snapshot", {})
            print(
                f"-- runtime revision {snapshot.get('revision')}: {len(snapshot.get('models', []))} models,"
                f" reasons {params.get('reasons')}",
            )
        # Other notifications (tool output, plugin events) are not needed here.


async def run(args):
    headers = {"Authorization": f"Bearer {args.token}"}
    # max_size=None: a subscribe reply carrying a long session's history can be larger than websockets' 1 MiB
    # default.
    connect_kwargs = {HEADERS_KEYWORD: headers, "max_size": None}
    try:
        websocket = await ws_connect(args.url, **connect_kwargs)
    except websockets.exceptions.InvalidHandshake as error:
        # 401: missing or wrong token. 403: an Origin the daemon does not allow.
        sys.exit(f"the daemon refused the connection to {args.url}: {error}")
    except OSError as error:
        sys.exit(f"cannot reach {args.url}: {error} (is `troupe serve` running?)")

    # try/finally rather than `async with websocket`: the connection objects of older websockets releases are
    # not async context managers.
    try:
        connection = Connection(websocket)
        hello = await connection.call("handshake", {"protocol_version": PROTOCOL_VERSION})
        server = hello["server"]
        print(f"connected to {args.url}: {server['name']} {server['version']}, protocol {hello['protocol_version']}")

        sessions = (await connection.call("session.list", {}))["sessions"]
        print(f"{len(sessions)} root session(s), most recent first:")
        for session in sessions:
            print("  " + describe_session(session))

        session_id = args.session_id
        if session_id is None:
            created = await connection.call(
                "session.create",
                {
                    "selection": {
                        "agent": "default",
                        "model": {"model": "local/echo", "variant": None},
                        "preset": None,
                    },
                    "cwd": os.getcwd(),
                },
            )
            session_id = created["session"]["session_id"]
            print(f"created session {session_id}")

        follower = Follower(connection, session_id, args.cursor, args.delay)
        last_seq = await follower.subscribe("replay")
        print(f"-- subscribed to {session_id} (last stored seq {last_seq}); live events follow, Ctrl-C stops")
        while True:
            await follower.handle(await connection.next_notification())
    finally:
        await websocket.close()


def main():
    parser = argparse.ArgumentParser(description="Follow a troupe session's events.")
    parser.add_argument("session_id", nargs="?", help="the session to follow (default: create one)")
    parser.add_argument(
        "--url", default=os.environ.get("TROUPE_URL", DEFAULT_URL), help="default: $TROUPE_URL or %(default)s"
    )
    parser.add_argument("--token", default=os.environ.get("TROUPE_TOKEN"), help="default: $TROUPE_TOKEN")
    parser.add_argument("--cursor", type=int, default=None, help="start after this seq instead of replaying everything")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to pause after each event (a slow consumer)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # print each line at once, also into a pipe
    if not args.token:
        parser.error("no token: set TROUPE_TOKEN (`cargo run --release -- token` prints it) or pass --token")
    try:
        asyncio.run(run(args))
    except KeyboardInterrupt:
        pass
    except RpcError as error:
        sys.exit(str(error))
    except websockets.exceptions.ConnectionClosed as closed:
        sys.exit(f"the connection to the daemon closed: {closed}")


if __name__ == "__main__":
    main()
