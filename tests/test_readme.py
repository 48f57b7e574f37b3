"""The README's partner guide: its verifier reaches every verdict of the published test vectors and
accepts real deliveries, and it is the verifier notebook 02 runs."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from webhook_helpers import AUTH, Receiver, drain, onboard, publish, room_claimed, settings

from service.discovery.vectors import vectors_document
from service.webhooks.signing import STANDARD_LIBRARIES

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "README.md").read_text().split("## Partner guide", 1)[1].split("\n## ", 1)[0]
NOTEBOOK = ROOT / "notebooks" / "02-verifying-signatures.ipynb"
VECTORS = vectors_document("https://rooms.example")

Verifier = Callable[..., bool]


def _snippet() -> str:
    """The first fenced Python block of the partner guide."""
    found = re.search(r"```python\n(.*?)```", GUIDE, re.S)
    assert found is not None, "the partner guide has no Python block"
    return found.group(1)


def _verifiers() -> dict[str, Verifier]:
    namespace: dict[str, Any] = {}
    exec(compile(_snippet(), "README.md", "exec"), namespace)  # noqa: S102 - our own README
    return {"x-service-signature": namespace["verify"], "webhook-signature": namespace["verify_standard"]}


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[case["id"] for case in VECTORS["cases"]])
def test_the_readme_verifier_reaches_every_test_vector_verdict(case: dict[str, Any]) -> None:
    """Run as partners copy it, at the vectors' now: each scheme accepts or refuses as expected."""
    verdicts = {
        scheme: check(case["headers"], case["body"].encode(), case["secrets"], now=VECTORS["now"])
        for scheme, check in _verifiers().items()
    }
    assert verdicts == {scheme: expected["accept"] for scheme, expected in case["expected"].items()}


@pytest.mark.parametrize("digits", [13, 5_000])
def test_the_readme_verifier_refuses_a_hostile_timestamp_without_an_error(digits: int) -> None:
    """A timestamp of thousands of digits is refused like any stale one, by both schemes: int()
    refuses more than 4,300 digits with an error, which the verifier raised where the partner's
    endpoint wanted False."""
    [case] = [case for case in VECTORS["cases"] if all(e["accept"] for e in case["expected"].values())][:1]
    stamp = "1" * digits
    headers = {**case["headers"], "x-service-timestamp": stamp, "webhook-timestamp": stamp}
    for check in _verifiers().values():
        assert check(headers, case["body"].encode(), case["secrets"], now=VECTORS["now"]) is False


def test_the_readme_verifier_accepts_real_deliveries(make_client: Any, clock: Any) -> None:
    """A delivery before a rotation and one during its overlap, as the endpoint received them: both
    schemes accept with the secrets that signed them and refuse another secret or a changed body."""
    verifiers = _verifiers()
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed("first"))
        drain(client)
        clock.advance(60)
        new = client.post(f"/admin/partners/{partner['id']}/rotate-secret", headers=AUTH).json["secret"]
        publish(client, room_claimed("second"))
        drain(client)
        stranger = onboard(client, receiver.url())["secret"]
    first, second = receiver.requests
    now = clock().timestamp()
    for check in verifiers.values():
        assert check(first.headers, first.body, [partner["secret"]], now=now) is True
        assert check(first.headers, first.body, [new], now=now) is False  # it did not exist yet
        assert check(second.headers, second.body, [partner["secret"]], now=now) is True
        assert check(second.headers, second.body, [new], now=now) is True
        assert check(second.headers, second.body, [stranger], now=now) is False
        changed = second.body.replace(b'"second"', b'"third"')
        assert check(second.headers, changed, [new, partner["secret"]], now=now) is False
        assert check(second.headers, second.body, [new], now=now + 301) is False
        assert json.loads(second.body)["slug"] == "second"


def test_notebook_02_runs_the_readme_verifier() -> None:
    """The verifier cell of 02-verifying-signatures.ipynb is the README's code, character for character."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    sources = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    assert _snippet().rstrip("\n") in [source.rstrip("\n") for source in sources]


def test_the_readme_lists_the_libraries_the_catalog_names() -> None:
    """The partner guide's library table is the catalog's, language by language."""
    for language, package in STANDARD_LIBRARIES.items():
        name, registry = package.split(" (")
        assert f"| {language} | `{name}` ({registry} |" in GUIDE
