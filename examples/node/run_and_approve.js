// run_and_approve.js: run an agent on a troupe daemon and approve its command from a second connection.
//
// What it does, with the protocol by hand (JSON-RPC 2.0 over a WebSocket, protocol 20, the `ws` package):
//
//  1. opens two connections with the header `Authorization: Bearer <token>` and handshakes on both: the first
//     runs and watches the session, the second plays a second client (another terminal, a phone) that answers
//     the approval;
//  2. writes a `local/scripted` script (a turn that calls the `shell` tool, then a text turn) and connects the
//     `local` provider with it (`provider.connect`), so no model vendor or key is needed;
//  3. creates a session in the current directory (`session.create`) and puts it in `ask` mode
//     (`session.set_permission_mode`), so the command waits for a person;
//  4. subscribes with a cursor (`events.subscribe`); the cursor is the `seq` of the last event printed. When the
//     daemon reports that this client fell behind (an `events.subscription` notification of type `gap`: the
//     subscription has ended) it subscribes again from that cursor, so the reply replays what was missed, and
//     events at or below the cursor are skipped: each event is printed once, in order;
//  5. starts a run on `local/scripted` (`run.start`) and prints its events; at `approval_requested` the second
//     connection lists the pending approvals (`approval.list`) and approves the command once (`approval.respond`);
//  6. stops at the run's terminal event: exit status 0 on `run_completed`, 1 on `run_failed`, `run_cancelled` or
//     `run_interrupted`, 2 when the daemon cannot be reached or refuses a request;
//  7. disconnects the `local` provider again (`provider.disconnect`), since the script it was given is deleted at
//     exit: `local/scripted` goes back to having no script instead of pointing at a file that is gone.
//
// How to run it: see the Node.js section of examples/README.md (the commands there are the ones CI runs).
// Options: `--url URL` (or TROUPE_URL, default ws://127.0.0.1:7419/ws), `--token TOKEN` (or TROUPE_TOKEN). For a
// `wss://` URL whose certificate comes from a private CA, point NODE_EXTRA_CA_CERTS at the CA's certificate.

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import WebSocket from "ws";

const DEFAULT_URL = "ws://127.0.0.1:7419/ws";
const PROTOCOL_VERSION = 20;
const MODEL = "local/scripted";
// What the scripted model answers: first a command (which needs approval in `ask` mode), then, once it has the
// command's result, a sentence. The format is described in docs/protocol.md (`provider.connect`) and README.md.
const SCRIPT = {
  turns: [
    {
      text: "I will run a command.",
      tool_calls: [{ tool: "shell", arguments: { command: "echo hello from an approved command" } }],
    },
    { text: "The command ran and said hello." },
  ],
};
const TERMINAL = new Set(["run_completed", "run_failed", "run_cancelled", "run_interrupted"]);

/** A JSON-RPC error object from the daemon. Branch on `code` and `data.code`, never on the message. */
class RpcError extends Error {
  constructor(method, error) {
    const data = error.data ?? {};
    super(`${method}: ${error.message} (${error.code}): ${data.detail ?? error.message}`);
    this.code = error.code;
    this.data = data;
  }
}

/**
 * JSON-RPC 2.0 over one WebSocket. Replies settle their call's promise; notifications queue up, in order, for
 * `nextNotification`.
 */
class Connection {
  constructor(socket) {
    this.socket = socket;
    this.nextId = 0;
    this.pending = new Map(); // request id -> { resolve, reject, method }
    this.backlog = []; // notifications not yet taken
    this.waiter = null; // the resolver of a `nextNotification` waiting for one
    this.closed = null; // why the connection ended, once it did
    socket.on("message", (data) => this.receive(JSON.parse(data.toString())));
    socket.on("close", (code) => this.fail(new Error(`the connection to the daemon closed (code ${code})`)));
    socket.on("error", (error) => this.fail(error));
  }

