"""A partner's signing secret is shown in the answer that hands it over (onboarding, rotation) and
nowhere else; the admin token and the key that seals secrets at rest are never shown at all.

One run drives the service the way an operator and a hostile partner would: onboarding and
rotating over the admin API, the console and the commands; deliveries the partner answers with
its own secrets echoed in bodies and headers, with failures and retries; test sends; a restart
under a key that no longer opens the stored secrets. Then it reads every GET route the router
lists (a route added tomorrow is read too), as the admin and signed in to the console, and every
listing command. No answer, command output or log line at DEBUG may hold any of those values,
whole or without the ``whsec_`` prefix, as written or JSON-escaped, nor a secret as it is sealed in
the database.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from service_logs import service_logs
from sqlalchemy import select
from webhook_helpers import (
    ADMIN_TOKEN,
    AUTH,
    TEST_SECRETS_KEY,
    Receiver,
    Reply,
    deliveries,
    drain,
    onboard,
    publish,
    room_claimed,
    settings,
)

from service.cli import main
from service.db.tables import partner_secrets
from service.webhooks.signing import SECRET_PREFIX

# Another sealing key (32 bytes of 0x03): the restart below runs under it alone.
OTHER_SECRETS_KEY = "AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM="
ORIGIN = {"origin": "http://127.0.0.1:8000"}  # the settings' default base URL


class Seen:
    """Everything shown outside the hand-over answers, by where it was shown."""

    def __init__(self) -> None:
        self.shown: list[tuple[str, str]] = []

    def answer(self, where: str, response: Any) -> Any:
        self.shown.append((where, f"{response.status} {dict(response.headers)} {response.text}"))
        return response

    def leaks(self, values: dict[str, str]) -> list[str]:
        return [
            f"{name} in {where}"
            for where, text in self.shown
            for name, value in values.items()
            if value in text
        ]


def json_escaped(secret: str) -> tuple[str, str]:
    """``secret`` as other JSON encoders than Python's write it: PHP's (``\\/``) whole, and .NET's
    (``\\u002B``, ``\\u002F``, ``\\u003D``) without its prefix."""
    key = secret.removeprefix(SECRET_PREFIX)
    dotnet = key.replace("+", "\\u002B").replace("/", "\\u002F").replace("=", "\\u003D")
    return secret.replace("/", "\\/"), dotnet


def echo(*secrets: str) -> str:
    """What a hostile partner answers: its secrets, live or retired by a rotation, whole and
    without their prefix, as written and JSON-escaped."""
    return " ".join(
        " ".join((secret, secret.removeprefix(SECRET_PREFIX), *json_escaped(secret))) for secret in secrets
    )


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page[:300]
    return found.group(1)


async def stored(client: Any) -> list[str]:
    """Every partner secret as sealed in the database."""
    async with client.app.ctx.engine.connect() as conn:
        return list((await conn.scalars(select(partner_secrets.c.secret))).all())


def get_every_route(client: Any, seen: Seen, ids: dict[str, list[str]], cookies: dict[str, str]) -> int:
    """GET each route the router lists, each path parameter filled with every id of its kind."""
    paths = sorted(
        "/" + route.path.lstrip("/") for route in client.app.router.routes if "GET" in route.methods
    )
    assert len(paths) > 40  # the router was read
    read = 0
    for path in paths:
        names = re.findall(r"<([a-z_]+)(?::[a-z]+)?>", path)
        values = ids.get(names[0], ["x"]) if names else [""]
        for value in values:
            url = re.sub(r"<[^>]+>", value, path)
            for query in ("", f"?partner={ids['partner_id'][0]}", "?status=failed"):
                seen.answer(f"GET {url}{query}", client.get(url + query, headers=AUTH, cookies=cookies))
                read += 1
    return read


def test_secrets_are_shown_only_in_the_answers_that_hand_them_over(
    make_client: Any,
    database_url: str,
    clock: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen = Seen()
    handed: list[str] = []  # every secret issued, in the answers (or output) that hand it over
    sealed: list[str] = []  # as stored, read before and after the restart
    options = settings(database_url=database_url, secrets_key=TEST_SECRETS_KEY, structured_logs=True)
    monkeypatch.setenv("SERVICE_DATABASE_URL", database_url)
    monkeypatch.setenv("SERVICE_SECRETS_KEY", TEST_SECRETS_KEY)
    monkeypatch.setenv("SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS", "1")

    def command(*argv: str) -> str:
        code = main(list(argv))
        out, err = capsys.readouterr()
        assert code == 0, (argv, err)
        seen.shown.append((f"command {' '.join(argv)}, its errors", err))
        return out

    # The apps and the commands log as serve does, here at DEBUG, into one buffer.
    with service_logs("DEBUG") as log_lines, Receiver() as receiver:
        with make_client(**options) as client:
            partner = onboard(client, receiver.url("/hook"), name="Echo")
            handed.append(partner["secret"])
            rotated = client.post(f"/admin/partners/{partner['id']}/rotate-secret", headers=AUTH)
            assert rotated.status == 200
            handed.append(rotated.json["secret"])
            # The partner answers with its live secrets, failing twice before it takes the event.
            receiver.script(
                "/hook",
                Reply(500, body=echo(*handed), headers={"X-Echo": handed[0]}),
                Reply(429, body=echo(*handed), headers={"Retry-After": "1"}),
                Reply(200, body=echo(*handed)),
            )
            publish(client, room_claimed())
            for _ in range(3):
                drain(client)
                clock.advance(3600)
            receiver.script("/hook", Reply(400, body=echo(*handed)))
            seen.answer("test send", client.post(f"/admin/partners/{partner['id']}/test", headers=AUTH))
            delivered = deliveries(client)
            assert [delivery["status"] for delivery in delivered] == ["delivered"]

            # The console: sign in, rotate (the page that hands the new secret over), test, edit.
            signed_in = client.post(
                "/console/login", data={"token": ADMIN_TOKEN, "next": "/console"}, headers=ORIGIN
            )
            seen.answer("sign-in", signed_in)
            cookies = {"console_session": signed_in.cookies["console_session"]}
            token = csrf(client.get(f"/console/partners/{partner['id']}", cookies=cookies).text)
            form = {"csrf": token}
            done = client.post(
                f"/console/partners/{partner['id']}/rotate", data=form, headers=ORIGIN, cookies=cookies
            )
            assert done.status == 303
            seen.answer("console rotate", done)  # the secret rides to the next page encrypted
            flash = {**cookies, "console_flash": done.cookies["console_flash"]}
            page = client.get(done.headers["location"], cookies=flash)
            issued = [one for one in re.findall(r"whsec_[A-Za-z0-9+/=]+", page.text) if one not in handed]
            assert len(issued) == 1, page.text
            handed.extend(issued)
            receiver.script("/hook", Reply(503, body=echo(*handed)))
            def console(path: str, **fields: str) -> Any:
                return client.post(path, data={**form, **fields}, headers=ORIGIN, cookies=cookies)

            for action in ("test", "pause", "resume", "retry"):
                seen.answer(f"console {action}", console(f"/console/partners/{partner['id']}/{action}"))
            edit = {"name": "Echo", "url": receiver.url("/hook"), "maxInFlight": "4"}
            seen.answer("console edit", console(f"/console/partners/{partner['id']}/edit", **edit))
            seen.answer("console export", console("/console/waitlist/export"))
            # The token again at sign-in, from a page that may not sign in (a foreign origin).
            seen.answer(
                "foreign sign-in",
                client.post(
                    "/console/login", data={"token": ADMIN_TOKEN}, headers={"origin": "http://evil.example"}
                ),
            )

            # Commands: rotate (its output hands the secret over), then every read.
            # Commands run on the system's clock, months past the test's: by it, the overlaps of
            # the first two secrets have ended, and they are retired.
            handed.append(json.loads(command("partners", "rotate-secret", partner["id"]))["secret"])
            receiver.script("/hook", Reply(200, body=echo(*handed)))
            seen.shown.append(("command partners test", command("partners", "test", partner["id"])))
            # A delivery two days on by the test's clock: the first two secrets are retired there too.
            clock.advance(2 * 86400)
            receiver.script("/hook", Reply(502, body=echo(*handed)))
            publish(client, room_claimed("third"))
            assert drain(client) == 1
            reads = [("partners", "list"), ("partners", "show", partner["id"]), ("deliveries", "list")]
            reads += [("workers",), ("waitlist", "export"), ("secrets", "re-encrypt")]
            for argv in reads:
                seen.shown.append((f"command {' '.join(argv)}", command(*argv)))

            sealed += client.run(stored(client))
            ids = {
                "partner_id": [partner["id"], "ptn_missing"],
                "delivery_id": [delivered[0]["id"], *(one["id"] for one in deliveries(client))],
                "event_id": ["room.claimed"],
            }
            read = get_every_route(client, seen, ids, cookies)

        # A new key put first, a second partner sealed under it, then a restart under the new key
        # alone: the first partner's secrets open no more, its deliveries wait, and the lines
        # saying why name no secret.
        with make_client(**{**options, "secrets_key": f"{OTHER_SECRETS_KEY},{TEST_SECRETS_KEY}"}) as client:
            handed.append(onboard(client, receiver.url("/other"), name="Other")["secret"])
        with make_client(**{**options, "secrets_key": OTHER_SECRETS_KEY}) as client:
            publish(client, room_claimed("second"))
            drain(client)
            seen.answer("deliveries after the restart", client.get("/admin/deliveries", headers=AUTH))
            lookup = client.get(f"/admin/partners/{partner['id']}", headers=AUTH)
            seen.answer("partner after the restart", lookup)
            sealed += client.run(stored(client))
    seen.shown.append(("log lines", log_lines.getvalue()))

    watched = {"admin token": ADMIN_TOKEN, "secrets key": TEST_SECRETS_KEY, "other key": OTHER_SECRETS_KEY}
    for number, secret in enumerate(handed, 1):
        watched[f"secret {number}"] = secret
        watched[f"secret {number} without its prefix"] = secret.removeprefix(SECRET_PREFIX)
        for form, spelled in zip(("whole", "without its prefix"), json_escaped(secret), strict=True):
            watched[f"secret {number} JSON-escaped, {form}"] = spelled
            watched[f"secret {number} JSON-escaped, {form}, in a JSON string"] = json.dumps(spelled)[1:-1]
    for number, value in enumerate(set(sealed), 1):
        watched[f"sealed secret {number}"] = value
    assert len(handed) == 5 and len(set(handed)) == 5
    assert sealed and read > 100
    assert "unreadable" in log_lines.getvalue()  # the restart's lines were written, and read here
    # The echoes reached the attempt log, redacted: what the listings show was read.
    assert any("[secret]" in text for _, text in seen.shown)
    assert seen.leaks(watched) == []
