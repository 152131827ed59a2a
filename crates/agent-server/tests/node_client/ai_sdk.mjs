// The Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`) against agentry's
// /v1/chat/completions: plain, streaming and a tool round trip run by the SDK's own loop; the
// three common mistakes; and a budget trip, plain and streaming, which the SDK must not retry
// (the Rust side counts the requests that reached the capped server: two).
//
//   node ai_sdk.mjs <base_url> <api_key> <budget_capped_base_url>

import assert from 'node:assert/strict';

import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { APICallError, generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

import { ANSWER_END, ANSWER_START, SYSTEM, USER, WEATHER, args, log, rejects } from './common.mjs';

const { baseURL, key, cappedURL } = args();
const provider = (apiKey, url = baseURL) =>
  createOpenAICompatible({ name: 'agentry', baseURL: url, apiKey, includeUsage: true });
const demo = provider(key)('demo');

// Plain: no client tools; the server runs its own and answers.
{
  const result = await generateText({ model: demo, system: SYSTEM, prompt: USER });
  assert.ok(result.text.startsWith(ANSWER_START), result.text);
  assert.ok(result.text.endsWith(ANSWER_END), result.text);
  assert.equal(result.finishReason, 'stop');
  assert.ok(result.usage.inputTokens > 0 && result.usage.outputTokens > 0, JSON.stringify(result.usage));
  assert.match(result.response.id, /^chatcmpl-[0-9a-f]{32}$/);
  log('plain:', JSON.stringify(result.text.slice(0, 40)));
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

// A tool round trip: the SDK runs get_weather and sends the results back itself.
{
  const asked = [];
  const getWeather = tool({
    description: 'Current weather for a city.',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      asked.push(city);
      return WEATHER[city];
    },
  });
  const result = await generateText({
    model: demo,
    system: SYSTEM,
    prompt: USER,
    tools: { get_weather: getWeather },
    stopWhen: stepCountIs(3),
  });
  assert.deepEqual(asked.sort(), ['Lisbon', 'Oslo']);
  assert.equal(result.steps.length, 2);
  assert.equal(result.steps[0].finishReason, 'tool-calls');
  assert.ok(result.text.startsWith(ANSWER_START), result.text);
  log('tools: asked for', asked.join(', '), 'then', JSON.stringify(result.text.slice(0, 40)));
}

// Streaming with tools.
{
  const result = streamText({
    model: demo,
    system: SYSTEM,
    prompt: USER,
    tools: {
      get_weather: tool({
        description: 'Current weather for a city.',
        inputSchema: z.object({ city: z.string() }),
        execute: async ({ city }) => WEATHER[city],
      }),
    },
    stopWhen: stepCountIs(3),
  });
  let text = '';
  for await (const delta of result.textStream) text += delta;
  assert.equal((await result.steps).length, 2);
  assert.ok(text.endsWith(ANSWER_END), text);
  log('streaming tools: two steps');
}

// Mistake 1: a wrong key. 401 is not retried; the SDK throws the APICallError itself.
{
  const error = await rejects(
    () => generateText({ model: provider('not-a-key')('demo'), prompt: USER }),
    'a wrong key',
  );
  assert.ok(APICallError.isInstance(error), String(error));
  assert.equal(error.statusCode, 401);
  assert.equal(error.isRetryable, false);
  assert.match(error.message, /API key/);
  log('wrong key:', error.statusCode, JSON.stringify(error.message));
}

// Mistake 2: an unknown model.
{
  const error = await rejects(
    () => generateText({ model: provider(key)('gpt-9'), prompt: USER }),
    'an unknown model',
  );
  assert.ok(APICallError.isInstance(error), String(error));
  assert.equal(error.statusCode, 404);
  assert.match(error.message, /gpt-9/);
  assert.equal(JSON.parse(error.responseBody).error.code, 'model_not_found');
  log('unknown model:', error.statusCode, JSON.stringify(error.message));
}

// Mistake 3: empty messages. The SDK refuses an empty `messages` list itself, so what reaches
// the server is an empty user message: a 400 naming it.
{
  const error = await rejects(
    () => generateText({ model: demo, messages: [{ role: 'user', content: '  ' }] }),
    'an empty message',
  );
  assert.ok(APICallError.isInstance(error), String(error));
  assert.equal(error.statusCode, 400);
  assert.equal(JSON.parse(error.responseBody).error.param, 'messages[0].content');
  log('empty message:', error.statusCode, JSON.stringify(error.message));
}

// A budget trip, with the SDK's default retries (2): one request, a 402 the SDK surfaces as is.
{
  const error = await rejects(
    () => generateText({ model: provider(key, cappedURL)('demo'), system: SYSTEM, prompt: USER }),
    'a budget trip',
  );
  assert.ok(APICallError.isInstance(error), `not retried, so not a RetryError: ${error}`);
  assert.equal(error.statusCode, 402);
  assert.equal(error.isRetryable, false);
  assert.equal(JSON.parse(error.responseBody).error.code, 'budget_exceeded');
  log('budget trip:', error.statusCode, JSON.stringify(error.message));
}

// A budget trip mid-stream: the text so far has gone out with a 200, so nothing is retried;
// the error arrives as the stream's last event and the SDK hands it to onError.
{
  const errors = [];
  const result = streamText({
    model: provider(key, cappedURL)('demo'),
    system: SYSTEM,
    prompt: USER,
    onError: ({ error }) => errors.push(error),
  });
  let text = '';
  for await (const delta of result.textStream) text += delta;
  assert.equal(await result.finishReason, 'error');
  assert.equal(errors.length, 1, JSON.stringify(errors));
  assert.equal(errors[0].code, 'budget_exceeded', JSON.stringify(errors));
  assert.ok(text.startsWith("I'll look up both cities"), text);
  log('streaming budget trip:', JSON.stringify(errors[0].message));
}

log('all checks passed');
