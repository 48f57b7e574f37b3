"""Imports run down the floors of the delivery core, and no module of the service imports itself
back through others."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[1] / "service"
# The delivery core, lowest floor first: a module may import from its own floor or lower ones.
FLOORS = (
    ("service.webhooks.pacing",),
    (
        "service.states",
        "service.webhooks.retry",
        "service.webhooks.breaker",
        "service.webhooks.signing",
        "service.webhooks.ssrf",
        "service.webhooks.sender",
        "service.webhooks.batching",
        "service.webhooks.notify",
        "service.webhooks.partners",
        "service.webhooks.outbox",
        "service.webhooks.claim",
        "service.webhooks.settle",
        "service.webhooks.recorder",
        "service.webhooks.retention",
    ),
    ("service.webhooks.worker",),
    ("service.webhooks.wiring",),
    ("service.webhooks.operations", "service.webhooks.runtime", "service.webhooks.cli"),
)
FLOOR = {module: number for number, floor in enumerate(FLOORS) for module in floor}


def _modules() -> dict[str, Path]:
    found = {}
    for path in SERVICE.rglob("*.py"):
        parts = path.relative_to(SERVICE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(path: Path, *, anywhere: bool) -> set[str]:
    """The service modules ``path`` imports: at its top level (outside ``if TYPE_CHECKING``), or
    ``anywhere`` (inside functions too)."""
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree) if anywhere else iter(tree.body)
    named: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                named.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
    return {name for name in named if name in MODULES}


@pytest.mark.parametrize("module", sorted(FLOOR))
def test_the_delivery_core_imports_only_downward(module: str) -> None:
    """No module of the delivery core imports one on a higher floor, even inside a function."""
    upward = {
        name for name in _imports(MODULES[module], anywhere=True) if FLOOR.get(name, -1) > FLOOR[module]
    }
    assert not upward


def test_the_pacing_decision_imports_nothing_of_the_service() -> None:
    """When to claim and when to log is a pure function: it stands on the ground."""
    assert _imports(MODULES["service.webhooks.pacing"], anywhere=True) == set()


def test_no_module_imports_itself_back() -> None:
    """The service's top-level imports have no cycle."""
    graph = {name: _imports(path, anywhere=False) for name, path in MODULES.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for imported in sorted(graph[name]):
            if state.get(imported) == 1:
                cycles.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_settings_stand_on_the_ground() -> None:
    """The settings (and the default retry schedule in them) import nothing of the webhooks."""
    imported = _imports(MODULES["service.settings"], anywhere=True)
    assert not {name for name in imported if name.startswith("service.webhooks")}
