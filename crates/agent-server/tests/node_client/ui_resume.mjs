// The Vercel AI SDK's resume-stream (`ai`: Chat.resumeStream(), which useChat({ resume: true })
// calls on mount, and DefaultChatTransport.reconnectToStream) against agentry's
// GET /v1/ui/chat/{id}/stream.
//
// usage: node ui_resume.mjs <server_url> <api_key>
// The server's replayed demo model pauses before each event, so a run lasts a second or two;
// get_weather, clock and calculator run on the server.

import assert from 'node:assert/strict';
import { AbstractChat, DefaultChatTransport, readUIMessageStream } from 'ai';
import { ANSWER_END, ANSWER_START, USER, log } from './common.mjs';

const [url, key] = process.argv.slice(2);
if (!url || !key) {
  throw new Error('usage: node ui_resume.mjs <server_url> <api_key>');
}
const api = `${url.replace(/\/$/, '')}/v1/ui/chat`;
const headers = { authorization: `Bearer ${key}` };

class ChatState {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) {
    this.messages = this.messages.concat(message);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class Chat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new ChatState() });
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (message) =>
  message.parts.filter((part) => part.type === 'text').map((part) => part.text).join('');

function checkAnswer(message) {
  const answer = text(message);
  assert.ok(answer.includes(ANSWER_START), answer);
  assert.ok(answer.trimEnd().endsWith(ANSWER_END), answer);
  assert.equal(message.metadata.status, 'completed');
  assert.equal(message.parts.filter((part) => part.type === 'step-start').length, 3);
}

// 1. A chat that lost its stream (stop() aborts the fetch, as a reload would) resumes it in a
// new Chat of the same id, as useChat({ resume: true }) does on mount.
async function resumeAfterHangUp() {
  const id = `ui_resume_${Date.now()}`;
  const transport = new DefaultChatTransport({ api, headers });
  const first = new Chat({ id, transport });
  const sent = first.sendMessage({ text: USER });
  for (let i = 0; i < 500 && first.messages.length < 2; i++) await sleep(10);
  assert.equal(first.messages.length, 2, 'the run started streaming');
  await first.stop();
  await sent.catch(() => {});
  const partial = first.messages[1];
  assert.ok(!text(partial).includes(ANSWER_END), 'the first chat stopped before the end');

  // The page comes back: the history it had, and the run's stream resumed.
  const second = new Chat({ id, transport: new DefaultChatTransport({ api, headers }) });
  second.state.pushMessage(first.messages[0]);
  await second.resumeStream();
  assert.equal(second.status, 'ready', String(second.error));
  assert.equal(second.messages.length, 2, JSON.stringify(second.messages));
  checkAnswer(second.messages[1]);
  assert.equal(second.messages[1].metadata.sessionId, id);

  // The run is over: nothing to resume, and the chat stays as it is.
  const third = new Chat({ id, transport: new DefaultChatTransport({ api, headers }) });
  await third.resumeStream();
  assert.equal(third.status, 'ready', String(third.error));
  assert.equal(third.messages.length, 0);
  log('ui resume: Chat.resumeStream after a hang-up ok');
}

// 2. The transport's reconnectToStream read with readUIMessageStream, while the first
// request still reads too: both see the same message.
async function reconnectWhileRunning() {
  const id = `ui_reconnect_${Date.now()}`;
  const transport = new DefaultChatTransport({ api, headers });
  const stream = await transport.sendMessages({
    chatId: id,
    messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: USER }] }],
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
  });
  const again = await transport.reconnectToStream({ chatId: id });
  assert.ok(again, 'a running chat has a stream to resume');
  const read = async (s) => {
    let last;
    for await (const message of readUIMessageStream({ stream: s, terminateOnError: true })) {
      last = message;
    }
    return last;
  };
  const [original, resumed] = await Promise.all([read(stream), read(again)]);
  checkAnswer(original);
  checkAnswer(resumed);
  assert.equal(text(resumed), text(original));
  assert.equal(await transport.reconnectToStream({ chatId: id }), null, '204 once the run ended');
  log('ui resume: reconnectToStream while running ok');
}

await resumeAfterHangUp();
await reconnectWhileRunning();
log('all checks passed');
