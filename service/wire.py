"""JSON Schemas that describe the wire, not pydantic's Python view of a model.

Optional members are omitted when unknown and an explicit ``null`` is refused, so the nullable
``anyOf`` branch, the ``default: null`` and the generated titles pydantic writes would be false or
noise. Every public model passes ``json_schema_extra=omit_nulls`` (or calls it).
"""

from __future__ import annotations

from typing import Any


def omit_nulls(schema: dict[str, Any]) -> None:
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)  # the member name says it; pydantic's "Canonicalurl" helps nobody
        branches = prop.pop("anyOf", None)
        if branches is not None:
            kept = [branch for branch in branches if branch != {"type": "null"}]
            if len(kept) == 1:
                prop.update(kept[0])
            else:
                prop["anyOf"] = kept
        if prop.get("default", ...) is None:
            del prop["default"]
