"""The official `openai` Python client's `client.responses` against agentry's /v1/responses.

Run by crates/agent-server/tests/it/responses.rs against an in-process server on the recorded
demo model (`demo`): round 1 asks for get_weather(Lisbon), get_weather(Oslo) and clock; round 2
for calculator("19 - 4"); round 3 answers. `get_weather` is the client's tool; clock and
calculator run on the server.

    python test_responses.py <base_url> <api_key> <budget_capped_base_url>

Exits 0 when every check passes. Progress goes to stderr.
"""

import json
import sys

import openai
from openai import OpenAI

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
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def log(*words):
    print("test_responses:", *words, file=sys.stderr, flush=True)


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def outputs(response):
    """One function_call_output per function_call item."""
    calls = [item for item in response.output if item.type == "function_call"]
    check(len(calls) == 2, f"two client calls, got {response.output}")
    check({json.loads(call.arguments)["city"] for call in calls} == {"Lisbon", "Oslo"}, "cities")
    return [
        {"type": "function_call_output", "call_id": call.call_id,
         "output": json.dumps(WEATHER[json.loads(call.arguments)["city"]])}
        for call in calls
    ]


def create(client):
    first = client.responses.create(
        model="demo", instructions=SYSTEM, input=USER, tools=[WEATHER_TOOL],
        temperature=0.2, max_output_tokens=512, metadata={"run": "ci"},
    )
    check(first.object == "response", f"object {first.object}")
    check(first.id.startswith("resp_"), f"id {first.id}")
    check(first.status == "completed", f"status {first.status}")
    check(first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens > 0, "usage")
    check(first.usage.input_tokens_details.cached_tokens == 0, "cached tokens")
    check(first.metadata == {"run": "ci"}, f"metadata {first.metadata}")
    second = client.responses.create(
        model="demo", previous_response_id=first.id, input=outputs(first), tools=[WEATHER_TOOL],
    )
    check(second.output_text.endswith(ANSWER_END), second.output_text)
    check(ANSWER_START in second.output_text, second.output_text)
    got = client.responses.retrieve(second.id)
    check(got.output_text == second.output_text, f"retrieved {got.output_text!r}")
    log("create: continued", first.id, "->", json.dumps(second.output_text[-40:]))


def stream(client):
    kinds = []
    text = ""
    final = None
    with client.responses.stream(model="demo", instructions=SYSTEM, input=USER, tools=[WEATHER_TOOL]) as events:
        for event in events:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
        final = events.get_final_response()
    check(kinds[:2] == ["response.created", "response.in_progress"], kinds[:3])
    check(kinds[-1] == "response.completed", kinds[-3:])
    check("response.function_call_arguments.done" in kinds, kinds)
    check(final.output_text == text, f"{final.output_text!r} != {text!r}")
    # `stream=True` on create, the raw events.
    events = client.responses.create(
        model="demo", previous_response_id=final.id, input=outputs(final), tools=[WEATHER_TOOL], stream=True,
    )
    numbers = []
    last = None
    for event in events:
        numbers.append(event.sequence_number)
        last = event
    check(numbers == list(range(len(numbers))), f"sequence numbers {numbers}")
    check(last.type == "response.completed", last.type)
    check(last.response.output_text.endswith(ANSWER_END), last.response.output_text)
    log("stream:", len(kinds), "events, then", len(numbers))


def errors(client):
    try:
        client.responses.create(model="demo", input="hi", extra_body={"frobnicate": 1})
        raise AssertionError("an unknown field must fail")
    except openai.BadRequestError as error:
        check(error.param == "frobnicate", f"param {error.param}")
    try:
        client.responses.create(model="demo", input="hi", previous_response_id="resp_" + "0" * 32)
        raise AssertionError("an unknown previous response must fail")
    except openai.NotFoundError as error:
        check(error.param == "previous_response_id", f"param {error.param}")
    log("errors: 400 naming the field, 404 for an unknown previous_response_id")


def budget_trip(capped_url, api_key):
    capped = OpenAI(base_url=capped_url, api_key=api_key, timeout=30)
    try:
        capped.responses.create(model="demo", instructions=SYSTEM, input=USER)
        raise AssertionError("a budget trip must fail")
    except openai.APIStatusError as error:
        check(error.status_code == 402, f"status {error.status_code}")
        check(error.code == "budget_exceeded", f"code {error.code}")
    log("budget trip: 402, not retried")


def main():
    if len(sys.argv) != 4:
        raise SystemExit("usage: test_responses.py <base_url> <api_key> <budget_capped_base_url>")
    base_url = sys.argv[1].rstrip("/") + "/v1"
    client = OpenAI(base_url=base_url, api_key=sys.argv[2], max_retries=0, timeout=30)
    log("openai", openai.__version__, "against", base_url)
    create(client)
    stream(client)
    errors(client)
    budget_trip(sys.argv[3].rstrip("/") + "/v1", sys.argv[2])
    log("all checks passed")


if __name__ == "__main__":
    main()