  static async open(url, token, name) {
    const socket = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` } });
    await new Promise((resolve, reject) => {
      socket.once("open", resolve);
      socket.once("unexpected-response", (request, response) => {
        request.destroy(); // with this listener, ending the refused request is up to us
        const status = response.statusCode;
        const hint = refusalHint(status);
        reject(new Error(`the daemon refused the connection to ${url}: HTTP ${status}\n  hint: ${hint}`));
      });
      socket.once("error", (error) => reject(unreachable(url, error)));
    });
    const connection = new Connection(socket);
    const hello = await connection.call("handshake", { protocol_version: PROTOCOL_VERSION });
    const version = `${hello.server.name} ${hello.server.version}, protocol ${hello.protocol_version}`;
    console.log(`[${name}] connected to ${url}: ${version}`);
    return connection;
  }

  receive(message) {
    for (const one of Array.isArray(message) ? message : [message]) {
      if ("method" in one) {
        this.backlog.push(one);
        this.wake();
      } else if (this.pending.has(one.id)) {
        const call = this.pending.get(one.id);
        this.pending.delete(one.id);
        if (one.error) call.reject(new RpcError(call.method, one.error));
        else call.resolve(one.result);
      }
    }
  }

  fail(error) {
    this.closed ??= error;
    for (const call of this.pending.values()) call.reject(error);
    this.pending.clear();
    this.wake();
  }

  wake() {
    const waiter = this.waiter;
    this.waiter = null;
    waiter?.();
  }

  call(method, params) {
    if (this.closed) return Promise.reject(this.closed);
    const id = ++this.nextId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    });
  }

  async nextNotification() {
    while (this.backlog.length === 0) {
      if (this.closed) throw this.closed;
      await new Promise((resolve) => (this.waiter = resolve));
    }
    return this.backlog.shift();
  }

  close() {
    this.socket.close();
  }
}

/** What to check when the daemon answers the WebSocket upgrade with an HTTP error. */
function refusalHint(status) {
  if (status === 401) {
    return "the token is missing or wrong: set TROUPE_TOKEN to the daemon's token (`troupe token` prints it)";
  }
  if (status === 403) return "the daemon refused this Origin: add it to allowed_origins in the daemon's config.toml";
  if (status === 404) return "no WebSocket at this path: TROUPE_URL should end in /ws (or the proxy's path to it)";
  return "see the daemon's log (`troupe serve`'s stderr, or journalctl -u troupe)";
}

/** Node's TLS error codes for a certificate it does not trust (as opposed to one for another name). */
const UNTRUSTED_CERTIFICATE = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
]);

/** The error for a daemon that could not be reached (or not trusted), with what to try. */
function unreachable(url, error) {
  if (UNTRUSTED_CERTIFICATE.has(error.code)) {
    return new Error(
      `cannot trust the certificate of ${url}: ${error.message}\n` +
        "  hint: for a private CA or a self-signed certificate, run with NODE_EXTRA_CA_CERTS=<the CA's .pem>",
    );
  }
  if (error.code === "ERR_TLS_CERT_ALTNAME_INVALID") {
    return new Error(
      `the certificate of ${url} is for another name: ${error.message}\n` +
        "  hint: put a name or address the certificate has (its subjectAltName) in TROUPE_URL",
    );
  }
  return new Error(
    `cannot reach ${url}: ${error.message}\n` +
      "  hint: start the daemon with `troupe serve`, or set TROUPE_URL to where it listens",
  );
}

/**
 * Disconnects the `local` provider this program connected, so the daemon is not left with a script path that is
 * deleted at exit. Only while the connection is still this program's (`expected_connection_generation`): one made
 * by someone else meanwhile is theirs to keep.
 */
async function releaseLocalProvider(connection, generation) {
  try {
    await connection.call("provider.disconnect", {
      provider_id: "local",
      expected_runtime_revision: null,
      expected_connection_generation: generation,
      client_request_id: uniqueId("disconnect"),
    });
    console.log("disconnected the local provider: local/scripted has no script again");
  } catch (error) {
    console.error(`left the local provider connected (${error.message})`);
  }
}

/** An idempotency key: the daemon answers a repeated request with the same key the way it answered the first. */
function uniqueId(what) {
  return `node-example-${what}-${process.pid}-${process.hrtime.bigint()}`;
}

function describe(event, how) {
  const { type, ...rest } = event.payload;
  let text = JSON.stringify(rest);
  if (text.length > 160) text = text.slice(0, 157) + "...";
  return `#${String(event.seq).padEnd(3)} [${how}] ${type} ${text}`;
}

/** The run's subscription, its cursor, and what to do at each event. */
class Watcher {
  constructor(watcher, approver, sessionId) {
    this.watcher = watcher; // the first connection: subscribes and runs
    this.approver = approver; // the second connection: answers approvals
    this.sessionId = sessionId;
    this.cursor = 0; // the seq of the last event printed (0: none yet, replay from the first event)
    this.runId = null;
    this.outcome = null; // the terminal event's kind, once seen
  }

  async subscribe(how) {
    const result = await this.watcher.call("events.subscribe", { session_id: this.sessionId, cursor: this.cursor });
    // The reply comes before the subscription's first notification, and notifications continue at last_seq + 1,
    // so handling the reply's events first keeps the order.
    for (const event of result.events) await this.show(event, how);
    return result.last_seq;
  }

