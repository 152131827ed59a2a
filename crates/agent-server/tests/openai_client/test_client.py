"""The official `openai` Python client against agentry's /v1/chat/completions.

Run by crates/agent-server/tests/it/openai.rs against an in-process server on the recorded
demo model (`demo`), whose script is: round 1 asks for get_weather(Lisbon), get_weather(Oslo)
and clock; round 2 for calculator("19 - 4"); round 3 answers. Here `get_weather` is the
client's tool, while clock and calculator run on the server.

    python test_client.py <base_url> <api_key> <budget_capped_base_url>

The third server trips its run budget on the demo; the Rust side checks that the budget trip
reached it exactly once (the client's default retries left on).

Exits 0 when every check passes; a failed check raises, which exits non-zero with a traceback.
Progress goes to stderr.
"""

import json
import sys

import openai
import pydantic
from openai import OpenAI

SYSTEM = "You are a concise travel assistant. Use the tools for facts; never guess."
USER = (
    "What's the weather in Lisbon and in Oslo right now, "
    "and how many degrees warmer is Lisbon?"
)
WEATHER = {
    "Lisbon": {"city": "Lisbon", "conditions": "sunny", "temp_c": 19, "wind_kph": 12, "humidity_pct": 64},
    "Oslo": {"city": "Oslo", "conditions": "overcast", "temp_c": 4, "wind_kph": 18, "humidity_pct": 81},
}
ANSWER_START = "Lisbon is sunny and 19 °C"
ANSWER_END = "and for winter in Oslo."


def weather_tool():
    function = {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name."}},
            "required": ["city"],
        },
    }
    return {"type": "function", "function": function}


class GetWeather(pydantic.BaseModel):
    """Current weather for a city."""

    city: str = pydantic.Field(description="City name.")


def log(*words):
    print("test_client:", *words, file=sys.stderr, flush=True)


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def opening():
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]


def follow_up(content, calls):
    """The history sent back: the opening, the assistant turn as returned, one result per call.

    `calls` are (id, name, arguments-as-JSON-text) triples."""
    assistant = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}
            for id_, name, arguments in calls
        ],
    }
    results = [
        {"role": "tool", "tool_call_id": id_, "content": json.dumps(WEATHER[json.loads(arguments)["city"]])}
        for id_, _, arguments in calls
    ]
    return opening() + [assistant] + results


def check_calls(calls):
    """Two get_weather calls, arguments as JSON text, for Lisbon and Oslo."""
    check(len(calls) == 2, f"two client tool calls, got {calls}")
    cities = set()
    for id_, name, arguments in calls:
        check(bool(id_), "each call has an id")
        check(name == "get_weather", f"only the client's tool comes back, got {name}")
        check(isinstance(arguments, str), f"arguments are JSON text, got {arguments!r}")
        cities.add(json.loads(arguments)["city"])
    check(cities == {"Lisbon", "Oslo"}, f"the calls ask for Lisbon and Oslo, got {cities}")


def check_usage(usage):
    check(usage is not None, "usage is present")
    check(usage.prompt_tokens > 0 and usage.completion_tokens > 0, f"usage counts tokens: {usage}")
    check(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, f"total adds up: {usage}")
    check(usage.prompt_tokens_details is not None, "prompt_tokens_details is present")
    check(usage.completion_tokens_details is not None, "completion_tokens_details is present")


