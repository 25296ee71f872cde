// Drives a running mull-server with the AI SDK's own client pieces: DefaultChatTransport (SSE),
// WebSocketChatTransport (over the `ws` package), readUIMessageStream (the client-side message
// assembly) and lastAssistantMessageIsCompleteWithToolCalls (the auto-send rule for client
// tools). Usage: node client.mjs http://127.0.0.1:PORT
// Prints one line per scenario and exits non-zero on the first failure.

import assert from 'node:assert/strict';
import {
  AbstractChat,
  DefaultChatTransport,
  WebSocketChatTransport,
  readUIMessageStream,
  lastAssistantMessageIsCompleteWithToolCalls,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from 'ai';
import WebSocket from 'ws';

const base = process.argv[2];
if (!base) {
  console.error('usage: node client.mjs http://127.0.0.1:PORT');
  process.exit(2);
}

const SLOW_DELTAS = 60;
const slowText = Array.from({ length: SLOW_DELTAS }, (_, i) => `w${i} `).join('');

const user = (chatId, text) => ({
  id: `u-${chatId}`,
  role: 'user',
  parts: [{ type: 'text', text }],
});

const textOf = (message) =>
  message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');

/** Splits a chunk stream in two: one copy to record raw chunks, one to assemble the message. */
function tee(stream) {
  const chunks = [];
  const recorded = stream.pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        chunks.push(chunk);
        controller.enqueue(chunk);
      },
    }),
  );
  return { chunks, stream: recorded };
}

/** Assembles the assistant message the way useChat does. */
async function assemble(stream, message) {
  let last;
  for await (const m of readUIMessageStream({ stream, message, terminateOnError: true })) {
    last = m;
  }
  return last;
}

/** Reads `n` chunks from a stream, then lets it go. */
async function readSome(stream, n) {
  const reader = stream.getReader();
  const chunks = [];
  while (chunks.length < n) {
    const { value, done } = await reader.read();
    if (done) break;
    chunks.push(value);
  }
  return { chunks, reader };
}

const sse = new DefaultChatTransport({ api: `${base}/api/chat` });

/** The smallest chat state: what useChat keeps in React state, kept in plain fields. */
class PlainState {
  status = 'ready';
  error = undefined;
  messages = [];
  pushMessage = (message) => {
    this.messages = [...this.messages, message];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = this.messages.map((m, i) => (i === index ? message : m));
  };
  snapshot = (thing) => structuredClone(thing);
}

/** The AI SDK's own chat (what useChat wraps), over the SSE transport. */
class PlainChat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new PlainState() });
  }
}

async function send(transport, chatId, messages, abortSignal) {
  return transport.sendMessages({
    chatId,
    messages,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal,
    body: { tenant: 'e2e' },
  });
}

