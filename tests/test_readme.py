"""The README's partner verification snippet works against the service's own signer."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from service.webhooks.signing import signature_headers

README = Path(__file__).resolve().parents[1] / "README.md"


def _snippet() -> str:
    guide = README.read_text().split("## Partner guide", 1)[1]
    return re.search(r"```python\n(.*?)```", guide, re.S).group(1)


@pytest.mark.parametrize(
    ("body", "secret", "age", "accepted"),
    [
        (b'{"eventId":"evt_1"}', "new", 0, True),
        (b'{"eventId":"evt_1"}', "old", 0, True),
        (b'{"eventId":"evt_2"}', "new", 0, False),
        (b'{"eventId":"evt_1"}', "wrong", 0, False),
        (b'{"eventId":"evt_1"}', "new", 301, False),
    ],
)
def test_readme_verifier(body, secret, age, accepted):
    """The documented verifier accepts genuine deliveries (both secrets in a rotation) and refuses the rest."""
    namespace: dict[str, object] = {}
    exec(compile(_snippet(), "README.md", "exec"), namespace)  # noqa: S102 - our own README
    headers = signature_headers(
        event="room.claimed",
        delivery_id="dlv_1",
        body=b'{"eventId":"evt_1"}',
        secrets=["new", "old"],
        timestamp=int(time.time()) - age,
    )
    assert namespace["verify"](headers, body, secret) is accepted
