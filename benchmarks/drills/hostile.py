"""Drill 3, hostile input: schemathesis against the running server's own OpenAPI document.

Schemathesis (its Python API: ``schemathesis.openapi.from_url`` and the engine its CLI runs) reads
``/api/v1/openapi.json`` and runs every phase (examples, coverage, fuzzing, stateful) with every
check, positive and negative data, seeded, against a real ``serve`` on loopback: once over every
operation, then again, with many more examples, over ``POST /api/waitlist`` alone (the one
operation that takes a body). The server's rate limit is high, so answers are real answers rather
than 429. A second, throttled server (a low ``SERVICE_WAITLIST_RATE_LIMIT``) gets a short run on
``POST /api/waitlist`` where most answers are 429: each must match the documented 429 (error
shape, ``Retry-After``).

What must hold: no 5xx at all, and no check failure, except one kind that is known and counted
apart: an address that JSON Schema's ``format: email`` allows but the service's validator
(email-validator, docs/architecture.md "Waitlist intake") refuses, such as a special-use domain
(``.test``, ``.invalid``, ``.local``). Those are 400 ``invalid_email``, as the OpenAPI document
says; they are counted only when the answer names the email field alone and email-validator itself
refuses the address. Anything else is reported with schemathesis' reproduction (a curl command).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.drills.children import Children
from benchmarks.drills.report import Report
from tests.processes import free_port

DRILL = "hostile input"
THROTTLED_LIMIT = "10/minute"  # the throttled server: most of its short run must be 429
REQUEST_TIMEOUT = 10  # seconds per schemathesis request
WAITLIST = "/api/waitlist"


@dataclass(frozen=True)
class Plan:
    max_examples: int = 100  # per operation and phase, over every operation
    waitlist_examples: int = 1500  # per phase, over POST /api/waitlist alone
    throttled_examples: int = 60
    seed: int = 3


FULL = Plan()
SHORT = Plan(max_examples=10, waitlist_examples=40, throttled_examples=15)


@dataclass
class Tally:
    """What one schemathesis run saw."""

    cases: int = 0
    phases: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # reproductions of real failures
    failure_kinds: Counter[str] = field(default_factory=Counter)
    stricter_email: int = 0
    stricter_email_example: str = ""
    failed_preconditions: int = 0  # 412 to an If-Match naming another version: the answer, no refusal
    bad_retry_after: int = 0  # 429 answers without a Retry-After of whole seconds >= 1
    errors: list[str] = field(default_factory=list)  # the engine's own errors (schema, network)
    stop_reason: str = ""


def _refused_by_email_validator(address: object) -> bool:
    from email_validator import EmailNotValidError, validate_email

    if not isinstance(address, str):
        return False
    try:
        validate_email(address.strip(), check_deliverability=False)  # as service.waitlist does
    except EmailNotValidError:
        return True
    return False


def _retry_after_ok(headers: Any) -> bool:
    # The OpenAPI document describes Retry-After but does not mark it required, so schemathesis
    # would not notice it missing; README: "429 carries Retry-After in seconds".
    values = [value for name, value in headers.items() if name.lower() == "retry-after"]
    value = values[0] if values else None
    value = value[0] if isinstance(value, list) else value
    return isinstance(value, str) and value.isascii() and value.isdigit() and int(value) >= 1


def _is_stricter_email(check: str, case: Any, response: Any) -> bool:
    """A schema-valid address refused as invalid_email, and refused by email-validator too."""
    if check != "positive_data_acceptance" or response is None or response.status_code != 400:
        return False
    try:
        errors = json.loads(response.content)["errors"]
    except (ValueError, KeyError, TypeError):
        return False
    only_email = [(error.get("field"), error.get("code")) for error in errors] == [("email", "invalid_email")]
    body = case.body if isinstance(case.body, dict) else {}
    return only_email and _refused_by_email_validator(body.get("email"))


def _is_failed_precondition(check: str, case: Any, response: Any) -> bool:
    """A document asked for with an If-Match naming none of its ETags, answered 412 as RFC 9110
    says: a schema-valid header whose condition is false, not data refused."""
    if check != "positive_data_acceptance" or response is None or response.status_code != 412:
        return False
    return any(name.lower() == "if-match" for name in (case.headers or {}))


def _tally(schema: Any) -> Tally:
    from schemathesis.engine import events, from_schema

    tally = Tally()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            tally.cases += len(recorder.cases)
            tally.phases[event.phase.name.lower()] += len(recorder.cases)
            for interaction in recorder.interactions.values():
                if interaction.response is not None:
                    tally.statuses[interaction.response.status_code] += 1
                    if interaction.response.status_code == 429:
                        tally.bad_retry_after += not _retry_after_ok(interaction.response.headers)
            for case_id, checks in recorder.checks.items():
                for check in checks:
                    if check.failure_info is None:
                        continue
                    failure = check.failure_info.failure
                    failing_id = failure.case_id or case_id
                    case = recorder.cases[failing_id].value
                    answered = recorder.interactions.get(failing_id)
                    response = answered.response if answered is not None else None
                    if _is_failed_precondition(check.name, case, response):
                        tally.failed_preconditions += 1
                        continue
                    if _is_stricter_email(check.name, case, response):
                        tally.stricter_email += 1
                        tally.stricter_email_example = (
                            tally.stricter_email_example or check.failure_info.code_sample
                        )
                        continue
                    tally.failure_kinds[f"{check.name}: {failure.title}"] += 1
                    answer = (
                        f"{response.status_code} {response.content[:300].decode(errors='replace')}"
                        if response is not None
                        else "no answer"
                    )
                    tally.failures.append(
                        f"{recorder.label} [{event.phase.name.lower()}] {check.name}: {failure.title}\n"
                        f"  answered {answer}\n  {check.failure_info.code_sample}"
                    )
        elif isinstance(event, events.NonFatalError | events.FatalError):
            tally.errors.append(str(getattr(event, "value", None) or getattr(event, "exception", event)))
        elif isinstance(event, events.EngineFinished):
            tally.stop_reason = str(event.stop_reason.value)
    return tally


def _config(max_examples: int, seed: int) -> Any:
    import schemathesis

    return schemathesis.Config.from_dict(
        {
            "seed": seed,
            "continue-on-failure": True,  # count every failure, not only the first per operation
            "request-timeout": REQUEST_TIMEOUT,
            "checks": {"enabled": True},  # every check schemathesis has
            "generation": {"mode": "all", "max-examples": max_examples, "database": "none"},
            "cache": {"enabled": False},  # no replay of earlier runs' failures: the seed decides
        }
    )


def run(workdir: Path, plan: Plan) -> Report:
    import schemathesis

    report = Report(DRILL, f"schemathesis {schemathesis.__version__}")
    ports = {"open": free_port(), "throttled": free_port()}
    with Children(workdir / "logs-hostile") as children:
        servers = {}
        for name, port in ports.items():
            settings = {
                "SERVICE_DATABASE_URL": f"sqlite:///{workdir / f'hostile-{name}.db'}",
                "SERVICE_BASE_URL": f"http://127.0.0.1:{port}",
                "SERVICE_WAITLIST_RATE_LIMIT": "1000000/minute" if name == "open" else THROTTLED_LIMIT,
            }
            servers[name] = children.start_server(name, port, settings, "--no-worker")
        for name, port in ports.items():
            children.wait_server(port, servers[name])

        def load(name: str, max_examples: int) -> Any:
            url = f"http://127.0.0.1:{ports[name]}/api/v1/openapi.json"
            return schemathesis.openapi.from_url(url, config=_config(max_examples, plan.seed))

        runs = {
            "every operation": _tally(load("open", plan.max_examples)),
            "POST /api/waitlist": _tally(
                load("open", plan.waitlist_examples).include(path=WAITLIST, method="POST")
            ),
        }
        throttled = _tally(load("throttled", plan.throttled_examples).include(path=WAITLIST, method="POST"))
        for server in servers.values():
            children.stop(server)

    every = [*runs.values(), throttled]
    cases = sum(tally.cases for tally in runs.values())
    statuses = sum((tally.statuses for tally in runs.values()), Counter())
    failures = [failure for tally in runs.values() for failure in tally.failures]
    kinds = sum((tally.failure_kinds for tally in runs.values()), Counter())
    server_errors = sum(n for tally in every for status, n in tally.statuses.items() if status >= 500)
    stricter = [tally.stricter_email_example for tally in every if tally.stricter_email_example]
    for name, tally in runs.items():
        report.numbers[f"cases, {name}"] = f"{tally.cases} {dict(sorted(tally.phases.items()))}"
    report.numbers.update(
        {
            "cases": cases,
            "answers by status": dict(sorted(statuses.items())),
            "5xx answers": server_errors,
            "check failures": sum(kinds.values()),
            "schema-valid emails refused as invalid_email (known)": sum(t.stricter_email for t in every),
            "If-Match naming another version, answered 412": sum(t.failed_preconditions for t in every),
            "throttled run: cases on POST /api/waitlist": throttled.cases,
            "throttled run: answers by status": dict(sorted(throttled.statuses.items())),
            "throttled run: check failures": sum(throttled.failure_kinds.values()),
        }
    )
    if stricter:
        report.numbers["known: stricter email rule, e.g."] = stricter[0]
    errors = [error for tally in every for error in tally.errors]
    report.check(
        not errors and all(tally.stop_reason == "completed" for tally in every),
        f"schemathesis loaded the document and completed {len(every)} runs",
        f"schemathesis stopped ({[tally.stop_reason for tally in every]}) or errored: {errors[:3]}",
    )
    report.check(
        server_errors == 0,
        f"no 5xx in {cases + throttled.cases} hostile requests",
        f"{server_errors} answers were 5xx",
    )
    report.check(
        not failures,
        f"all {cases} cases pass every schemathesis check (answers match the OpenAPI document)",
        f"{len(failures)} check failures {dict(kinds)}; first:\n" + "\n".join(failures[:5]),
    )
    bad_retry_after = sum(tally.bad_retry_after for tally in every)
    report.check(
        throttled.statuses[429] > 0 and not throttled.failures and not bad_retry_after,
        f"{throttled.statuses[429]} answers 429 all match the documented 429 (error shape, Retry-After)",
        f"throttled run: {throttled.statuses[429]} answers 429, {bad_retry_after} without a Retry-After "
        f"in seconds, failures {throttled.failures[:3]}",
    )
    return report.finish()
