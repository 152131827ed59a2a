// The Vercel AI SDK's UI side (`ai`: DefaultChatTransport, readUIMessageStream and the Chat
// machinery behind useChat) against agentry's POST /v1/ui/chat.
//
// usage: node ui_chat.mjs <server_url> <api_key> <approval_server_url> <plain_server_url>
// The first server has get_weather as a server tool; the second requires approval for
// get_weather and clock; the third has only the calculator and the clock. The recorded demo model answers round 1 with get_weather(Lisbon),
// get_weather(Oslo) and clock, round 2 with calculator("19 - 4"), round 3 with the answer.

import assert from 'node:assert/strict';
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
  readUIMessageStream,
} from 'ai';
import { ANSWER_END, ANSWER_START, USER, WEATHER, log } from './common.mjs';

const [url, key, approvalURL, plainURL] = process.argv.slice(2);
if (!url || !key || !approvalURL || !plainURL) {
  throw new Error('usage: node ui_chat.mjs <server_url> <api_key> <approval_server_url> <plain_server_url>');
}
const api = (base) => `${base.replace(/\/$/, '')}/v1/ui/chat`;
const headers = { authorization: `Bearer ${key}` };

/// The headless chat: AbstractChat with a plain state, as @ai-sdk/react's useChat builds it.
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

/// Waits until `chat` is idle (`ready` or `error`) after automatic sends settle.
async function settled(chat) {
  for (let i = 0; i < 600; i++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    if (chat.status === 'ready' || chat.status === 'error') {
      await new Promise((resolve) => setTimeout(resolve, 50));
      if (chat.status === 'ready' || chat.status === 'error') return;
    }
  }
  throw new Error(`the chat did not settle: ${chat.status}`);
}

const text = (message) =>
  message.parts.filter((part) => part.type === 'text').map((part) => part.text).join('');
const toolParts = (message, name) => message.parts.filter((part) => part.type === `tool-${name}`);

function checkAnswer(message) {
  const answer = text(message);
  assert.ok(answer.includes(ANSWER_START), answer);
  assert.ok(answer.trimEnd().endsWith(ANSWER_END), answer);
  assert.equal(message.metadata.status, 'completed');
  assert.ok(message.metadata.usage.inputTokens > 0, JSON.stringify(message.metadata));
  assert.ok(message.metadata.usage.outputTokens > 0, JSON.stringify(message.metadata));
}

// 1. Server tools, read with DefaultChatTransport + readUIMessageStream.
async function serverTools() {
  const transport = new DefaultChatTransport({ api: api(url), headers });
  const chatId = `ui_server_${Date.now()}`;
  const messages = [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: USER }] }];
  const stream = await transport.sendMessages({
    chatId,
    messages,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
  });
  let last;
  for await (const message of readUIMessageStream({ stream, terminateOnError: true })) {
    last = message;
  }
  assert.equal(last.role, 'assistant');
  checkAnswer(last);
  assert.equal(last.parts.filter((part) => part.type === 'step-start').length, 3);
  const weather = toolParts(last, 'get_weather');
  assert.equal(weather.length, 2);
  for (const part of weather) {
    assert.equal(part.state, 'output-available', JSON.stringify(part));
    assert.equal(part.output.city, part.input.city);
  }
  assert.equal(toolParts(last, 'clock')[0].state, 'output-available');
  const calculator = toolParts(last, 'calculator')[0];
  assert.equal(calculator.state, 'output-available');
  assert.deepEqual(calculator.input, { expression: '19 - 4' });
  assert.equal(last.metadata.sessionId, chatId);
  log('ui: server tools ok');
}

// 2. A client-side tool: onToolCall answers with addToolOutput, and the chat goes on.
async function clientTool() {
  const calls = [];
  const chat = new Chat({
    id: `ui_client_${Date.now()}`,
    transport: new DefaultChatTransport({
      api: api(plainURL),
      headers,
      body: {
        session: {
          model: 'demo',
          tools: ['calculator', 'clock'],
          remote_tools: [
            {
              name: 'get_weather',
              description: 'Current weather for a city.',
              parameters: {
                type: 'object',
                properties: { city: { type: 'string' } },
                required: ['city'],
              },
            },
          ],
        },
      },
    }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    onToolCall: async ({ toolCall }) => {
      if (toolCall.toolName !== 'get_weather') return;
      calls.push(toolCall.input.city);
      chat.addToolOutput({
        tool: 'get_weather',
        toolCallId: toolCall.toolCallId,
        output: WEATHER[toolCall.input.city],
      });
    },
  });
  await chat.sendMessage({ text: USER });
  await settled(chat);
  assert.equal(chat.status, 'ready', String(chat.error));
  assert.deepEqual(calls.sort(), ['Lisbon', 'Oslo']);
  assert.equal(chat.messages.length, 2, JSON.stringify(chat.messages));
  const answer = chat.messages[1];
  checkAnswer(answer);
  for (const part of toolParts(answer, 'get_weather')) {
    assert.equal(part.state, 'output-available');
    assert.deepEqual(part.output, WEATHER[part.input.city]);
  }
  assert.equal(toolParts(answer, 'calculator')[0].state, 'output-available');

  // The server holds the history: a second turn sends the new message and gets round 3
  // (the recording answers any later call with its last round).
  await chat.sendMessage({ text: 'Thanks!' });
  await settled(chat);
  assert.equal(chat.status, 'ready', String(chat.error));
  assert.equal(chat.messages.length, 4);
  assert.ok(text(chat.messages[3]).length > 0);
  log('ui: client-side tool ok');
}

// 3. Approvals: the server's tools wait for a person; the client approves the weather
// calls and denies the clock.
async function approval() {
  const requested = [];
  const chat = new Chat({
    id: `ui_approval_${Date.now()}`,
    transport: new DefaultChatTransport({ api: api(approvalURL), headers }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  await chat.sendMessage({ text: USER });
  await settled(chat);
  assert.equal(chat.status, 'ready', String(chat.error));
  const asked = chat.messages[1];
  assert.equal(asked.metadata.status, 'awaiting_approval');
  for (const part of asked.parts.filter((part) => part.type.startsWith('tool-'))) {
    assert.equal(part.state, 'approval-requested', JSON.stringify(part));
    requested.push(part);
  }
  assert.equal(requested.length, 3);
  for (const part of requested) {
    const approved = part.type !== 'tool-clock';
    await chat.addToolApprovalResponse({
      id: part.approval.id,
      approved,
      reason: approved ? undefined : 'no clocks today',
    });
  }
  await settled(chat);
  assert.equal(chat.status, 'ready', String(chat.error));
  assert.equal(chat.messages.length, 2);
  const answer = chat.messages[1];
  checkAnswer(answer);
  for (const part of toolParts(answer, 'get_weather')) {
    assert.equal(part.state, 'output-available', JSON.stringify(part));
  }
  assert.equal(toolParts(answer, 'clock')[0].state, 'output-denied');
  log('ui: approval ok');
}

// 4. A bad request is an HTTP error the transport reports.
async function refused() {
  const transport = new DefaultChatTransport({ api: api(url), headers });
  await assert.rejects(
    transport.sendMessages({
      chatId: 'bad id',
      messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }],
      trigger: 'submit-message',
    }),
    /must be 1 to 128 characters/,
  );
  log('ui: refusal ok');
}

await serverTools();
await clientTool();
await approval();
await refused();
log('all checks passed');
