"""The public room: its RoomType and PricingTier, the authority labels, and room-schema.json.

The enumerations are the contract (consumers switch on them), so they live here in code; the
content file only supplies their wording, and the loader checks it covers each value once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from service.discovery.surfaces import ROOM_SCHEMA, url
from service.events import Url
from service.model_schemas import json_schema
from service.wire import omit_nulls

# docs/architecture.md "Public contract": RoomType, an enumeration of strings.
RoomType = Literal[
    "owner_room",
    "community_room",
    "member_room",
    "arcade_room",
    "verified_room",
    "pro_room",
    "custom_room",
]
# Authority labels (docs/architecture.md "Public contract"): unclaimed stub, community-maintained,
# official owner, NFT room, project hub. The first four are also room.claimed's roomType claim states.
Authority = Literal["unclaimed_stub", "community_claimed", "official_owner", "nft_room", "project_hub"]

ROOM_TYPES: tuple[str, ...] = get_args(RoomType)
AUTHORITY_LABELS: tuple[str, ...] = get_args(Authority)

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class PricingTier(BaseModel):
    """PricingTier (docs/architecture.md "Public contract"): every member an optional string."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=omit_nulls)

    tier: str | None = Field(default=None, description="Tier name, for example Verified.")
    price: str | None = Field(default=None, description="Current price, as displayed.")
    standard_price: str | None = Field(
        default=None, description="Regular price when the current price is an offer."
    )
    best_for: str | None = Field(default=None, description="Who the tier suits.")


class RoomLink(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=omit_nulls)

    label: str = Field(description="What the link is, for example website or x.")
    url: Url = Field(description="The link as the room published it; treat with phishing caution.")


class PublicRoom(BaseModel):
    """A room as consumers may display it; every fact shown links back to canonicalUrl."""

    # Unknown members are allowed (not forbidden) so a consumer validating rooms keeps working
    # when the platform adds a member.
    model_config = ConfigDict(title="PublicRoom", json_schema_extra=omit_nulls)

    slug: str = Field(description="Room slug, unique on the platform.")
    canonicalUrl: Url = Field(
        description="Canonical public room URL; link back to it whenever room facts are displayed."
    )
    project: str = Field(description="Project, token, collection or launch name.")
    ticker: str | None = Field(default=None, description="Token ticker, when the launch has one.")
    chain: str | None = Field(default=None, description="Chain of the deployment.")
    contractAddress: str | None = Field(default=None, description="Contract or mint address.")
    roomType: RoomType = Field(description="Product kind of the room.")
    authority: Authority = Field(
        description="Authority label: who speaks for the room. Preserve it when displaying the room."
    )
    tier: str | None = Field(default=None, description="Current tier id, for example verified.")
    pricing: PricingTier | None = Field(default=None, description="The room's current tier offer.")
    links: list[RoomLink] = Field(
        default_factory=list, description="Website and social links the room published."
    )


def room_schema(base_url: str, labels: Mapping[str, Mapping[str, tuple[str, str]]]) -> dict[str, Any]:
    """JSON Schema 2020-12 of a public room, ``$id`` under ``base_url``.

    ``labels`` maps the values of ``authority`` and ``roomType`` to (label, meaning) from the
    content file; each value becomes a ``oneOf`` branch with ``const``, ``title`` and
    ``description``, so the wording travels with the enumeration.
    """
    schema = json_schema(PublicRoom)
    for member, wording in labels.items():
        prop = schema["properties"][member]
        prop["oneOf"] = [
            {"const": value, "title": wording[value][0], "description": wording[value][1]}
            for value in prop.pop("enum")
        ]
    schema.pop("title", None)
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "$id": url(base_url, ROOM_SCHEMA.path),
        "title": "Public room",
        **schema,
    }
