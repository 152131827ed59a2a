"""litellm against agentry's /v1/chat/completions, as an `openai/` (OpenAI-compatible) model.

Run by crates/agent-server/tests/it/openai.rs against in-process servers on the recorded demo
model (`demo`; see test_client.py for its script), with the litellm venv's interpreter:

    python test_litellm.py <base_url> <api_key> <budget_capped_base_url>

Plain, streaming and a tool round trip; the three common mistakes, as litellm's own
exception types; and a budget trip with litellm's default retries, which the Rust side checks
reached the capped server once. Exits 0 when every check passes.
"""

import json
import os
import sys

# litellm fetches a price list from the network on import unless told to use its own copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

from test_client import ANSWER_END, ANSWER_START, SYSTEM, USER, WEATHER, check, weather_tool  # noqa: E402


def log(*words):
    print("test_litellm:", *words, file=sys.stderr, flush=True)


def opening():
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]


def fails(what, call, error_type):
    try:
        call()
    except error_type as error:
        return error
    raise AssertionError(f"{what} must fail with {error_type.__name__}")


def main():
    if len(sys.argv) != 4:
        raise SystemExit("usage: test_litellm.py <base_url> <api_key> <budget_capped_base_url>")
    base_url = sys.argv[1].rstrip("/") + "/v1"
    key = sys.argv[2]
    capped_url = sys.argv[3].rstrip("/") + "/v1"
    log("litellm", litellm.__name__, "against", base_url)

    def complete(messages, model="openai/demo", api_base=base_url, api_key=key, **extra):
        return litellm.completion(
            model=model, api_base=api_base, api_key=api_key, messages=messages, timeout=30, **extra
        )

    answer = complete(opening())
    text = answer.choices[0].message.content
    check(text.startswith(ANSWER_START), f"the answer: {text!r}")
    check(answer.choices[0].finish_reason == "stop", f"{answer.choices[0].finish_reason}")
    check(answer.usage.prompt_tokens > 0, f"usage: {answer.usage}")
    log("plain:", repr(text[:40]))

    text = ""
    for chunk in complete(opening(), stream=True):
        text += chunk.choices[0].delta.content or ""
    check(ANSWER_START in text and text.endswith(ANSWER_END), f"the streamed answer: {text!r}")
    log("streaming:", repr(text[-40:]))

    messages = opening()
    turn = complete(messages, tools=[weather_tool()]).choices[0]
    check(turn.finish_reason == "tool_calls", f"finish_reason {turn.finish_reason}")
    calls = turn.message.tool_calls
    cities = sorted(json.loads(call.function.arguments)["city"] for call in calls)
    check(cities == ["Lisbon", "Oslo"], f"the tool calls: {calls}")
    messages.append(turn.message.model_dump())
    for call in calls:
        city = json.loads(call.function.arguments)["city"]
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(WEATHER[city])})
    final = complete(messages, tools=[weather_tool()]).choices[0]
    check(final.finish_reason == "stop", f"finish_reason {final.finish_reason}")
    check(final.message.content.startswith(ANSWER_START), f"the answer: {final.message.content!r}")
    log("tools: called for", cities)

    # The three common mistakes, as litellm's exception types (with the server's status).
    error = fails("a wrong key", lambda: complete(opening(), api_key="not-a-key"), litellm.AuthenticationError)
    check(error.status_code == 401, f"status {error.status_code}")
    error = fails("an unknown model", lambda: complete(opening(), model="openai/gpt-9"), litellm.NotFoundError)
    check(error.status_code == 404 and "gpt-9" in str(error), f"{error.status_code}: {error}")
    error = fails("empty messages", lambda: complete([]), litellm.BadRequestError)
    check(error.status_code == 400, f"status {error.status_code}")
    error = fails("an empty message", lambda: complete([{"role": "user", "content": ""}]), litellm.BadRequestError)
    check("messages[0].content" in str(error), f"{error}")
    log("mistakes: AuthenticationError, NotFoundError, BadRequestError")

    # litellm's Router, with retries on: they key on the status alone (408, 409, 429, 5xx)
    # and ignore `x-should-retry`, so a 429 would run the loop three times; a 402 runs once.
    # (`completion(num_retries=N)` outside a Router retries every error, even a 400 or a
    # 401: no status can stop that, and it is off by default, as here.)
    router = litellm.Router(
        model_list=[
            {
                "model_name": "demo",
                "litellm_params": {"model": "openai/demo", "api_base": capped_url, "api_key": key},
            }
        ],
        num_retries=2,
        retry_after=0,
    )
    error = fails(
        "a budget trip",
        lambda: router.completion(model="demo", messages=opening(), timeout=30),
        litellm.APIError,
    )
    check(error.status_code == 402, f"status {error.status_code}: {type(error).__name__} {error}")
    check("tool iterations" in str(error), f"the server's message comes through: {error}")
    log("budget trip:", type(error).__name__, error.status_code)

    log("all checks passed")


if __name__ == "__main__":
    main()
