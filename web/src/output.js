// A tool call's output: bytes from live notifications (`events.tool_output_*`, base64) and from durable
// `tool_call_progress` events, which overlap. Each stream's bytes are placed by offset, so each byte is shown
// once; a hole (bytes the subscriber missed) is shown as a gap. Decoding is streaming UTF-8 per stream, so a
// character split across two chunks comes out whole.

const STREAMS = ['stdout', 'stderr'];

function touch(entry) {
  entry.version += 1;
}

function appendChunk(entry, stream, text) {
  if (!text) return;
  const last = entry.chunks[entry.chunks.length - 1];
  if (last && last.stream === stream && !last.gap && !last.sealed) last.text += text;
  else entry.chunks.push({ stream, text });
}

export function outputGap(entry, stream, nextOffset, text) {
  flushDecoder(entry, stream);
  entry.chunks.push({ stream, gap: true, text });
  if (nextOffset !== null) entry.received[stream] = Math.max(entry.received[stream], nextOffset);
  touch(entry);
}

function decoder(entry, stream) {
  entry.decoders[stream] ??= new TextDecoder('utf-8', { fatal: false });
  return entry.decoders[stream];
}

function flushDecoder(entry, stream) {
  const pending = entry.decoders[stream];
  if (pending) {
    appendChunk(entry, stream, pending.decode());
    delete entry.decoders[stream];
  }
}

export function flushDecoders(entry) {
  for (const stream of STREAMS) flushDecoder(entry, stream);
}

/**
 * Output bytes at `offset` of a tool call's stream. Live notifications and durable `tool_call_progress` events
 * carry the same bytes, so each byte is shown once; bytes that start past what was received are a gap.
 */
export function toolOutput(state, toolCallId, stream, offset, bytes) {
  const entry = state.byKey.get(`tool-${toolCallId}`);
  if (!entry || !STREAMS.includes(stream)) return false;
  const received = entry.received[stream];
  const end = offset + bytes.length;
  if (end <= received) return false;
  if (offset > received) outputGap(entry, stream, offset, `${offset - received} bytes of ${stream} were missed`);
  const skip = Math.max(0, entry.received[stream] - offset);
  appendChunk(entry, stream, decoder(entry, stream).decode(bytes.subarray(skip), { stream: true }));
  entry.received[stream] = end;
  touch(entry);
  state.version += 1;
  return true;
}

function base64Bytes(data) {
  const binary = atob(data ?? '');
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** An `events.tool_output_*` notification of this session. */
export function applyOutputNotice(state, method, params) {
  if (params.session_id !== state.sessionId) return false;
  switch (method) {
    case 'events.tool_output_snapshot':
      return toolOutput(state, params.tool_call_id, params.stream, params.start_offset, base64Bytes(params.data));
    case 'events.tool_output_delta':
      return toolOutput(state, params.tool_call_id, params.stream, params.byte_offset, base64Bytes(params.data));
    case 'events.tool_output_gap': {
      const entry = state.byKey.get(`tool-${params.tool_call_id}`);
      if (!entry || params.next_offset <= entry.received[params.stream]) return false;
      outputGap(entry, params.stream, params.next_offset, `${params.next_offset - entry.received[params.stream]} bytes of ${params.stream} were missed (the result below has the output)`);
      state.version += 1;
      return true;
    }
    default:
      return false;
  }
}

