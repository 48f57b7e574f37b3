"""Settings: read once, validated before anything starts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.cli import main
from service.settings import ADMIN_TOKEN_MIN_LENGTH, Settings

LONG_ENOUGH = "x" * ADMIN_TOKEN_MIN_LENGTH


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("short-token", "at least 32 characters (it has 11)"),
        ("y" * 31, "at least 32 characters (it has 31)"),
        ("a token with spaces in it, long enough", "printable ASCII without spaces"),
        ("tökén" * 8, "printable ASCII without spaces"),
    ],
)
def test_a_weak_admin_token_stops_the_start_with_the_reason(token, reason):
    """A token under 32 characters, or one no header could carry, is refused; the value is not echoed."""
    with pytest.raises(ValidationError) as caught:
        Settings(admin_token=token)
    assert reason in str(caught.value)
    assert token not in str(caught.value)


@pytest.mark.parametrize(("token", "kept"), [(None, None), ("", None), (LONG_ENOUGH, LONG_ENOUGH)])
def test_an_empty_token_means_unset_and_32_characters_are_enough(token, kept):
    """Unset or empty leaves admin hidden; a 32-character token is accepted as it is."""
    assert Settings(admin_token=token).admin_token == kept


def test_the_commands_refuse_a_short_token_and_say_why(monkeypatch, capsys):
    """`python -m service` exits 2 with the reason on stderr, never printing the token itself."""
    monkeypatch.setenv("SERVICE_ADMIN_TOKEN", "hunter2-hunter2")
    assert main(["migrate"]) == 2
    err = capsys.readouterr().err
    assert "SERVICE_ADMIN_TOKEN must be at least 32 characters (it has 15)" in err
    assert "hunter2" not in err


@pytest.mark.parametrize("days", [36_501, 1_000_000_000])
def test_a_retention_past_a_century_stops_the_start(monkeypatch, capsys, days):
    """SERVICE_RETENTION_DAYS is at most 36,500 (a century): a billion days stopped the worker on an
    OverflowError once it had started, in serve and in the worker command alike."""
    monkeypatch.setenv("SERVICE_RETENTION_DAYS", str(days))
    assert main(["migrate"]) == 2
    assert "SERVICE_RETENTION_DAYS" in capsys.readouterr().err
    assert Settings(retention_days=36_500).retention_days == 36_500


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SERVICE_WEBHOOK_TIMEOUT", "0"),
        ("SERVICE_WEBHOOK_TIMEOUT", "-1"),
        ("SERVICE_WEBHOOK_TIMEOUT", "inf"),
        ("SERVICE_WEBHOOK_TIMEOUT", "3601"),
        ("SERVICE_WEBHOOK_CONNECT_TIMEOUT", "nan"),
        ("SERVICE_WEBHOOK_RETRY_SCHEDULE", "5,nan"),
        ("SERVICE_WEBHOOK_RETRY_SCHEDULE", "5,inf"),
        ("SERVICE_WEBHOOK_RETRY_SCHEDULE", "1e308"),
        ("SERVICE_WEBHOOK_RETRY_SCHEDULE", "5,-1"),
        ("SERVICE_WEBHOOK_BREAKER_COOLDOWN", "inf"),
        ("SERVICE_WEBHOOK_DISABLE_AFTER", "1e400"),
        ("SERVICE_SECRET_ROTATION_OVERLAP", "99999999999999"),
        ("SERVICE_SECRET_ROTATION_OVERLAP", str(30 * 86400 + 1)),
    ],
)
def test_a_duration_that_is_no_finite_number_of_seconds_stops_the_start(monkeypatch, capsys, variable, value):
    """Durations the worker adds to the clock are finite, positive where a zero means nothing, and
    at most a year (an attempt at most an hour): NaN, infinity or 1e308 started the service and
    then failed each attempt, or the worker, on a ValueError or an OverflowError."""
    monkeypatch.setenv(variable, value)
    assert main(["migrate"]) == 2
    assert variable in capsys.readouterr().err


def test_durations_up_to_their_bounds_are_kept():
    year = 365 * 24 * 3600
    settings = Settings(
        webhook_timeout=3600,
        webhook_retry_schedule="0,2.5," + str(year),
        webhook_breaker_cooldown=year,
        secret_rotation_overlap=30 * 86400,
    )
    assert (settings.webhook_timeout, settings.webhook_retry_schedule) == (3600, (0, 2.5, year))
    assert Settings(webhook_retry_schedule="").webhook_retry_schedule == ()


@pytest.mark.parametrize(
    ("field", "url"),
    [
        ("base_url", "https://ops:pw-never-shown@waitlist.example"),
        ("base_url", "https://ops@waitlist.example"),
        ("waitlist_redirect_url", "https://ops:pw-never-shown@site.example/thanks"),
        ("waitlist_redirect_url", "https://:pw-never-shown@site.example/thanks"),
    ],
)
def test_a_public_url_with_a_user_or_password_stops_the_start(field, url):
    """The base URL is in every document and the redirect in every browser's Location: a password
    in either would be published. Refused, and not repeated."""
    with pytest.raises(ValidationError) as caught:
        Settings(**{field: url})
    assert "must not carry a user name or password" in str(caught.value)
    assert "pw-never-shown" not in str(caught.value)


@pytest.mark.parametrize(
    ("field", "url"),
    [("base_url", "https://waitlist.example/a@b"), ("waitlist_redirect_url", "https://site.example/t?to=a@b")],
)
def test_an_at_after_the_host_is_no_user(field, url):
    assert getattr(Settings(**{field: url}), field) == url


@pytest.mark.parametrize(
    "url",
    [
        'https://waitlist.example/x"><i>injected</i>',  # would end the partner pages' href
        "https://waitlist.example/?q=1",  # every path would land in the query
        "https://waitlist.example/#top",  # or in the fragment
        "https://waitlist.example/a b",
        "https://waitlist.example/a)",  # would end a Markdown link in llms.txt
        "https://waitlist.example/it's",
        "https://waitlist.example:99999",
        "https://:8000",
    ],
)
def test_a_base_url_the_documents_could_not_hold_stops_the_start(url):
    """Documents put paths after the base URL in HTML attributes, Markdown links and XML."""
    with pytest.raises(ValidationError) as caught:
        Settings(base_url=url)
    assert "SERVICE_BASE_URL must be http(s)://host[:port][/path]" in str(caught.value)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "https://waitlist.example/launch", "http://[::1]:8000", "https://xn--bcher-kva.example"]
)
def test_a_plain_base_url_is_taken(url):
    assert Settings(base_url=url + "/").base_url == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("sqlite://", "a SQLite database in memory is not kept between connections"),
        ("sqlite:///", "a SQLite database in memory is not kept between connections"),
        ("sqlite:///:memory:", "a SQLite database in memory is not kept between connections"),
        ("sqlite:///file::memory:?uri=true", "a SQLite database in memory is not kept between connections"),
        ("sqlite:///file:shared?mode=memory&cache=shared&uri=true", "in memory is not kept"),
        ("sqlite:///var/service.db?timeout=abc", "timeout must be a number of seconds greater than 0"),
        ("sqlite:///var/service.db?timeout=0", "timeout must be a number of seconds greater than 0"),
        ("sqlite:///var/service.db?timeout=nan", "timeout must be a number of seconds greater than 0"),
        ("sqlite:///var/service.db?timeout=5&timeout=6", "query parameter timeout is given more than once"),
        ("sqlite:///var/service.db?uri=maybe", "uri must be true or false"),
        ("sqlite:///var/service.db?cached_statements=-1", "cached_statements must be a whole number"),
        ("sqlite:///var/service.db?isolation_level=AUTOCOMMIT", "unknown query parameter isolation_level"),
        ("sqlite:///var/service.db?mode=ro", "unknown query parameter mode"),  # SQLite's own: with uri=true
    ],
)
def test_a_sqlite_url_no_connection_could_use_stops_the_start(url, reason):
    """An in-memory database loses the migrated schema between connections, and a query value the
    driver cannot convert failed every connection with a traceback: both are refused at start."""
    with pytest.raises(ValidationError) as caught:
        Settings(database_url=url)
    assert reason in str(caught.value)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+asyncpg"])
@pytest.mark.parametrize(
    ("rest", "reason"),
    [
        ("u@db.example/app?sslmode=bogus", "sslmode must be one of disable, allow, prefer"),
        ("u@db.example/app?application_name=x", "unknown query parameter application_name"),
        ("u@db.example", "names no database"),
    ],
)
def test_a_postgresql_url_is_checked_whichever_scheme_names_it(scheme, rest, reason):
    """postgres:// is taken for PostgreSQL, as hosting providers write it; its query and its
    database were not checked, so a mistyped sslmode started and failed every connection."""
    with pytest.raises(ValidationError) as caught:
        Settings(database_url=f"{scheme}://{rest}")
    assert reason in str(caught.value)
    assert Settings(database_url=f"{scheme}://u@db.example/app?sslmode=require").database_url


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///var/service.db",
        "sqlite:////var/lib/service/service.db?timeout=30",
        "sqlite:///var/service.db?timeout=2.5&check_same_thread=false&cached_statements=64&detect_types=0",
        "sqlite:///file:var/service.db?uri=true&mode=rwc&cache=private",
    ],
)
def test_a_sqlite_file_with_options_its_driver_reads_is_taken(url):
    assert Settings(database_url=url).database_url == url
