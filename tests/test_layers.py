"""Imports run down the floors of the delivery core and of the service around it, and no module or
package of the service imports itself back through others."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[1] / "service"
# The delivery core, lowest floor first: a module may import from its own floor or lower ones.
FLOORS = (
    ("service.webhooks.pacing", "service.webhooks.lanes", "service.states"),
    (
        "service.webhooks.retry",
        "service.webhooks.breaker",
        "service.webhooks.signing",
        "service.webhooks.ssrf",
        "service.webhooks.send",
        "service.webhooks.batching",
        "service.webhooks.notify",
        "service.webhooks.partners",
        "service.webhooks.outbox",
        "service.webhooks.listing",
        "service.webhooks.presenter",
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


def _graph(*, anywhere: bool) -> dict[str, set[str]]:
    return {name: _imports(path, anywhere=anywhere) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for imported in sorted(graph.get(name, ())):
            if state.get(imported) == 1:
                cycles.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def _package(name: str) -> str:
    """``service.webhooks.claim`` -> ``service.webhooks``; ``service.admin`` stays itself."""
    return ".".join(name.split(".")[:2])


# The ground floor of the whole service: the words of the states, the metrics, the settings and
# the schema. Nothing here may reach the delivery core, the documents, the console or the entry points.
GROUND = ("service.states", "service.metrics", "service.settings", "service.db.tables")
ABOVE_GROUND = ("service.webhooks", "service.discovery", "service.console", "service.app", "service.cli")


@pytest.mark.parametrize("module", GROUND)
def test_the_ground_floor_imports_nothing_above_it(module: str) -> None:
    """States, metrics, settings and the schema import nothing of the webhooks, documents or
    entry points, even inside a function or for type checking."""
    imported = _imports(MODULES[module], anywhere=True)
    assert not {name for name in imported if name.startswith(ABOVE_GROUND)}


def test_the_states_import_nothing_of_the_service() -> None:
    """The vocabulary of states stands on the ground: every floor may read it."""
    assert _imports(MODULES["service.states"], anywhere=True) == set()


def test_the_webhooks_import_nothing_of_the_documents() -> None:
    """The catalog and the test vectors live with the discovery documents, above the webhooks:
    no webhooks module imports them back."""
    for name, path in MODULES.items():
        if name.startswith("service.webhooks"):
            assert not {m for m in _imports(path, anywhere=True) if m.startswith("service.discovery")}, name


def test_no_module_imports_itself_back_even_inside_a_function() -> None:
    """Counting imports inside functions too, the service's modules have no cycle."""
    assert _cycles(_graph(anywhere=True)) == []


def test_no_package_of_the_service_imports_itself_back() -> None:
    """The service's packages and top-level modules (``service.webhooks``, ``service.discovery``,
    ``service.admin``, ...) import one another without a cycle, inside functions too."""
    packages: dict[str, set[str]] = {}
    for name, imported in _graph(anywhere=True).items():
        packages.setdefault(_package(name), set()).update(
            _package(other) for other in imported if _package(other) != _package(name)
        )
    assert _cycles(packages) == []


def _assigned_names(path: Path) -> dict[str, str]:
    """Module-level ``NAME = Enum.MEMBER`` assignments in ``path``: alias -> ``Enum.MEMBER``."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute):
            owner = node.value.value
            if isinstance(owner, ast.Name) and owner.id in {
                "DeliveryStatus",
                "PartnerStatus",
                "AttemptOutcome",
            }:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = f"{owner.id}.{node.value.attr}"
    return found


def test_states_have_no_aliases() -> None:
    """A delivery or partner state is named by its enum member everywhere, never redeclared."""
    aliases = {name: _assigned_names(path) for name, path in MODULES.items()}
    assert {name: found for name, found in aliases.items() if found} == {}


def test_plaintext_secrets_are_sealed_only_through_the_wiring() -> None:
    """Only ``service.webhooks.wiring`` calls ``seal_plaintext``: every start and ``migrate`` go through it."""
    callers = set()
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = node.func
                named = called.id if isinstance(called, ast.Name) else getattr(called, "attr", None)
                if named == "seal_plaintext":
                    callers.add(name)
    assert callers == {"service.webhooks.wiring"}
