// The official AG-UI client (`@ag-ui/client`'s HttpAgent, which verifies every event's
// order and shape) against agentry's POST /v1/ag-ui.
//
// usage: node ag_ui.mjs <server_url> <api_key> <plain_server_url> <approval_server_url>
// The first server has get_weather as a server tool; the second only the calculator and the
// clock, so get_weather is the frontend's; the third is the first with the clock needing
// approval. The recorded demo model answers round 1 with
// get_weather(Lisbon), get_weather(Oslo) and clock, round 2 with calculator("19 - 4"),
// round 3 with the answer.

import assert from 'node:assert/strict';
import { HttpAgent } from '@ag-ui/client';
import { ANSWER_END, ANSWER_START, USER, WEATHER, log } from './common.mjs';

const [url, key, plainURL, approvalURL] = process.argv.slice(2);
if (!url || !key || !plainURL || !approvalURL) {
  throw new Error(
    'usage: node ag_ui.mjs <server_url> <api_key> <plain_server_url> <approval_server_url>',
  );
}
const endpoint = (base) => `${base.replace(/\/$/, '')}/v1/ag-ui`;
const headers = { authorization: `Bearer ${key}` };

const WEATHER_TOOL = {
  name: 'get_weather',
  description: 'Current weather for a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

function answerOf(messages) {
  const last = messages[messages.length - 1];
  assert.equal(last.role, 'assistant', JSON.stringify(messages, null, 1));
  assert.ok(last.content.includes(ANSWER_START), last.content);
  assert.ok(last.content.trimEnd().endsWith(ANSWER_END), last.content);
}

/// Runs the agent, collecting the event types a subscriber sees.
async function run(agent, parameters) {
  const types = [];
  const outcome = await agent.runAgent(parameters, {
    onEvent: ({ event }) => {
      types.push(event.type);
    },
  });
  return { ...outcome, types };
}

// 1. Server tools only.
async function serverTools() {
  const agent = new HttpAgent({ url: endpoint(url), headers, threadId: `agui_server_${Date.now()}` });
  agent.addMessage({ id: 'u1', role: 'user', content: USER });
  const { result, types } = await run(agent, {});
  assert.equal(types[0], 'RUN_STARTED');
  assert.equal(types[types.length - 1], 'RUN_FINISHED');
  assert.equal(types.filter((type) => type === 'STEP_STARTED').length, 3);
  assert.equal(types.filter((type) => type === 'TOOL_CALL_RESULT').length, 4);
  assert.equal(result.status, 'completed');
  assert.ok(result.usage.input_tokens > 0);
  answerOf(agent.messages);
  const results = agent.messages.filter((message) => message.role === 'tool');
  assert.equal(results.length, 4);
  const weather = results.map((message) => JSON.parse(message.content)).filter((r) => r.city);
  assert.deepEqual(weather.map((r) => r.city).sort(), ['Lisbon', 'Oslo']);
  log('ag-ui: server tools ok');
}

// 2. A frontend tool: the run ends with the calls pending, the tool messages resume it.
async function frontendTool() {
  const agent = new HttpAgent({
    url: endpoint(plainURL),
    headers,
    threadId: `agui_frontend_${Date.now()}`,
  });
  agent.addMessage({ id: 'u1', role: 'user', content: USER });
  let finished;
  const first = await agent.runAgent(
    { tools: [WEATHER_TOOL] },
    {
      onRunFinishedEvent: (params) => {
        finished = params;
      },
    },
  );
  assert.equal(first.result.status, 'awaiting_tool_execution');
  assert.equal(finished.outcome, 'success');
  assert.equal(finished.pendingToolCallIds.length, 2, JSON.stringify(finished.pendingToolCallIds));
  const calls = agent.messages
    .filter((message) => message.role === 'assistant')
    .flatMap((message) => message.toolCalls ?? [])
    .filter((call) => call.function.name === 'get_weather');
  assert.equal(calls.length, 2);
  assert.deepEqual(
    calls.map((call) => call.id).sort(),
    [...finished.pendingToolCallIds].sort(),
  );
  for (const call of calls) {
    const { city } = JSON.parse(call.function.arguments);
    agent.addMessage({
      id: `result_${call.id}`,
      role: 'tool',
      toolCallId: call.id,
      content: JSON.stringify(WEATHER[city]),
    });
  }
  const second = await agent.runAgent({ tools: [WEATHER_TOOL] });
  assert.equal(second.result.status, 'completed');
  answerOf(agent.messages);
  log('ag-ui: frontend tool ok');
}

// 3. Approval as an AG-UI interrupt: the run finishes interrupted, the client's `resume`
// denies the clock, and the next run answers.
async function approval() {
  const agent = new HttpAgent({
    url: endpoint(approvalURL),
    headers,
    threadId: `agui_approval_${Date.now()}`,
  });
  agent.addMessage({ id: 'u1', role: 'user', content: USER });
  let finished;
  await agent.runAgent({}, { onRunFinishedEvent: (params) => { finished = params; } });
  assert.equal(finished.outcome, 'interrupt');
  assert.equal(finished.interrupts.length, 1);
  const [interrupt] = finished.interrupts;
  assert.equal(interrupt.reason, 'tool_approval');
  // The client itself refuses to go on without answering the interrupt.
  await assert.rejects(agent.runAgent({}), /pending interrupt/);
  const { result } = await agent.runAgent({
    resume: [{ interruptId: interrupt.id, status: 'cancelled', payload: { reason: 'no clocks' } }],
  });
  assert.equal(result.status, 'completed');
  answerOf(agent.messages);
  const denied = agent.messages.find(
    (message) => message.role === 'tool' && message.toolCallId === interrupt.toolCallId,
  );
  assert.ok(denied.content.includes('no clocks'), denied.content);
  log('ag-ui: approval interrupt ok');
}

// 4. A refused request comes back as the HTTP error.
async function refused() {
  const agent = new HttpAgent({ url: endpoint(url), headers, threadId: 'a b' });
  agent.addMessage({ id: 'u1', role: 'user', content: 'hi' });
  await assert.rejects(agent.runAgent({}), /threadId/);
  log('ag-ui: refusal ok');
}

await serverTools();
await frontendTool();
await approval();
await refused();
log('all checks passed');
