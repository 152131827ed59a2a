// The AI SDK's default OpenAI provider (`@ai-sdk/openai`'s `openai(model)`, which speaks the
// Responses API) against agentry's /v1/responses: plain (the server runs its tools), streaming,
// a client tool executed by the SDK over two steps (plain and streaming), an unknown model, and
// a budget trip that the SDK must not retry (the Rust side counts the requests: one).
//
//   node ai_sdk_responses.mjs <base_url> <api_key> <budget_capped_base_url>

import assert from 'node:assert/strict';

import { createOpenAI } from '@ai-sdk/openai';
import { APICallError, generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

import { ANSWER_END, ANSWER_START, SYSTEM, USER, WEATHER, args, log, rejects } from './common.mjs';

const { baseURL, key, cappedURL } = args();
const provider = (apiKey, url = baseURL) => createOpenAI({ baseURL: url, apiKey });
const demo = provider(key)('demo');

const weatherTool = (asked) =>
  tool({
    description: 'Current weather for a city.',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      asked.push(city);
      return WEATHER[city];
    },
  });

// Plain: no client tools; the server runs its own (clock, calculator) and answers.
{
  const result = await generateText({ model: demo, system: SYSTEM, prompt: USER });
  assert.ok(result.text.includes(ANSWER_START), result.text);
  assert.ok(result.text.endsWith(ANSWER_END), result.text);
  assert.equal(result.finishReason, 'stop');
  assert.ok(result.usage.inputTokens > 0 && result.usage.outputTokens > 0, JSON.stringify(result.usage));
  assert.match(result.response.id, /^resp_[0-9a-f]{32}$/);
  log('plain:', JSON.stringify(result.text.slice(-40)));
}

// Streaming.
{
  const result = streamText({ model: demo, system: SYSTEM, prompt: USER });
  let text = '';
  for await (const delta of result.textStream) text += delta;
  assert.ok(text.includes(ANSWER_START), text);
  assert.ok(text.endsWith(ANSWER_END), text);
  assert.equal(await result.finishReason, 'stop');
  const usage = await result.usage;
  assert.ok(usage.inputTokens > 0, JSON.stringify(usage));
  log('streaming:', JSON.stringify(text.slice(-40)));
}

// A client tool: the SDK runs get_weather and sends the history back (the assistant text by
// item_reference, as it does by default), multi-step.
{
  const asked = [];
  const result = await generateText({
    model: demo,
    system: SYSTEM,
    prompt: USER,
    tools: { get_weather: weatherTool(asked) },
    stopWhen: stepCountIs(3),
  });
  assert.deepEqual(asked.sort(), ['Lisbon', 'Oslo']);
  assert.equal(result.steps.length, 2);
  assert.equal(result.steps[0].finishReason, 'tool-calls');
  assert.ok(result.text.includes(ANSWER_START), result.text);
  assert.ok(result.text.endsWith(ANSWER_END), result.text);
  log('tools: asked for', asked.join(', '), 'then', JSON.stringify(result.text.slice(0, 40)));
}

// Streaming with the client tool.
{
  const asked = [];
  const result = streamText({
    model: demo,
    system: SYSTEM,
    prompt: USER,
    tools: { get_weather: weatherTool(asked) },
    stopWhen: stepCountIs(3),
  });
  let text = '';
  for await (const delta of result.textStream) text += delta;
  assert.equal((await result.steps).length, 2);
  assert.deepEqual(asked.sort(), ['Lisbon', 'Oslo']);
  assert.ok(text.endsWith(ANSWER_END), text);
  log('streaming tools: two steps');
}

// Continuing a stored response by id (the provider option `previousResponseId`).
{
  const asked = [];
  const first = await generateText({
    model: demo,
    system: SYSTEM,
    prompt: USER,
    tools: { get_weather: weatherTool(asked) },
  });
  assert.equal(first.finishReason, 'tool-calls');
  const results = first.toolResults.map((result) => ({
    type: 'tool-result',
    toolCallId: result.toolCallId,
    toolName: result.toolName,
    output: { type: 'json', value: result.output },
  }));
  const second = await generateText({
    model: demo,
    messages: [{ role: 'tool', content: results }],
    providerOptions: { openai: { previousResponseId: first.response.id } },
  });
  assert.ok(second.text.endsWith(ANSWER_END), second.text);
  log('previousResponseId: continued', first.response.id);
}

// An unknown model.
{
  const error = await rejects(
    () => generateText({ model: provider(key)('gpt-9'), prompt: USER }),
    'an unknown model',
  );
  assert.ok(APICallError.isInstance(error), String(error));
  assert.equal(error.statusCode, 404);
  assert.equal(JSON.parse(error.responseBody).error.code, 'model_not_found');
  log('unknown model:', error.statusCode);
}

// A budget trip, with the SDK's default retries (2): one request, a 402 surfaced as is.
{
  const error = await rejects(
    () => generateText({ model: provider(key, cappedURL)('demo'), system: SYSTEM, prompt: USER }),
    'a budget trip',
  );
  assert.ok(APICallError.isInstance(error), `not retried, so not a RetryError: ${error}`);
  assert.equal(error.statusCode, 402);
  assert.equal(error.isRetryable, false);
  assert.equal(JSON.parse(error.responseBody).error.code, 'budget_exceeded');
  log('budget trip:', error.statusCode);
}

log('all checks passed');
