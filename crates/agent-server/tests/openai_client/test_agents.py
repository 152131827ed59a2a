"""The OpenAI Agents SDK (PyPI `openai-agents`) against agentry's /v1/responses.

Run by crates/agent-server/tests/it/responses.rs against an in-process server on the recorded
demo model (`demo`): round 1 asks for get_weather(Lisbon), get_weather(Oslo) and clock; round 2
for calculator("19 - 4"); round 3 answers. `get_weather` is a `function_tool` the Agents SDK
runs itself; clock and calculator run on the server.

    python test_agents.py <base_url> <api_key> <budget_capped_base_url>

Exits 0 when every check passes. Progress goes to stderr.
"""

import asyncio
import json
import sys

from agents import (
    Agent,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI, APIStatusError

SYSTEM = "You are a concise travel assistant. Use the tools for facts; never guess."
USER = (
    "What's the weather in Lisbon and in Oslo right now, "
    "and how many degrees warmer is Lisbon?"
)
WEATHER = {
    "Lisbon": {"city": "Lisbon", "conditions": "sunny", "temp_c": 19},
    "Oslo": {"city": "Oslo", "conditions": "overcast", "temp_c": 4},
}
ANSWER_START = "Lisbon is sunny and 19 °C"
ANSWER_END = "and for winter in Oslo."


def log(*words):
    print("test_agents:", *words, file=sys.stderr, flush=True)


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def agent_for(client, asked):
    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city.

        Args:
            city: The city.
        """
        asked.append(city)
        return json.dumps(WEATHER[city])

    return Agent(
        name="travel",
        instructions=SYSTEM,
        model=OpenAIResponsesModel(model="demo", openai_client=client),
        tools=[get_weather],
    )


async def run(client):
    """The SDK's loop: the model asks for get_weather, the SDK runs it and sends the whole
    history back (its default), the server's tools run in between."""
    asked = []
    result = await Runner.run(agent_for(client, asked), USER)
    check(sorted(asked) == ["Lisbon", "Oslo"], f"asked {asked}")
    check(result.final_output.endswith(ANSWER_END), result.final_output)
    check(ANSWER_START in result.final_output, result.final_output)
    usage = result.context_wrapper.usage
    check(usage.requests == 2 and usage.input_tokens > 0 and usage.output_tokens > 0, f"usage {usage}")
    log("run: asked for", ", ".join(asked), "then", json.dumps(result.final_output[-40:]))


async def run_chained(client):
    """Continuation by previous_response_id: between turns the SDK sends only the tool
    outputs and the id of the response it continues."""
    asked = []
    result = await Runner.run(agent_for(client, asked), USER, auto_previous_response_id=True)
    check(sorted(asked) == ["Lisbon", "Oslo"], f"asked {asked}")
    check(result.final_output.endswith(ANSWER_END), result.final_output)
    check(result.last_response_id.startswith("resp_"), result.last_response_id)
    stored = await client.responses.retrieve(result.last_response_id)
    check(stored.output_text == result.final_output, f"stored {stored.output_text!r}")
    log("chained: last response", result.last_response_id)


async def run_chained_from(client):
    """Runner.run(previous_response_id=…): the first response stopped for the tool; a second
    run continues it from its id, sending only the tool outputs."""
    asked = []
    first = await client.responses.create(
        model="demo", instructions=SYSTEM, input=USER,
        tools=[{"type": "function", "name": "get_weather", "description": "Current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}],
    )
    calls = [item for item in first.output if item.type == "function_call"]
    check(len(calls) == 2, f"calls {first.output}")
    outputs = [
        {"type": "function_call_output", "call_id": call.call_id,
         "output": json.dumps(WEATHER[json.loads(call.arguments)["city"]])}
        for call in calls
    ]
    result = await Runner.run(agent_for(client, asked), outputs, previous_response_id=first.id)
    check(asked == [], f"nothing more to ask: {asked}")
    check(result.final_output.endswith(ANSWER_END), result.final_output)
    log("previous_response_id: continued", first.id)


async def run_streamed(client):
    asked = []
    result = Runner.run_streamed(agent_for(client, asked), USER)
    deltas = []
    async for event in result.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            deltas.append(event.data.delta)
    check(sorted(asked) == ["Lisbon", "Oslo"], f"asked {asked}")
    check(result.final_output.endswith(ANSWER_END), result.final_output)
    check("".join(deltas).endswith(ANSWER_END), "".join(deltas)[-60:])
    log("streamed:", len(deltas), "text deltas")


async def budget_trip(capped_url, api_key):
    """Without client tools the demo needs two server rounds; the capped server allows one."""
    capped = AsyncOpenAI(base_url=capped_url, api_key=api_key, timeout=30)
    agent = Agent(name="travel", instructions=SYSTEM,
                  model=OpenAIResponsesModel(model="demo", openai_client=capped))
    try:
        await Runner.run(agent, USER)
        raise AssertionError("a budget trip must fail")
    except APIStatusError as error:
        check(error.status_code == 402, f"status {error.status_code}")
    log("budget trip: 402")


async def main():
    if len(sys.argv) != 4:
        raise SystemExit("usage: test_agents.py <base_url> <api_key> <budget_capped_base_url>")
    set_tracing_disabled(True)
    base_url = sys.argv[1].rstrip("/") + "/v1"
    client = AsyncOpenAI(base_url=base_url, api_key=sys.argv[2], max_retries=0, timeout=30)
    await run(client)
    await run_chained(client)
    await run_chained_from(client)
    await run_streamed(client)
    await budget_trip(sys.argv[3].rstrip("/") + "/v1", sys.argv[2])
    log("all checks passed")


if __name__ == "__main__":
    asyncio.run(main())