def non_streaming(client):
    first = client.chat.completions.create(
        model="demo",
        messages=opening(),
        tools=[weather_tool()],
        temperature=0.2,
        max_completion_tokens=512,
        user="agentry-ci",
    )
    check(first.object == "chat.completion", f"object: {first.object}")
    check(first.id.startswith("chatcmpl-"), f"id: {first.id}")
    check(first.model == "demo", f"model: {first.model}")
    check(len(first.choices) == 1, "one choice")
    choice = first.choices[0]
    check(choice.finish_reason == "tool_calls", f"finish_reason: {choice.finish_reason}")
    check(choice.message.role == "assistant", "an assistant message")
    calls = [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls]
    check_calls(calls)
    check_usage(first.usage)
    log("non-streaming: tool_calls", [json.loads(a)["city"] for _, _, a in calls])

    second = client.chat.completions.create(
        model="demo",
        messages=follow_up(choice.message.content, calls),
        tools=[weather_tool()],
    )
    choice = second.choices[0]
    check(choice.finish_reason == "stop", f"finish_reason: {choice.finish_reason}")
    check(not choice.message.tool_calls, "no tool calls in the answer")
    text = choice.message.content
    check(text.startswith(ANSWER_START) and text.endswith(ANSWER_END), f"the answer: {text!r}")
    check_usage(second.usage)
    log("non-streaming: answer", repr(text[:40]), "usage", second.usage.total_tokens)


