"""JSON Schemas of the service's pydantic models, generated once per process.

The discovery documents (the catalog, the OpenAPI document, the room schema, llms-full.txt) are
rendered from the models' JSON Schemas every time an app is built: each Sanic worker process at
start, and every test that builds one. Pydantic generates a schema afresh on each call (2 ms for an
event payload, 80 ms for the OpenAPI document's components), and the models never change in a
running process, so each schema is generated once here and every caller gets its own copy (a JSON
round trip of the stored text), free to change it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema


def json_schema(model: type[BaseModel], mode: JsonSchemaMode = "validation") -> dict[str, Any]:
    """``model.model_json_schema(mode=mode)``, generated once per process; a copy of its own."""
    copy: dict[str, Any] = json.loads(_schema_text(model, mode))
    return copy


def components(
    models: Sequence[tuple[type[BaseModel], JsonSchemaMode]], ref_template: str
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """(model name -> ``$ref``, ``$defs``) of ``models`` together, as pydantic's
    ``models_json_schema`` gives them, generated once per process; a copy of its own."""
    named, definitions = json.loads(_components_text(tuple(models), ref_template))
    return named, definitions


@functools.cache
def _schema_text(model: type[BaseModel], mode: JsonSchemaMode) -> str:
    return json.dumps(model.model_json_schema(mode=mode))


@functools.cache
def _components_text(models: tuple[tuple[type[BaseModel], JsonSchemaMode], ...], ref_template: str) -> str:
    refs, definitions = models_json_schema(models, ref_template=ref_template)
    named = {model.__name__: ref for (model, _), ref in refs.items()}
    return json.dumps([named, definitions.get("$defs", {})])
