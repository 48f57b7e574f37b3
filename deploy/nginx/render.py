"""Write service.conf from service.conf.template, the host name and addresses taken from the environment.

    SERVER_NAME=waitlist.example.com LISTEN=80 UPSTREAM_1=127.0.0.1:8000 UPSTREAM_2=127.0.0.1:8002 \\
        python deploy/nginx/render.py DIR

The same as ``envsubst '${SERVER_NAME} ${LISTEN} ${UPSTREAM_1} ${UPSTREAM_2}'``, for machines without
gettext. Only these four names are replaced; nginx's own ``$variables`` stay. Each is required: a missing
one is named and nothing is written.

With ``--cluster`` it also writes the rehearsal's main configuration (cluster.conf) as DIR/nginx.conf, for
``nginx -p DIR -c nginx.conf``; the rehearsal runs on loopback, so there SERVER_NAME defaults to
``127.0.0.1 localhost`` (deploy/Procfile sets the addresses only).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from string import Template

HERE = Path(__file__).resolve().parent
# Each placeholder and what it holds, as the error for a missing one says.
PLACEHOLDERS = {
    "SERVER_NAME": "the public host name(s), the canonical one first",
    "LISTEN": "the address nginx listens on",
    "UPSTREAM_1": "the first server's address",
    "UPSTREAM_2": "the second server's address",
}
CLUSTER_SERVER_NAME = "127.0.0.1 localhost"


def render(out: Path, values: dict[str, str], *, cluster: bool = False) -> Path:
    """Write DIR/service.conf (and DIR/nginx.conf with ``cluster``); the main file's path."""
    if cluster and not values.get("SERVER_NAME"):
        values = {**values, "SERVER_NAME": CLUSTER_SERVER_NAME}
    missing = [name for name in PLACEHOLDERS if not (values.get(name) or "").strip()]
    if missing:
        raise ValueError("set " + "; ".join(f"{name} ({PLACEHOLDERS[name]})" for name in missing))
    text = Template((HERE / "service.conf.template").read_text()).safe_substitute(
        {name: values[name].strip() for name in PLACEHOLDERS}
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "service.conf").write_text(text)
    if cluster:
        (out / "nginx.conf").write_text((HERE / "cluster.conf").read_text())
        return out / "nginx.conf"
    return out / "service.conf"


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: python deploy/nginx/render.py DIR [--cluster]", file=sys.stderr)
        return 2
    try:
        render(Path(argv[0]), dict(os.environ), cluster="--cluster" in argv[1:])
    except ValueError as error:
        print(f"render.py: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
