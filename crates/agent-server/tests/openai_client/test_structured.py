"""The official `openai` client's structured-output helpers against agentry-server.

Run by tests/it/structured.rs with <base_url> <api_key>; the server's upstream answers
every request with {"name": "Lisbon", "population": 545923}.
"""

import sys

from openai import OpenAI
from pydantic import BaseModel


class City(BaseModel):
    name: str
    population: int


def log(*words):
    print(*words, file=sys.stderr, flush=True)


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def main():
    base_url = sys.argv[1].rstrip("/") + "/v1"
    client = OpenAI(base_url=base_url, api_key=sys.argv[2], max_retries=0, timeout=30)
    messages = [{"role": "user", "content": "Biggest city of Portugal?"}]

    # `parse` sends the model's strict schema and reads the content back into it.
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    completion = parse(model="up", messages=messages, response_format=City)
    message = completion.choices[0].message
    check(message.refusal is None, f"refusal {message.refusal}")
    check(isinstance(message.parsed, City), f"parsed {message.parsed!r}")
    check(message.parsed == City(name="Lisbon", population=545923), f"parsed {message.parsed!r}")
    log("parse:", message.parsed)

    # The streaming helper assembles the same object.
    with client.beta.chat.completions.stream(
        model="up", messages=messages, response_format=City
    ) as stream:
        final = stream.get_final_completion()
    parsed = final.choices[0].message.parsed
    check(parsed == City(name="Lisbon", population=545923), f"streamed {parsed!r}")
    log("stream:", parsed)

    # A raw json_schema request gets the JSON text as content.
    raw = client.chat.completions.create(
        model="up",
        messages=messages,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "City", "schema": City.model_json_schema(), "strict": True},
        },
    )
    check(City.model_validate_json(raw.choices[0].message.content).name == "Lisbon", "raw")
    log("all checks passed")


if __name__ == "__main__":
    main()
