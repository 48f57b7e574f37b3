"""The models' JSON Schemas are generated once per process, and every caller gets its own copy."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from service.clock import ManualClock
from service.discovery.documents import build_discovery
from service.discovery.room import PublicRoom
from service.events import EVENT_MODELS, WebhookTest
from service.model_schemas import components, json_schema
from service.settings import Settings
from service.waitlist import WaitlistRequest

MODELS: list[type[BaseModel]] = [*EVENT_MODELS.values(), WebhookTest, PublicRoom, WaitlistRequest]


@pytest.mark.parametrize("mode", ["validation", "serialization"])
@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_a_schema_is_pydantics_own(model: type[BaseModel], mode: str) -> None:
    assert json_schema(model, mode) == model.model_json_schema(mode=mode)  # type: ignore[arg-type]


def test_each_caller_gets_a_copy_of_its_own() -> None:
    """Changing one answer (the room schema adds its labels in place) changes no later one."""
    first = json_schema(PublicRoom)
    first["properties"].clear()
    first["planted"] = True
    second = json_schema(PublicRoom)
    assert second == PublicRoom.model_json_schema()
    assert "planted" not in second and second["properties"]


def test_components_are_pydantics_own_and_a_copy() -> None:
    models = [(model, "serialization") for model in EVENT_MODELS.values()]
    template = "#/components/schemas/{model}"
    refs, definitions = models_json_schema(models, ref_template=template)  # type: ignore[arg-type]
    named, found = components(models, template)  # type: ignore[arg-type]
    assert named == {model.__name__: ref for (model, _), ref in refs.items()}
    assert found == definitions.get("$defs", {})
    named.clear()
    assert components(models, template)[0]  # type: ignore[arg-type]


def test_every_document_is_the_same_bytes_on_a_second_build() -> None:
    """The second app of a process renders from the stored schemas: byte for byte the first's."""
    settings = Settings(database_url="sqlite:///unused.db", base_url="https://rooms.example")
    builds = [build_discovery(settings, ManualClock()) for _ in range(2)]
    bodies = [
        {path: document.body for path, document in {**built.documents, **built.event_documents}.items()}
        for built in builds
    ]
    assert len(bodies[0]) == 11 + len(EVENT_MODELS)  # every document, every event kind
    assert bodies[0] == bodies[1]
