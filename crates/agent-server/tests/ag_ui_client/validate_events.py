"""Validates every event of recorded AG-UI streams with the official Python models
(PyPI `ag-ui-protocol`, `ag_ui.core`): each `data:` line must parse as the model its `type`
names, with no field the model does not declare (the models allow extras; we do not).

usage: python validate_events.py <stream.sse>...
Prints `all checks passed` and the number of events per type on stderr.
"""

import collections
import json
import sys

from ag_ui.core import Event, EventType
from pydantic import TypeAdapter

ADAPTER = TypeAdapter(Event)


def extras(model, path):
    """Fields a model (or a nested model) received without declaring them."""
    found = []
    for name, value in (model.model_extra or {}).items():
        found.append(f"{path}.{name}")
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if hasattr(item, "model_extra"):
                found.extend(extras(item, f"{path}.{name}"))
    return found


def strip(value):
    """`value` without `null` members, at every depth."""
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def main():
    counts = collections.Counter()
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
        frames = [frame for frame in text.split("\n\n") if frame]
        assert frames, f"{path}: no events"
        for frame in frames:
            assert frame.startswith("data: "), f"{path}: not a data line: {frame!r}"
            assert "\n" not in frame, f"{path}: one line per event: {frame!r}"
            raw = json.loads(frame[len("data: "):])
            event = ADAPTER.validate_python(raw)
            assert event.type == EventType(raw["type"]), raw
            unknown = extras(event, raw["type"])
            assert not unknown, f"{path}: undeclared fields {unknown} in {raw}"
            # Round trip: the model's camelCase dump is what was sent.
            dumped = json.loads(event.model_dump_json(by_alias=True, exclude_none=True))
            assert strip(dumped) == strip(raw), (dumped, raw)
            counts[raw["type"]] += 1
        first = json.loads(frames[0][len("data: "):])["type"]
        last = json.loads(frames[-1][len("data: "):])["type"]
        assert first == "RUN_STARTED", f"{path}: starts with {first}"
        assert last in ("RUN_FINISHED", "RUN_ERROR"), f"{path}: ends with {last}"
    print(dict(sorted(counts.items())), file=sys.stderr)
    print("all checks passed", file=sys.stderr)


if __name__ == "__main__":
    main()
