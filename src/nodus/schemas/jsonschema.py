"""The JSON Schema of workload files, for editors (``nodus schema``).

Generated from the models, so it cannot drift from what ``nodus validate`` accepts; only the
``null`` alternatives pydantic adds for omitted fields are removed, because TOML has no null.
"""

from __future__ import annotations

from typing import Any

from nodus.schemas.models import Workload

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def workload_json_schema() -> dict[str, Any]:
    schema = Workload.model_json_schema(mode="validation")
    schema = _without_null(schema)
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "nodus workload file",
        **{key: value for key, value in schema.items() if key != "title"},
    }


def _without_null(node: Any) -> Any:
    """Drop ``{"type": "null"}`` alternatives and ``"default": null`` throughout."""
    if isinstance(node, list):
        return [_without_null(item) for item in node]
    if not isinstance(node, dict):
        return node
    cleaned = {
        key: _without_null(value)
        for key, value in node.items()
        if not (key == "default" and value is None)
    }
    options = cleaned.get("anyOf")
    if isinstance(options, list):
        options = [option for option in options if option != {"type": "null"}]
        if len(options) == 1:
            del cleaned["anyOf"]
            cleaned.update(options[0])
        else:
            cleaned["anyOf"] = options
    return cleaned
