// Images and files from the real clients: the AI SDK's Chat (`file` parts: a data URL image
// and an https PDF), @ag-ui/client's HttpAgent (`image` and `document` parts) and the openai
// package's Responses API (`input_image`, `input_file`) against agentry. The model `vision`
// is scripted; the Rust test (tests/it/attachments.rs) checks what reached it.
//
// usage: node attachments.mjs <server_url> <api_key>

import assert from 'node:assert/strict';
import { HttpAgent } from '@ag-ui/client';
import { AbstractChat, DefaultChatTransport } from 'ai';
import OpenAI from 'openai';
import { log } from './common.mjs';

const [url, key] = process.argv.slice(2);
if (!url || !key) throw new Error('usage: node attachments.mjs <server_url> <api_key>');
const base = url.replace(/\/$/, '');
const headers = { authorization: `Bearer ${key}` };
export const PIXEL =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const PDF = 'JVBERi0xLjQK';
const SESSION = { model: 'vision', tools: [] };

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

async function aiSdk() {
  const chat = new Chat({
    id: 'attach_ui',
    transport: new DefaultChatTransport({ api: `${base}/v1/ui/chat`, headers, body: { session: SESSION } }),
  });
  await chat.sendMessage({
    text: 'What is in this image?',
    files: [
      { type: 'file', mediaType: 'image/png', filename: 'pixel.png', url: `data:image/png;base64,${PIXEL}` },
      { type: 'file', mediaType: 'application/pdf', filename: 'report.pdf', url: 'https://example.com/report.pdf' },
    ],
  });
  assert.equal(chat.status, 'ready', String(chat.error));
  const answer = chat.messages[1].parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
  assert.equal(answer, 'A red pixel.');

  // Over the limits: an http URL is a 400 the chat reports.
  const refused = new Chat({
    id: 'attach_ui_refused',
    transport: new DefaultChatTransport({ api: `${base}/v1/ui/chat`, headers, body: { session: SESSION } }),
  });
  await refused.sendMessage({
    text: 'And this?',
    files: [{ type: 'file', mediaType: 'image/png', url: 'http://example.com/a.png' }],
  });
  assert.equal(refused.status, 'error');
  assert.match(String(refused.error), /must be `https:`/);
  log('attachments: ai Chat ok');
}

async function agUi() {
  const agent = new HttpAgent({
    url: `${base}/v1/ag-ui`,
    headers,
    threadId: 'attach_agui',
    initialState: { cart: ['pixel.png'] },
  });
  agent.addMessage({
    id: 'u1',
    role: 'user',
    content: [
      { type: 'text', text: 'What is in this image?' },
      { type: 'image', source: { type: 'data', value: PIXEL, mimeType: 'image/png' } },
      { type: 'document', source: { type: 'url', value: 'https://example.com/report.pdf', mimeType: 'application/pdf' } },
    ],
  });
  await agent.runAgent({ forwardedProps: { session: SESSION } });
  const last = agent.messages[agent.messages.length - 1];
  assert.equal(last.content, 'A red pixel.');
  // STATE_SNAPSHOT: the state the run was given.
  assert.deepEqual(agent.state, { cart: ['pixel.png'] });
  log('attachments: ag-ui HttpAgent ok');
}

async function responses() {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key });
  const response = await client.responses.create({
    model: 'vision',
    input: [
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'What is in this image?' },
          { type: 'input_image', image_url: `data:image/png;base64,${PIXEL}`, detail: 'auto' },
          { type: 'input_file', file_data: `data:application/pdf;base64,${PDF}`, filename: 'report.pdf' },
        ],
      },
    ],
  });
  assert.equal(response.output_text, 'A red pixel.');
  const error = await client.responses
    .create({
      model: 'vision',
      input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:image/svg+xml;base64,PHN2Zz4=', detail: 'auto' }] }],
    })
    .then(() => null, (error) => error);
  assert.ok(error, 'an svg image is refused');
  assert.equal(error.status, 400);
  assert.match(String(error.param), /^input\[0\]/, String(error.param));
  log('attachments: openai responses ok');
}

await aiSdk();
await agUi();
await responses();
log('all checks passed');
