"""Re-run notebooks in place: ``python -m analytics.render notebooks`` (``make notebooks``).

Run it after changing anything a notebook shows (an analysis, an event model, the demo scenario,
what the service stores). The demo database is made afresh first (``python -m service.demo
--force``, in a child process: this package reads data, it never starts the service), so the
outputs come from exactly what a clean checkout generates; then each notebook runs top to bottom in
a new kernel, from its own folder, and its outputs are written back. Strict nbval (``make test``)
then holds every later run to them. Last, the partner pages are rendered from the notebooks into
the service package (``analytics.pages``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from analytics.pages import write_pages

DEMO_COMMAND = ("-m", "service.demo", "--force")  # writes var/demo.db and says how long it took
KERNEL = "python3"  # the kernel `make test` gives nbval (--nbval-kernel-name)
CELL_TIMEOUT = 600  # seconds; the first cell that needs the demo database may make it


def notebooks(paths: Iterable[Path]) -> list[Path]:
    """The notebooks named, folders expanded to the notebooks in them, in name order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(
                child for child in path.glob("*.ipynb") if ".ipynb_checkpoints" not in child.parts
            )
        elif path.suffix == ".ipynb":
            found.append(path)
        else:
            raise ValueError(f"{path} is neither a notebook nor a folder")
    return found


def render(path: Path, kernel: str = KERNEL) -> None:
    """Execute ``path`` in a fresh kernel with its folder as the working directory; save outputs."""
    notebook = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    client = NotebookClient(
        notebook,
        kernel_name=kernel,
        timeout=CELL_TIMEOUT,
        record_timing=False,  # per-cell timestamps would change the file on every run
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    client.execute()
    nbformat.write(notebook, path)  # type: ignore[no-untyped-call]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analytics.render", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="notebooks, or folders of them")
    parser.add_argument(
        "--keep-demo", action="store_true", help="use the demo database as it is, if it is current"
    )
    args = parser.parse_args(argv)
    targets = notebooks(args.paths)
    if not args.keep_demo:
        subprocess.run([sys.executable, *DEMO_COMMAND], check=True)  # noqa: S603 - our own module
    for path in targets:
        began = time.perf_counter()
        render(path)
        print(f"{path}: {time.perf_counter() - began:.1f} s")
    for page in write_pages():
        print(f"{page}: rendered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