/** Two bookings that need approval: one approved, one denied, with addToolApprovalResponse. */
async function approveAndDeny(transport, chatId) {
  const chat = new PlainChat({
    id: chatId,
    transport,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  await chat.sendMessage({ text: 'book both' });
  assert.equal(chat.status, 'ready', chat.error?.message);
  const asked = chat.messages[1].parts.filter((p) => p.type === 'tool-book');
  assert.deepEqual(
    asked.map((p) => [p.toolCallId, p.state]),
    [
      ['call_ritz', 'approval-requested'],
      ['call_savoy', 'approval-requested'],
    ],
  );
  assert.ok(asked.every((p) => typeof p.approval?.id === 'string'));
  assert.notEqual(asked[0].approval.id, asked[1].approval.id);
  await chat.addToolApprovalResponse({ id: asked[0].approval.id, approved: true });
  // One answer of two: nothing is sent yet.
  assert.equal(chat.messages.length, 2);
  assert.equal(textOf(chat.messages[1]), '');
  await chat.addToolApprovalResponse({
    id: asked[1].approval.id,
    approved: false,
    reason: 'Too pricey.',
  });
  for (let i = 0; i < 200 && chat.status !== 'ready'; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.equal(chat.messages.length, 2, 'the continuation extends the same message');
  const done = chat.messages[1];
  const ritz = done.parts.find((p) => p.toolCallId === 'call_ritz');
  const savoy = done.parts.find((p) => p.toolCallId === 'call_savoy');
  assert.equal(ritz.state, 'output-available');
  assert.deepEqual(ritz.output, { booked: 'Ritz' });
  assert.equal(savoy.state, 'output-denied');
  assert.equal(textOf(done), 'Done.');
  // Answering again is refused: the server holds no such pending request.
  const again = await fetch(`${base}/api/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: chatId, trigger: 'submit-message', messages: chat.messages }),
  });
  assert.equal(again.status, 400);
}

const scenarios = {
  async 'sse: text and reasoning'() {
    const { chunks, stream } = tee(await send(sse, 'text-e2e', [user('text-e2e', 'hi')]));
    const message = await assemble(stream);
    assert.equal(message.role, 'assistant');
    assert.equal(textOf(message), 'Hello, world!');
    assert.ok(message.parts.some((p) => p.type === 'reasoning' && p.text === 'The user greets me.'));
    assert.equal(chunks.at(-1).type, 'finish');
  },

  async 'sse: server tools (plain and streaming)'() {
    const message = await assemble(await send(sse, 'tool-e2e', [user('tool-e2e', 'weather?')]));
    const weather = message.parts.find((p) => p.type === 'tool-weather');
    assert.equal(weather.state, 'output-available');
    assert.deepEqual(weather.input, { city: 'Paris' });
    assert.equal(weather.output.sky, 'sunny');
    const progress = message.parts.find((p) => p.type === 'tool-progress');
    assert.equal(progress.state, 'output-available');
    assert.notEqual(progress.preliminary, true);
    assert.deepEqual(progress.output, { done: 3 });
    assert.equal(textOf(message), 'It is sunny in Paris.');
  },

  async 'sse: client tool round trip with auto-continue'() {
    const chatId = 'client-e2e';
    const first = await assemble(await send(sse, chatId, [user(chatId, 'where am I?')]));
    const call = first.parts.find((p) => p.type === 'tool-get_location');
    assert.equal(call.state, 'input-available');
    let messages = [user(chatId, 'where am I?'), first];
    assert.equal(lastAssistantMessageIsCompleteWithToolCalls({ messages }), false);
    // What Chat.addToolOutput does to the part.
    const answered = {
      ...first,
      parts: first.parts.map((p) =>
        p.toolCallId === call.toolCallId
          ? { ...p, state: 'output-available', output: { city: 'Berlin' } }
          : p,
      ),
    };
    messages = [user(chatId, 'where am I?'), answered];
    assert.equal(lastAssistantMessageIsCompleteWithToolCalls({ messages }), true);
    const second = await assemble(await send(sse, chatId, messages), answered);
    assert.equal(textOf(second), 'You are in Berlin.');
    const tool = second.parts.find((p) => p.type === 'tool-get_location');
    assert.deepEqual(tool.output, { city: 'Berlin' });
  },

  async 'sse: tool approvals answered with addToolApprovalResponse'() {
    await approveAndDeny(sse, 'approve-e2e');
  },

  async 'ws: tool approvals answered with addToolApprovalResponse'() {
    const ws = new WebSocketChatTransport({ url: `${base}/api/chat/ws`, webSocket: WebSocket });
    await approveAndDeny(ws, 'approve-ws-e2e');
    ws.close();
  },

  async 'sse: regenerate() replaces the last answer'() {
    const chat = new PlainChat({ id: 'regen-e2e', transport: sse });
    await chat.sendMessage({ text: 'hi' });
    assert.equal(chat.status, 'ready', chat.error?.message);
    assert.equal(chat.messages.length, 2);
    const first = chat.messages[1];
    assert.equal(textOf(first), 'First answer.');
    await chat.regenerate({ messageId: first.id });
    assert.equal(chat.status, 'ready', chat.error?.message);
    assert.equal(chat.messages.length, 2);
    const second = chat.messages[1];
    assert.equal(textOf(second), 'Second answer.');
    assert.notEqual(second.id, first.id);
    // The regeneration ran to its end on the server: nothing is left to resume.
    const resumed = await sse.reconnectToStream({ chatId: 'regen-e2e' });
    assert.equal(resumed, null, 'nothing left running');
  },

  async 'sse: a dropped stream resumes exactly once'() {
    const chatId = 'slow-e2e';
    const abort = new AbortController();
    const stream = await send(sse, chatId, [user(chatId, 'go')], abort.signal);
    const { chunks } = await readSome(stream, 6);
    assert.equal(chunks[0].type, 'start');
    abort.abort(); // the connection drops mid-turn
    const resumed = await sse.reconnectToStream({ chatId });
    assert.ok(resumed, 'a running turn can be resumed');
    const { chunks: replayed, stream: rest } = tee(resumed);
    const message = await assemble(rest);
    assert.equal(textOf(message), slowText, 'every delta exactly once');
    assert.deepEqual(replayed.slice(0, 6), chunks, 'the replay starts at the turn start');
    assert.equal(await sse.reconnectToStream({ chatId }), null, 'nothing to resume after the end');
  },

  async 'sse: cancel aborts the turn server-side'() {
    const chatId = 'slow-cancel-e2e';
    const stream = await send(sse, chatId, [user(chatId, 'go')]);
    const { chunks, reader } = await readSome(stream, 4);
    const response = await fetch(`${base}/api/chat/${chatId}/cancel`, { method: 'POST' });
    assert.equal(response.status, 200);
    assert.equal((await response.json()).cancelled, true);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      chunks.push(value);
    }
    assert.equal(chunks.at(-1).type, 'abort');
    const deltas = chunks.filter((c) => c.type === 'text-delta').length;
    assert.ok(deltas < SLOW_DELTAS, `${deltas} deltas before the abort`);
  },

  async 'ws: text, then a dropped socket resumed from the log'() {
    const ws = new WebSocketChatTransport({ url: `${base}/api/chat/ws`, webSocket: WebSocket });
    const message = await assemble(await send(ws, 'text-ws-e2e', [user('text-ws-e2e', 'hi')]));
    assert.equal(textOf(message), 'Hello, world!');

    const chatId = 'slow-ws-e2e';
    const stream = await send(ws, chatId, [user(chatId, 'go')]);
    await readSome(stream, 5);
    ws.close(); // the socket drops mid-turn
    const again = new WebSocketChatTransport({ url: `${base}/api/chat/ws`, webSocket: WebSocket });
    const resumed = await again.reconnectToStream({ chatId });
    assert.ok(resumed, 'a running turn can be resumed over WebSocket');
    assert.equal(textOf(await assemble(resumed)), slowText, 'every delta exactly once');
    assert.equal(await again.reconnectToStream({ chatId }), null, 'no-active after the end');
    again.close();
  },

  async 'ws: stop aborts the turn'() {
    const ws = new WebSocketChatTransport({ url: `${base}/api/chat/ws`, webSocket: WebSocket });
    const chatId = 'slow-ws-stop-e2e';
    const abort = new AbortController();
    const stream = await send(ws, chatId, [user(chatId, 'go')], abort.signal);
    await readSome(stream, 3);
    abort.abort(); // what Chat.stop() does
    let active = true;
    for (let i = 0; i < 100 && active; i++) {
      await new Promise((r) => setTimeout(r, 50));
      active = (await fetch(`${base}/api/chat/${chatId}/stream`)).status !== 204;
    }
    assert.equal(active, false, 'the turn ended after the abort frame');
    ws.close();
  },
};

let failed = false;
for (const [name, run] of Object.entries(scenarios)) {
  try {
    await run();
    console.log(`ok   ${name}`);
  } catch (error) {
    failed = true;
    console.log(`FAIL ${name}: ${error?.stack ?? error}`);
    break;
  }
}
process.exit(failed ? 1 : 0);
