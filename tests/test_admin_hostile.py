"""Hostile input to the admin API and the operator's commands: each is answered in the error shape
(400, or exit 1 with the shape on stderr, or a usage error), never a 500 or a traceback, and
nothing is written when it is refused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import pytest
from webhook_helpers import AUTH, onboard, publish, room_claimed, settings

from service.cli import build_parser, main
from service.db.tables import events

DIGITS = "9" * 5000  # more digits than Python turns into an int (sys.get_int_max_str_digits)


@pytest.mark.parametrize("path", ["/admin/deliveries", "/admin/waitlist"])
@pytest.mark.parametrize("name", ["limit", "offset"])
def test_a_page_parameter_of_thousands_of_digits_is_400(make_client: Any, path: str, name: str) -> None:
    """A limit or offset too long to convert is out of range like any other, not a 500."""
    with make_client(**settings()) as client:
        answer = client.get(f"{path}?{name}={DIGITS}", headers=AUTH)
    assert (answer.status, [(e["field"], e["code"]) for e in answer.json.get("errors", [])]) == (
        400,
        [(name, "invalid")],
    )


@pytest.mark.parametrize(
    ("path", "field", "code"),
    [
        ("/admin/partners?debug", "debug", "unknown_parameter"),
        ("/admin/workers?debug=", "debug", "unknown_parameter"),
        ("/admin/deliveries?stauts=", "stauts", "unknown_parameter"),
        ("/admin/deliveries?status=", "status", "invalid"),
        ("/admin/deliveries?partner=", "partner", "invalid"),
        ("/admin/deliveries?partner", "partner", "invalid"),
        ("/admin/deliveries?event=", "event", "invalid"),
        ("/admin/deliveries?limit=", "limit", "invalid"),
        ("/admin/deliveries?limit=5&limit=", "limit", "repeated"),
        ("/admin/waitlist?offset", "offset", "invalid"),
    ],
)
def test_a_parameter_without_a_value_is_not_ignored(
    make_client: Any, path: str, field: str, code: str
) -> None:
    """A parameter given blank (`name=`) or bare (`name`) is read like any other: unknown, repeated
    or out of range, it is refused naming it, never dropped."""
    with make_client(**settings()) as client:
        answer = client.get(path, headers=AUTH)
    assert (answer.status, [(e["field"], e["code"]) for e in answer.json.get("errors", [])]) == (
        400,
        [(field, code)],
    )


@pytest.mark.parametrize(
    ("method", "action"),
    [
        ("post", "pause"),
        ("post", "resume"),
        ("post", "test"),
        ("post", "retry"),
        ("delete", ""),
        ("post", "resend"),
    ],
)
def test_an_action_that_takes_no_body_refuses_members_and_does_nothing(
    make_client: Any, method: str, action: str
) -> None:
    """A member meant to narrow an action (`{"deliveryId": ...}` on a retry) is refused naming it,
    and the action does not run; no body, or an empty object, runs it."""
    with make_client(**settings()) as client:
        partner = onboard(client, "http://127.0.0.1:9/hook")
        publish(client, room_claimed())
        before = client.get(f"/admin/partners/{partner['id']}", headers=AUTH).json
        delivery = client.get("/admin/deliveries", headers=AUTH).json["deliveries"][0]["id"]
        path = f"/admin/deliveries/{delivery}/resend" if action == "resend" else f"/admin/partners/{partner['id']}"
        if action and action != "resend":
            path += f"/{action}"
        send = getattr(client, method)
        refused = send(path, json={"deliveryId": delivery, "bogus": 1}, headers=AUTH)
        after = client.get(f"/admin/partners/{partner['id']}", headers=AUTH).json
        not_json = send(path, content="x", headers={**AUTH, "content-type": "text/plain"})
        empty = send(path, json={}, headers=AUTH)
    assert (refused.status, [(e["field"], e["code"]) for e in refused.json["errors"]]) == (
        400,
        [("deliveryId", "unknown_field"), ("bogus", "unknown_field")],
    )
    assert after == before  # not paused, not removed, no test delivery counted
    assert not_json.status == 415
    assert empty.status in (200, 202, 204), empty.json


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/admin/partners/{id}/rotate-secret", {"overlapSeconds": 0, "overlap": 0}),
        ("/admin/deliveries/replay", {"since": "2026-06-01T00:00:00Z", "window": 3}),
    ],
)
def test_an_unknown_body_member_is_an_unknown_field_on_every_route(
    make_client: Any, path: str, body: dict[str, Any]
) -> None:
    """A body's unknown member is `unknown_field` wherever it is sent (a query's is
    `unknown_parameter`), and the action does not run: the secret is not rotated."""
    with make_client(**settings()) as client:
        partner = onboard(client, "http://127.0.0.1:9/hook")
        answer = client.post(path.format(id=partner["id"]), json=body, headers=AUTH)
        shown = client.get(f"/admin/partners/{partner['id']}", headers=AUTH).json
    unknown = [name for name in body if name not in ("overlapSeconds", "since")]
    assert (answer.status, [(e["field"], e["code"]) for e in answer.json["errors"]]) == (
        400,
        [(name, "unknown_field") for name in unknown],
    )
    assert shown["liveSecrets"] == 1


@pytest.mark.parametrize(
    ("body", "headers", "status", "errors"),
    [
        ({"json": {"intent": "claim"}}, {}, 400, [("intent", "unknown_field")]),
        ({"content": b"intent=claim"}, {"content-type": "text/plain"}, 415, []),
    ],
)
def test_an_erasure_with_a_body_erases_nothing(
    make_client: Any, body: dict[str, Any], headers: dict[str, str], status: int, errors: list[Any]
) -> None:
    """A body meant to narrow the erasure (one intent) is refused, and every registration of the
    address stays; an empty JSON object erases as no body does."""
    with make_client(**settings()) as client:
        for intent in ("claim", "member"):
            client.post("/api/waitlist", json={"email": "ada@example.com", "intent": intent})
        answer = client.delete("/admin/waitlist?email=ada@example.com", headers={**AUTH, **headers}, **body)
        kept = client.get("/admin/waitlist", headers=AUTH).json["entries"]
        empty = client.delete("/admin/waitlist?email=ada@example.com", json={}, headers=AUTH)
    refused = [(e["field"], e["code"]) for e in answer.json.get("errors", [])]
    assert (answer.status, refused) == (status, errors)
    assert sorted(entry["intent"] for entry in kept) == ["claim", "member"]
    assert (empty.status, empty.json) == (200, {"erased": 2})


def test_an_erasure_with_the_address_given_twice_erases_nothing(make_client: Any) -> None:
    """`email=ADDRESS&email=` names the address twice: refused, and the registration stays."""
    with make_client(**settings()) as client:
        client.post("/api/waitlist", json={"email": "ada@example.com", "intent": "member"})
        answer = client.delete("/admin/waitlist?email=ada@example.com&email=", headers=AUTH)
        entries = client.get("/admin/waitlist", headers=AUTH).json["entries"]
    assert (answer.status, [(e["field"], e["code"]) for e in answer.json.get("errors", [])]) == (
        400,
        [("email", "repeated")],
    )
    assert [entry["email"] for entry in entries] == ["ada@example.com"]


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", None])
@pytest.mark.parametrize(
    ("method", "path"),
    [("post", "/admin/partners"), ("patch", "/admin/partners/ptn_1"), ("post", "/admin/events")],
)
def test_a_body_that_is_not_json_is_told_to_be_json(
    make_client: Any, method: str, path: str, content_type: str | None
) -> None:
    """The admin routes read JSON only: the 415 says so, rather than offering a form they refuse."""
    headers = {**AUTH, **({"content-type": content_type} if content_type else {})}
    with make_client(**settings()) as client:
        answer = client.request(
            method, path, content=b"name=P&url=https%3A%2F%2Fp.example%2F", headers=headers
        )
    assert (answer.status, answer.json) == (415, {"ok": False, "message": "Send application/json."})


ROOM = {"slug": "moonfrog", "roomUrl": "https://launchrooms.example/rooms/moonfrog"}


def _upgraded(tier: str) -> dict[str, Any]:
    """A room.upgraded event, whose dedupe key is `room.upgraded:evt_1:TIER`."""
    return {"event": "room.upgraded", "eventId": "evt_1", **ROOM, "tier": tier, "tierLabel": "Verified"}


KEY_MAX = events.c.dedupe_key.type.length
KEY_PREFIX = len("room.upgraded:evt_1:")


@pytest.mark.parametrize(
    ("event", "fields"),
    [
        (_upgraded("t" * (KEY_MAX + 1 - KEY_PREFIX)), ["tier"]),  # one character over
        (_upgraded(":" * 400), ["tier"]),  # 400 characters, each escaped to three in the key
        ({"event": "room.links.updated", **ROOM, "changedFields": ["website"] * 200}, ["changedFields"]),
        (
            {"event": "room.trending", **ROOM, "metric": "visits", "value": 1, "window": "w" * 1000},
            ["slug", "window"],
        ),
    ],
    ids=["one-over", "escaped", "many-items", "two-members"],
)
def test_an_event_whose_dedupe_key_outgrows_storage_is_400(
    make_client: Any, database_url: str, event: dict[str, Any], fields: list[str]
) -> None:
    """The stored dedupe key holds 1024 characters: an event whose key would be longer is 400
    naming the members that make it, on every database, and nothing is stored or delivered."""
    with make_client(database_url=database_url, **settings()) as client:
        client.post("/admin/partners", json={"name": "P", "url": "http://127.0.0.1:9/hook"}, headers=AUTH)
        answer = client.post("/admin/events", json=event, headers=AUTH)
        stored = client.get("/admin/deliveries", headers=AUTH).json["deliveries"]
    assert (answer.status, [(e["field"], e["code"]) for e in answer.json.get("errors", [])]) == (
        400,
        [(field, "too_long") for field in fields],
    )
    assert stored == []


def test_an_event_whose_dedupe_key_fills_storage_is_stored(make_client: Any, database_url: str) -> None:
    """A key of exactly 1024 characters is the longest stored."""
    with make_client(database_url=database_url, **settings()) as client:
        answer = client.post("/admin/events", json=_upgraded("t" * (KEY_MAX - KEY_PREFIX)), headers=AUTH)
    assert (answer.status, answer.json) == (202, {"eventId": "evt_1", "deliveries": 0})


# --- the commands -----------------------------------------------------------------------------


@pytest.fixture
def env(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS", "1")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, Any]:
    """The exit status, stdout's JSON and stderr's JSON of one command run in this process."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, json.loads(err) if err.strip() else None