def accumulate(stream):
    """Reads a raw chunk stream: content, tool calls by index, finish_reason, usage."""
    content, calls, finish, usage, roles = "", {}, None, None, []
    for chunk in stream:
        check(chunk.object == "chat.completion.chunk", f"object: {chunk.object}")
        if chunk.usage is not None:
            check(chunk.choices == [], "the usage chunk has no choices")
            usage = chunk.usage
            continue
        check(finish is None, "nothing but usage follows the finish_reason chunk")
        for choice in chunk.choices:
            delta = choice.delta
            if delta.role:
                roles.append(delta.role)
            if delta.content:
                content += delta.content
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                if call.id:
                    slot["id"] = call.id
                if call.function and call.function.name:
                    slot["name"] += call.function.name
                if call.function and call.function.arguments:
                    slot["arguments"] += call.function.arguments
            if choice.finish_reason:
                finish = choice.finish_reason
    check(roles == ["assistant"], f"one role delta, first: {roles}")
    ordered = [(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    return content, ordered, finish, usage


def streaming(client):
    stream = client.chat.completions.create(
        model="demo",
        messages=opening(),
        tools=[weather_tool()],
        stream=True,
        stream_options={"include_usage": True},
    )
    content, calls, finish, usage = accumulate(stream)
    check(finish == "tool_calls", f"finish_reason: {finish}")
    check_calls(calls)
    check_usage(usage)
    log("streaming: tool_calls", [json.loads(a)["city"] for _, _, a in calls])

    stream = client.chat.completions.create(
        model="demo",
        messages=follow_up(content or None, calls),
        tools=[weather_tool()],
        stream=True,
        stream_options={"include_usage": True},
    )
    content, calls, finish, usage = accumulate(stream)
    check(finish == "stop", f"finish_reason: {finish}")
    check(calls == [], f"no tool calls in the answer: {calls}")
    check(ANSWER_START in content and content.endswith(ANSWER_END), f"the answer: {content!r}")
    check_usage(usage)
    log("streaming: answer", repr(content[-40:]), "usage", usage.total_tokens)


def stream_helper(client):
    """The client's own accumulating stream helper, which checks the chunk sequence itself,
    then with a strict tool made by `openai.pydantic_function_tool`, whose arguments the
    helper parses into the Pydantic model."""
    with client.chat.completions.stream(
        model="demo", messages=opening(), tools=[weather_tool()]
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    choice = final.choices[0]
    check(choice.finish_reason == "tool_calls", f"finish_reason: {choice.finish_reason}")
    calls = choice.message.tool_calls
    check_calls([(c.id, c.function.name, c.function.arguments) for c in calls])
    strict = openai.pydantic_function_tool(GetWeather, name="get_weather")
    check(strict["function"].get("strict") is True, f"the helper makes a strict tool: {strict}")
    with client.chat.completions.stream(model="demo", messages=opening(), tools=[strict]) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    choice = final.choices[0]
    check(choice.finish_reason == "tool_calls", f"strict finish_reason: {choice.finish_reason}")
    calls = choice.message.tool_calls
    check_calls([(c.id, c.function.name, c.function.arguments) for c in calls])
    parsed = [c.function.parsed_arguments for c in calls]
    check(all(isinstance(p, GetWeather) for p in parsed), f"parsed into the model: {parsed!r}")
    check({p.city for p in parsed} == {"Lisbon", "Oslo"}, f"parsed cities: {parsed!r}")
    log("stream helper: tool calls; a strict pydantic tool parsed")


def errors(client, base_url):
    try:
        client.chat.completions.create(model="no-such-model", messages=opening())
        raise AssertionError("an unknown model must fail")
    except openai.NotFoundError as error:
        check(error.status_code == 404, f"status {error.status_code}")
        check(error.code == "model_not_found", f"code {error.code}")
    try:
        client.chat.completions.create(model="demo", messages=opening(), n=2)
        raise AssertionError("n=2 must fail")
    except openai.BadRequestError as error:
        check(error.param == "n", f"param {error.param}")
    stranger = OpenAI(base_url=base_url, api_key="not-a-key", max_retries=0)
    try:
        stranger.chat.completions.create(model="demo", messages=opening())
        raise AssertionError("a wrong key must fail")
    except openai.AuthenticationError as error:
        check(error.status_code == 401, f"status {error.status_code}")
    for messages, param in (([], "messages"), ([{"role": "user", "content": "  "}], "messages[0].content")):
        try:
            client.chat.completions.create(model="demo", messages=messages)
            raise AssertionError(f"messages={messages} must fail")
        except openai.BadRequestError as error:
            check(error.status_code == 400, f"status {error.status_code}")
            check(error.param == param, f"param {error.param}")
    try:
        client.chat.completions.create(
            model="demo", messages=opening(), response_format={"type": "xml"}
        )
        raise AssertionError("an unknown response_format must fail")
    except openai.BadRequestError as error:
        check(error.param == "response_format.type", f"param {error.param}")
    log("errors: NotFoundError, BadRequestError, AuthenticationError")


def models(client):
    ids = [model.id for model in client.models.list()]
    check(ids == ["demo"], f"the models: {ids}")
    check(client.models.retrieve("demo").object == "model", "a model")
    try:
        client.models.retrieve("gpt-9")
        raise AssertionError("an unknown model must fail")
    except openai.NotFoundError as error:
        check(error.code == "model_not_found", f"code {error.code}")
    log("models:", ids)


def budget_trip(capped_url, api_key):
    """With the default retries: a 402 that is not retried (the Rust side counts requests)."""
    capped = OpenAI(base_url=capped_url, api_key=api_key, timeout=30)
    try:
        capped.chat.completions.create(model="demo", messages=opening())
        raise AssertionError("a budget trip must fail")
    except openai.APIStatusError as error:
        check(error.status_code == 402, f"status {error.status_code}")
        check(error.code == "budget_exceeded", f"code {error.code}")
        # What the trip spent rides along inside `error`, where the client keeps the body.
        usage = error.body["usage"]
        check(
            usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0,
            f"usage {usage}",
        )
        check(error.body["cost_usd"] > 0, f"cost {error.body}")
    log("budget trip: 402 budget_exceeded, spent", usage["total_tokens"], "tokens")


def main():
    if len(sys.argv) != 4:
        raise SystemExit("usage: test_client.py <base_url> <api_key> <budget_capped_base_url>")
    base_url = sys.argv[1].rstrip("/") + "/v1"
    client = OpenAI(base_url=base_url, api_key=sys.argv[2], max_retries=0, timeout=30)
    log("openai", openai.__version__, "against", base_url)
    non_streaming(client)
    streaming(client)
    stream_helper(client)
    errors(client, base_url)
    models(client)
    budget_trip(sys.argv[3].rstrip("/") + "/v1", sys.argv[2])
    log("all checks passed")


if __name__ == "__main__":
    main()