  async show(event, how) {
    if (event.seq <= this.cursor) return; // already handled (a replay overlapping what we had)
    this.cursor = event.seq;
    const kind = event.payload.type;
    if (kind !== "text_delta") console.log(describe(event, how)); // the words are repeated in model_turn_committed
    if (this.runId === null || event.run_id !== this.runId) return;
    if (kind === "approval_requested") await this.approve(event.payload.approval);
    else if (TERMINAL.has(kind)) this.outcome = kind;
  }

  /** Answers from the second connection, as another client would: it finds the approval by listing. */
  async approve(requested) {
    const listed = await this.approver.call("approval.list", { root_session_id: this.sessionId, status: "pending" });
    const record = listed.approvals.find((approval) => approval.approval_id === requested.approval_id);
    // The summary holds the model's command: printed quoted, so control characters in it stay inert.
    console.log(`[approver] pending approval ${record.approval_id}: ${JSON.stringify(record.operation.summary)}`);
    const answer = await this.approver.call("approval.respond", {
      session_id: record.session_id,
      approval_id: record.approval_id,
      // The revision and fingerprint name exactly the operation that was shown: a changed operation is refused
      // instead of approved by mistake.
      request_revision: record.revision,
      operation_fingerprint: record.operation_fingerprint,
      client_response_id: uniqueId("answer"),
      decision: "approve_once",
    });
    console.log(`[approver] approved once: the approval is now ${answer.approval.status}`);
  }

  /** Handles notifications until the run's terminal event. */
  async follow() {
    while (this.outcome === null) {
      const notification = await this.watcher.nextNotification();
      const params = notification.params ?? {};
      if (notification.method !== "events.subscription" || params.session_id !== this.sessionId) continue;
      if (params.type === "event") {
        await this.show(params.event, "live");
      } else if (params.type === "gap") {
        console.log(
          `-- gap: the daemon ended this subscription after #${params.last_delivered_seq};` +
            ` subscribing again from #${this.cursor}`,
        );
        const lastSeq = await this.subscribe("catch-up");
        console.log(`-- caught up through #${lastSeq}`);
      }
      // Other types may appear in later builds: skip them.
    }
  }
}

async function run(url, token, scriptPath) {
  const watcher = await Connection.open(url, token, "watcher");
  const approver = await Connection.open(url, token, "approver");
  let generation = null; // the `local` connection this program made, once made
  try {
    const connected = await watcher.call("provider.connect", {
      provider_id: "local",
      expected_catalog_revision: null,
      setup_values: { script: scriptPath },
      auth_method: "none",
      auth_values: {},
      client_connect_id: uniqueId("connect"),
    });
    generation = connected.durable_connection.generation;
    console.log(`connected the local provider with the script ${scriptPath} (it replaces any script it had)`);
    const selection = { agent: "default", model: { model: MODEL, variant: null }, preset: null };
    const created = await watcher.call("session.create", { selection, cwd: process.cwd() });
    const sessionId = created.session.session_id;
    console.log(`created session ${sessionId} in ${process.cwd()}`);
    await watcher.call("session.set_permission_mode", { session_id: sessionId, mode: "ask" });

    const follower = new Watcher(watcher, approver, sessionId);
    const lastSeq = await follower.subscribe("replay");
    console.log(`-- subscribed from cursor 0 (last stored seq ${lastSeq})`);
    const started = await watcher.call("run.start", {
      session_id: sessionId,
      client_run_id: uniqueId("run"),
      selection,
      input: "Say hello with a shell command.",
    });
    follower.runId = started.run_id;
    console.log(`started run ${follower.runId} on ${MODEL}`);
    // Events that arrived while waiting for the reply wait in order in the backlog; `follow` handles them now
    // that the run's id is known.
    await follower.follow();
    console.log(`the run ended: ${follower.outcome}`);
    return follower.outcome === "run_completed" ? 0 : 1;
  } finally {
    if (generation !== null) await releaseLocalProvider(watcher, generation);
    approver.close();
    watcher.close();
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      url: { type: "string", default: process.env.TROUPE_URL ?? DEFAULT_URL },
      token: { type: "string", default: process.env.TROUPE_TOKEN },
    },
  });
  if (!values.token) {
    console.error("no token: set TROUPE_TOKEN (`troupe token` prints it) or pass --token");
    return 2;
  }
  // The daemon reads the script at each model request, so it must outlive the run.
  const scratch = mkdtempSync(join(tmpdir(), "troupe-example-"));
  try {
    const scriptPath = join(scratch, "script.json");
    writeFileSync(scriptPath, JSON.stringify(SCRIPT));
    return await run(values.url, values.token, scriptPath);
  } catch (error) {
    console.error(error.message);
    return 2;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

process.exitCode = await main();
