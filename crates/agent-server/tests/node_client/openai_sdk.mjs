// The official `openai` npm package against agentry's /v1/chat/completions: the model list,
// plain, streaming and a tool round trip; the three common mistakes; and a budget trip, plain
// and streaming, with the client's default retries (the Rust side counts the requests that
// reached the capped server: two).
//
//   node openai_sdk.mjs <base_url> <api_key> <budget_capped_base_url>

import assert from 'node:assert/strict';

import OpenAI from 'openai';

import { ANSWER_END, ANSWER_START, SYSTEM, USER, WEATHER, args, log, rejects } from './common.mjs';

const { baseURL, key, cappedURL } = args();
const client = new OpenAI({ baseURL, apiKey: key, maxRetries: 0, timeout: 30_000 });
const opening = [
  { role: 'system', content: SYSTEM },
  { role: 'user', content: USER },
];
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

// The model list.
{
  const models = [];
  for await (const model of client.models.list()) models.push(model.id);
  assert.deepEqual(models, ['demo']);
  const demo = await client.models.retrieve('demo');
  assert.equal(demo.object, 'model');
  log('models:', models.join(', '));
}

// Plain.
{
  const completion = await client.chat.completions.create({ model: 'demo', messages: opening });
  assert.match(completion.id, /^chatcmpl-[0-9a-f]{32}$/);
  const [choice] = completion.choices;
  assert.equal(choice.finish_reason, 'stop');
  assert.ok(choice.message.content.startsWith(ANSWER_START), choice.message.content);
  assert.ok(completion.usage.total_tokens > 0);
  log('plain:', JSON.stringify(choice.message.content.slice(0, 40)));
}

// Streaming.
{
  const stream = await client.chat.completions.create({
    model: 'demo',
    messages: opening,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? '';
      finish = choice.finish_reason ?? finish;
    }
    usage = chunk.usage ?? usage;
  }
  assert.equal(finish, 'stop');
  assert.ok(text.endsWith(ANSWER_END), text);
  assert.ok(usage.prompt_tokens > 0);
  log('streaming:', JSON.stringify(text.slice(-40)));
}

// A tool round trip, with the client's own runner: it runs get_weather and sends the results.
{
  const asked = [];
  const runner = client.chat.completions.runTools({
    model: 'demo',
    messages: opening,
    tools: [
      {
        type: 'function',
        function: {
          ...weatherTool.function,
          parse: JSON.parse,
          function: ({ city }) => {
            asked.push(city);
            return WEATHER[city];
          },
        },
      },
    ],
  });
  const answer = await runner.finalContent();
  assert.deepEqual(asked.sort(), ['Lisbon', 'Oslo']);
  assert.ok(answer.startsWith(ANSWER_START), answer);
  log('tools: asked for', asked.join(', '));
}

// A streamed tool call, assembled by the stream helper.
{
  const stream = client.chat.completions.stream({ model: 'demo', messages: opening, tools: [weatherTool] });
  const final = await stream.finalChatCompletion();
  const [choice] = final.choices;
  assert.equal(choice.finish_reason, 'tool_calls');
  const cities = choice.message.tool_calls.map((call) => JSON.parse(call.function.arguments).city);
  assert.deepEqual(cities.sort(), ['Lisbon', 'Oslo']);
  log('streamed tool calls:', cities.join(', '));
}

// Mistake 1: a wrong key.
{
  const stranger = new OpenAI({ baseURL, apiKey: 'not-a-key', maxRetries: 0 });
  const error = await rejects(
    () => stranger.chat.completions.create({ model: 'demo', messages: opening }),
    'a wrong key',
  );
  assert.ok(error instanceof OpenAI.AuthenticationError, String(error));
  assert.equal(error.status, 401);
  assert.equal(error.code, 'invalid_api_key');
  log('wrong key:', error.constructor.name, error.status);
}

// Mistake 2: an unknown model.
{
  const error = await rejects(
    () => client.chat.completions.create({ model: 'gpt-9', messages: opening }),
    'an unknown model',
  );
  assert.ok(error instanceof OpenAI.NotFoundError, String(error));
  assert.equal(error.code, 'model_not_found');
  assert.equal(error.param, 'model');
  log('unknown model:', error.constructor.name, JSON.stringify(error.message));
}

// Mistake 3: empty messages, then an empty user message.
{
  let error = await rejects(
    () => client.chat.completions.create({ model: 'demo', messages: [] }),
    'empty messages',
  );
  assert.ok(error instanceof OpenAI.BadRequestError, String(error));
  assert.equal(error.param, 'messages');
  error = await rejects(
    () => client.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: '' }] }),
    'an empty user message',
  );
  assert.ok(error instanceof OpenAI.BadRequestError, String(error));
  assert.equal(error.param, 'messages[0].content');
  log('empty messages:', error.constructor.name, JSON.stringify(error.message));
}

// An accepted-but-unsupported field is refused, naming it.
{
  const error = await rejects(
    () =>
      client.chat.completions.create({
        model: 'demo',
        messages: opening,
        logprobs: true,
      }),
    'logprobs',
  );
  assert.ok(error instanceof OpenAI.BadRequestError, String(error));
  assert.equal(error.param, 'logprobs');
}

// A budget trip with the default retries (2): one request, surfaced as a 402.
{
  const capped = new OpenAI({ baseURL: cappedURL, apiKey: key });
  const error = await rejects(
    () => capped.chat.completions.create({ model: 'demo', messages: opening }),
    'a budget trip',
  );
  assert.ok(error instanceof OpenAI.APIError, String(error));
  assert.equal(error.status, 402);
  assert.equal(error.code, 'budget_exceeded');
  // What the trip spent rides along inside `error`, which the SDK keeps as `error.error`.
  const { usage, cost_usd: cost } = error.error;
  assert.ok(usage.total_tokens > 0, JSON.stringify(error.error));
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.ok(cost > 0, JSON.stringify(error.error));
  log('budget trip:', error.constructor.name, error.status, 'spent', usage.total_tokens, 'tokens');
}

// A budget trip mid-stream: the SDK throws the error chunk as an APIError while iterating.
{
  const capped = new OpenAI({ baseURL: cappedURL, apiKey: key });
  const stream = await capped.chat.completions.create({ model: 'demo', messages: opening, stream: true });
  let text = '';
  const error = await rejects(async () => {
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  }, 'a streaming budget trip');
  assert.ok(error instanceof OpenAI.APIError, String(error));
  assert.match(error.message, /tool iterations/);
  assert.ok(text.startsWith("I'll look up both cities"), text);
  log('streaming budget trip:', error.constructor.name, JSON.stringify(error.message));
}

log('all checks passed');
