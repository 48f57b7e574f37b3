"""Settings, read once from ``SERVICE_*`` environment variables and validated before anything starts.

``Settings()`` reads the environment; tests build ``Settings(database_url=..., ...)`` directly. The
object is passed to ``create_app``; nothing in the service imports a global instance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from limits import parse_many
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SERVICE_", frozen=True, extra="ignore")

    base_url: str = "http://127.0.0.1:8000"
    database_url: str = "sqlite:///var/service.db"
    admin_token: str | None = Field(default=None, repr=False)
    waitlist_rate_limit: str = "10/minute"
    rate_limit_storage: str = "memory://"
    # Tests give every run its own Redis key prefix so runs never see each other's counters.
    rate_limit_key_prefix: str = "service-limits"
    webhook_retry_schedule: Annotated[tuple[float, ...], NoDecode] = (
        5,
        300,
        1800,
        7200,
        18000,
        36000,
        36000,
    )
    webhook_timeout: float = 15.0
    webhook_allow_private_urls: bool = False
    secret_rotation_overlap: int = 86400
    cors_origins: Annotated[tuple[str, ...], NoDecode] = ()
    content_file: Path | None = None  # the discovery wording; None: the packaged default

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError("SERVICE_BASE_URL must start with http:// or https://")
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        if not value.startswith(("sqlite:", "postgresql:", "postgres:", "postgresql+")):
            raise ValueError("SERVICE_DATABASE_URL must be sqlite:///PATH or postgresql://...")
        return value

    @field_validator("admin_token")
    @classmethod
    def _admin_token(cls, value: str | None) -> str | None:
        return value or None  # empty means unset: admin routes stay hidden

    @field_validator("waitlist_rate_limit")
    @classmethod
    def _rate_limit(cls, value: str) -> str:
        try:
            parse_many(value)
        except ValueError as error:
            raise ValueError(
                f"SERVICE_WAITLIST_RATE_LIMIT is not limits notation: {error}"
            ) from None
        return value

    @field_validator("rate_limit_storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        if not value.startswith(("memory://", "redis://", "rediss://", "redis+unix://")):
            raise ValueError("SERVICE_RATE_LIMIT_STORAGE must be memory:// or redis://HOST:PORT")
        return value

    @field_validator("webhook_retry_schedule", mode="before")
    @classmethod
    def _schedule(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(float(part) for part in value.split(",") if part.strip())
        return value

    @field_validator("webhook_retry_schedule")
    @classmethod
    def _schedule_positive(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(delay < 0 for delay in value):
            raise ValueError("retry delays are seconds and cannot be negative")
        return value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value