NOT_UTF8 = os.fsdecode(b"ptn_\xff")  # a byte that is not UTF-8 reaches argv as a surrogate escape


@pytest.mark.parametrize(
    "argv",
    [
        ("partners", "show", NOT_UTF8),
        ("partners", "pause", NOT_UTF8),
        ("partners", "resume", NOT_UTF8),
        ("partners", "test", NOT_UTF8),
        ("partners", "retry", NOT_UTF8),
        ("partners", "delete", NOT_UTF8),
        ("partners", "rotate-secret", NOT_UTF8),
        ("partners", "update", NOT_UTF8, "--name", "P"),
        ("deliveries", "resend", NOT_UTF8),
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_an_id_that_is_not_utf8_is_refused_in_the_error_shape(
    env: None, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    """An id the database could not even be asked about exits 1 naming it, not with a traceback."""
    code, out, err = run(capsys, *argv)
    assert (code, out, [(e["field"], e["code"]) for e in err["errors"]]) == (
        1,
        None,
        [("id", "invalid_characters")],
    )


def test_numbers_of_thousands_of_digits_are_refused_in_the_error_shape(
    env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """--limit, --offset and --max-in-flight too long to convert are out of range, not a traceback."""
    code, added, _ = run(capsys, "partners", "add", "--name", "P", "--url", "http://127.0.0.1:9/hook")
    for argv, field in [
        (("deliveries", "list", "--limit", DIGITS), "limit"),
        (("deliveries", "list", "--offset", DIGITS), "offset"),
        (("partners", "update", added["id"], "--max-in-flight", DIGITS), "maxInFlight"),
    ]:
        code, out, err = run(capsys, *argv)
        assert (code, out, [(e["field"], e["code"]) for e in err["errors"]]) == (
            1,
            None,
            [(field, "invalid")],
        )


@pytest.mark.parametrize("days", ["999999999", "1000000000", "99999999999999999999"])
def test_pruning_older_than_any_date_prunes_nothing(
    env: None, capsys: pytest.CaptureFixture[str], days: str
) -> None:
    """A retention reaching back past the year 1 is no error: nothing stored is that old."""
    assert run(capsys, "prune", "--older-than", days) == (
        0,
        {"deliveries": 0, "attempts": 0, "events": 0, "cancelled": 0},
        None,
    )


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (("worker", "--port", "65536"), "argument --port: must be a whole number from 0 to 65535"),
        (("worker", "--port", "-1"), "argument --port: must be a whole number from 0 to 65535"),
        (("worker", "--concurrency", "0"), "argument --concurrency: must be a whole number, at least 1"),
        (("worker", "--concurrency", "-5"), "argument --concurrency: must be a whole number, at least 1"),
        (("serve", "--port", "70000"), "argument --port: must be a whole number from 0 to 65535"),
        (("serve", "--workers", "0"), "argument --workers: must be a whole number, at least 1"),
        (("serve", "--workers", "-3"), "argument --workers: must be a whole number, at least 1"),
    ],
)
def test_ports_and_counts_out_of_range_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], refusal: str
) -> None:
    """serve and worker refuse a port outside 0 to 65535 and a count below 1 before they start (the
    worker bound --port 70000 as port 4464; serve --workers 0 and worker --concurrency 0 stopped
    on a traceback, and serve --workers -3 spun without serving)."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(list(argv))
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"python -m service {argv[0]}: error: {refusal}"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_a_port_that_is_taken_says_so(env: None, workers: str) -> None:
    """serve on a port in use exits 1 with one line saying why (as the worker does), not a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "service",
                "serve",
                "--port",
                str(port),
                "--workers",
                workers,
                "--no-worker",
            ],
            env=dict(os.environ),
            capture_output=True,
            timeout=60,
            check=False,
        )
    stderr = done.stderr.decode().splitlines()
    assert [text for text in stderr if not text.startswith("{")] == []  # no traceback
    errors = [line["message"] for line in map(json.loads, stderr) if line["level"] == "error"]
    # With several workers, Sanic's manager first says it could not serve, without the reason.
    assert (done.returncode, errors[-1:]) == (
        1,
        [f"cannot listen on 127.0.0.1:{port}: Address already in use"],
    )


def test_publishing_a_file_larger_than_the_admin_route_takes_is_refused_unread(
    env: None, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    """events publish FILE takes what POST /admin/events takes (64 KiB) and reads no further: a
    larger file is the 413 error shape, and an endless one (/dev/zero) is not read forever."""
    event = tmp_path / "event.json"
    event.write_text(json.dumps(room_claimed()) + " " * 70_000)  # valid, and over the limit
    for path in (str(event), "/dev/zero"):
        assert run(capsys, "events", "publish", path) == (
            1,
            None,
            {"ok": False, "message": "The request body is too large."},
        )
