"""The layers of the code, checked from its import statements (every
``import`` in a module, function-level ones included, read with ``ast``):
no import circle anywhere, and each layer imports only layers below it.

    learners/   schemas/          the algorithms; the wire format (side by side, neither imports the other)
    pipelines/kafka, files        Kafka without Beam; data files read into learner rows (neither imports the other)
    pipelines/records, state      conversions of records; durable learner state
    pipelines/beam_io, config     Beam adapters over kafka/; the one run configuration
    pipelines/steps               Beam steps both pipeline shapes share
    pipelines/exact, sharded      the two pipeline shapes (neither imports the other)
    pipelines/launch              runs a configured pipeline
    pipelines/bench               benchmarks
    pipelines/cli                 the command line
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("learners", "schemas", "pipelines")

RANK = {
    "pipelines.provision": 0,
    "pipelines.kafka": 1,
    "pipelines.files": 1,
    "pipelines.telemetry": 1,
    "pipelines.records": 2,
    "pipelines.state": 2,
    "pipelines.beam_io": 3,
    "pipelines.config": 3,
    "pipelines.runners": 3,
    "pipelines.steps": 4,
    "pipelines.exact": 5,
    "pipelines.sharded": 5,
    "pipelines.launch": 6,
    "pipelines.bench": 7,
    "pipelines.cli": 8,
}


def modules() -> dict[str, str]:
    """Module name -> file, for every module of the three packages."""
    out = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    out[".".join(parts)] = path
    return out


def imports_of(module: str, path: str) -> set[str]:
    """Every module name ``path`` imports (absolute; relative ones resolved)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    is_package = path.endswith("__init__.py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + is_package]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return found


MODULES = modules()


def _is_ancestor(package: str, module: str) -> bool:
    """A package is always initialised before its modules: importing it
    from one of them (``from . import x``) cannot close a circle."""
    return module.startswith(package + ".")


GRAPH = {m: {i for i in imports_of(m, p) if i in MODULES and i != m and not _is_ancestor(i, m)}
         for m, p in MODULES.items()}
EXTERNAL = {m: imports_of(m, p) for m, p in MODULES.items()}


def layer(module: str) -> str | None:
    for name in sorted(RANK, key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return name
    return None


def test_the_walk_sees_every_package():
    assert {"learners.model", "schemas.codec", "pipelines.kafka.consumer", "pipelines.cli.main"} <= set(MODULES)
    assert "pipelines.kafka.admin" in GRAPH["pipelines.records.topics"]
    assert "pipelines.files.vw_text" in GRAPH["pipelines.records.events"]


def test_no_import_circle():
    index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert circles == []


def _uses(module: str, prefixes: tuple[str, ...]) -> set[str]:
    return {i for i in EXTERNAL[module] if any(i == p or i.startswith(p + ".") for p in prefixes)}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("schemas")))
def test_schemas_import_no_learners_numba_beam_or_pipelines(module):
    assert _uses(module, ("learners", "numba", "apache_beam", "pipelines")) == set()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("learners")))
def test_learners_import_no_beam_kafka_or_pipelines(module):
    assert _uses(module, ("apache_beam", "confluent_kafka", "pipelines", "schemas")) == set()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("pipelines.kafka")))
def test_kafka_layer_imports_no_beam(module):
    assert _uses(module, ("apache_beam",)) == set()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer(m)))
def test_each_layer_imports_only_layers_below(module):
    mine = RANK[layer(module)]
    upward = {i for i in GRAPH[module] if layer(i) and layer(i) != layer(module) and RANK[layer(i)] >= mine}
    assert upward == set(), f"{module} ({layer(module)}) imports {sorted(upward)}"


def test_every_pipelines_module_has_a_layer():
    top = {m for m in MODULES if m.startswith("pipelines.")}
    assert {m for m in top if layer(m) is None} == set()
