"""langchain-openai's ChatOpenAI against agentry's /v1/chat/completions.

Run by crates/agent-server/tests/it/openai.rs against in-process servers on the recorded demo
model (`demo`; see test_client.py for its script):

    python test_langchain.py <base_url> <api_key> <budget_capped_base_url>

Plain, streaming and a tool round trip through LangChain's message types; the three common
mistakes; and a budget trip with the default retries, which the Rust side checks reached the
capped server once. Exits 0 when every check passes.
"""

import json
import sys

import langchain_openai
import openai
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from test_client import ANSWER_END, ANSWER_START, SYSTEM, USER, WEATHER, check


def log(*words):
    print("test_langchain:", *words, file=sys.stderr, flush=True)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return json.dumps(WEATHER[city])


def opening():
    return [SystemMessage(SYSTEM), HumanMessage(USER)]


def fails(what, call, error_type):
    try:
        call()
    except error_type as error:
        return error
    raise AssertionError(f"{what} must fail with {error_type.__name__}")


def main():
    if len(sys.argv) != 4:
        raise SystemExit("usage: test_langchain.py <base_url> <api_key> <budget_capped_base_url>")
    base_url = sys.argv[1].rstrip("/") + "/v1"
    key = sys.argv[2]
    capped_url = sys.argv[3].rstrip("/") + "/v1"
    log("langchain-openai", langchain_openai.__name__, "against", base_url)
    llm = ChatOpenAI(model="demo", base_url=base_url, api_key=key, max_retries=0, timeout=30)

    answer = llm.invoke(opening())
    check(answer.content.startswith(ANSWER_START), f"the answer: {answer.content!r}")
    check(answer.usage_metadata["input_tokens"] > 0, f"usage: {answer.usage_metadata}")
    check(answer.response_metadata["finish_reason"] == "stop", f"{answer.response_metadata}")
    log("plain:", repr(answer.content[:40]))

    text = "".join(chunk.content for chunk in llm.stream(opening()))
    check(ANSWER_START in text and text.endswith(ANSWER_END), f"the streamed answer: {text!r}")
    log("streaming:", repr(text[-40:]))

    with_tools = llm.bind_tools([get_weather])
    messages = opening()
    turn = with_tools.invoke(messages)
    cities = sorted(call["args"]["city"] for call in turn.tool_calls)
    check(cities == ["Lisbon", "Oslo"], f"the tool calls: {turn.tool_calls}")
    check(all(call["name"] == "get_weather" for call in turn.tool_calls), f"{turn.tool_calls}")
    messages.append(turn)
    for call in turn.tool_calls:
        messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    final = with_tools.invoke(messages)
    check(not final.tool_calls, f"no more calls: {final.tool_calls}")
    check(final.content.startswith(ANSWER_START), f"the answer: {final.content!r}")
    log("tools: called for", cities)

    # Streaming tool calls come together from their chunks.
    gathered = None
    for chunk in with_tools.stream(opening()):
        gathered = chunk if gathered is None else gathered + chunk
    cities = sorted(call["args"]["city"] for call in gathered.tool_calls)
    check(cities == ["Lisbon", "Oslo"], f"the streamed tool calls: {gathered.tool_calls}")
    log("streaming tools: called for", cities)

    # The three common mistakes: LangChain passes the openai client's exceptions through.
    stranger = ChatOpenAI(model="demo", base_url=base_url, api_key="not-a-key", max_retries=0)
    error = fails("a wrong key", lambda: stranger.invoke(opening()), openai.AuthenticationError)
    check(error.status_code == 401, f"status {error.status_code}")
    unknown = ChatOpenAI(model="gpt-9", base_url=base_url, api_key=key, max_retries=0)
    error = fails("an unknown model", lambda: unknown.invoke(opening()), openai.NotFoundError)
    check(error.code == "model_not_found", f"code {error.code}")
    error = fails("empty messages", lambda: llm.invoke([]), openai.BadRequestError)
    check(error.param == "messages", f"param {error.param}")
    error = fails("an empty message", lambda: llm.invoke(" "), openai.BadRequestError)
    check(error.param == "messages[0].content", f"param {error.param}")
    log("mistakes: AuthenticationError, NotFoundError, BadRequestError")

    # The default retries: a 402 is not retried.
    capped = ChatOpenAI(model="demo", base_url=capped_url, api_key=key, timeout=30)
    error = fails("a budget trip", lambda: capped.invoke(opening()), openai.APIStatusError)
    check(error.status_code == 402, f"status {error.status_code}")
    check(error.code == "budget_exceeded", f"code {error.code}")
    log("budget trip: 402 budget_exceeded")

    log("all checks passed")


if __name__ == "__main__":
    main()
