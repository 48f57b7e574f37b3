"""Write service.conf from service.conf.template, the addresses taken from the environment.

    LISTEN=80 UPSTREAM_1=127.0.0.1:8000 UPSTREAM_2=127.0.0.1:8002 python deploy/nginx/render.py DIR

The same as ``envsubst '${LISTEN} ${UPSTREAM_1} ${UPSTREAM_2}'``, for machines without gettext. With
``--cluster`` it also writes the rehearsal's main configuration (cluster.conf) as DIR/nginx.conf, for
``nginx -p DIR -c nginx.conf``. Only these three names are replaced; nginx's own ``$variables`` stay.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from string import Template

HERE = Path(__file__).resolve().parent
PLACEHOLDERS = ("LISTEN", "UPSTREAM_1", "UPSTREAM_2")


def render(out: Path, values: dict[str, str], *, cluster: bool = False) -> Path:
    """Write DIR/service.conf (and DIR/nginx.conf with ``cluster``); the main file's path."""
    missing = [name for name in PLACEHOLDERS if not values.get(name)]
    if missing:
        raise ValueError(f"set {', '.join(missing)} (the address nginx listens on and the two servers')")
    text = Template((HERE / "service.conf.template").read_text()).safe_substitute(
        {name: values[name] for name in PLACEHOLDERS}
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
