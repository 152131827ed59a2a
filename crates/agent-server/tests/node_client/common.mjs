// What the Node client checks share: the demo conversation and its tool results.
//
// The recorded demo model (`demo`) answers round 1 with get_weather(Lisbon),
// get_weather(Oslo) and clock, round 2 with calculator("19 - 4"), round 3 with the answer.
// get_weather is the client's tool; clock and calculator run on the server.

export const SYSTEM = 'You are a concise travel assistant. Use the tools for facts; never guess.';
export const USER =
  "What's the weather in Lisbon and in Oslo right now, and how many degrees warmer is Lisbon?";
export const WEATHER = {
  Lisbon: { city: 'Lisbon', conditions: 'sunny', temp_c: 19, wind_kph: 12, humidity_pct: 64 },
  Oslo: { city: 'Oslo', conditions: 'overcast', temp_c: 4, wind_kph: 18, humidity_pct: 81 },
};
export const ANSWER_START = 'Lisbon is sunny and 19 °C';
export const ANSWER_END = 'and for winter in Oslo.';

export function log(...words) {
  console.error('node client:', ...words);
}

/// `<url>/v1`, the key, and the URL of a server whose runs trip their budget, from argv.
export function args() {
  const [url, key, capped] = process.argv.slice(2);
  if (!url || !key || !capped) {
    throw new Error('usage: node <script> <base_url> <api_key> <budget_capped_base_url>');
  }
  return { baseURL: `${url.replace(/\/$/, '')}/v1`, key, cappedURL: `${capped.replace(/\/$/, '')}/v1` };
}

/// Runs `fn`, which must throw; returns what it threw.
export async function rejects(fn, what) {
  try {
    await fn();
  } catch (error) {
    return error;
  }
  throw new Error(`${what} must fail`);
}
