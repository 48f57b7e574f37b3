"""The discovery wording: ``content.toml`` (or ``Settings.content_file``) read into one model.

A content file that cannot be read or does not fit the model stops the server before it serves
anything, with a ``ContentError`` that names the file and each member at fault.
"""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from service.discovery.room import AUTHORITY_LABELS, ROOM_TYPES, Authority, PricingTier, RoomType

DEFAULT_CONTENT = "content.toml"  # beside this module, shipped as package data


class ContentError(ValueError):
    """The content file is missing, is not TOML, or does not fit the model."""


def _one_line(value: str) -> str:
    value = value.strip()
    if not value or "\n" in value or "\r" in value:
        raise ValueError("must be one non-empty line")
    return value


def _link_title(value: str) -> str:
    # llms.txt links are `[title](url)`: a bracket in the title would end the link early.
    if "[" in value or "]" in value:
        raise ValueError("must not contain [ or ]")
    return value


Line = Annotated[str, AfterValidator(_one_line)]
Title = Annotated[Line, AfterValidator(_link_title)]


# RFC 3986's path-absolute (with a query and a fragment): unreserved characters, %-escapes,
# sub-delims, ":", "@", "/", "?" and "#". Brackets and quotes are left out, though some are
# sub-delims: a page's path stands in Markdown links ``[title](path)`` and in XML.
_PAGE_PATH = re.compile(r"/[A-Za-z0-9\-._~%!$&*+,;=:@/?#]*")


def _path(value: str) -> str:
    if not _PAGE_PATH.fullmatch(value):
        raise ValueError(
            "must start with / and hold only the characters of a URL's path (no spaces, brackets, "
            "quotes or control characters)"
        )
    return value


class Page(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    path: Annotated[str, AfterValidator(_path)]
    title: Title
    notes: Line


class AuthorityLabel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: Authority
    label: Title
    meaning: Line
    preserve: Line


class RoomTypeLabel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: RoomType
    label: Title
    meaning: Line


class Content(BaseModel):
    """Everything the discovery documents say that is not derived from code."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    site_name: Title
    summary: Line
    description: str = Field(min_length=1)
    attribution: Line
    caching: Line
    safety: list[Line] = Field(min_length=1)
    instructions: list[Line] = Field(min_length=1)
    pages: list[Page] = Field(min_length=1)
    pricing: list[PricingTier]
    authority: list[AuthorityLabel]
    room_types: list[RoomTypeLabel]

    @model_validator(mode="after")
    def _complete(self) -> Content:
        # Every enumeration value is described exactly once, so no document shows a bare id.
        for name, entries, expected in (
            ("authority", [entry.id for entry in self.authority], AUTHORITY_LABELS),
            ("room_types", [entry.id for entry in self.room_types], ROOM_TYPES),
        ):
            if sorted(entries) != sorted(expected):
                raise ValueError(f"{name} must list each of {', '.join(expected)} exactly once")
        paths = [page.path for page in self.pages]
        if len(set(paths)) != len(paths):
            raise ValueError("pages must not repeat a path")
        return self

    @property
    def paragraphs(self) -> list[str]:
        """``description`` as paragraphs of one line each (blank lines separate them)."""
        blocks = self.description.strip().split("\n\n")
        return [" ".join(block.split()) for block in blocks if block.strip()]


def _describe(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in detail['loc']) or '(top level)'}: {detail['msg']}"
        for detail in error.errors()
    )


def parse_content(text: str, source: str = DEFAULT_CONTENT) -> Content:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ContentError(f"discovery content {source} is not valid TOML: {error}") from None
    try:
        return Content.model_validate(data)
    except ValidationError as error:
        raise ContentError(f"discovery content {source} is not valid: {_describe(error)}") from None


def load_content(path: Path | None = None) -> Content:
    """The content at ``path``, or the packaged default when ``path`` is None."""
    if path is None:
        text = resources.files(__package__).joinpath(DEFAULT_CONTENT).read_text(encoding="utf-8")
        return parse_content(text)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ContentError(f"discovery content {path} cannot be read: {error}") from None
    return parse_content(text, str(path))
