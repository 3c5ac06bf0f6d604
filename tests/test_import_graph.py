"""The house has floors and no circle: the import graph of tracer/ (read from the source
with ast, every import statement, a function's own included, those under
``if TYPE_CHECKING:`` left out as they never run) has no cycle, no module imports one on
a higher floor, and no stage imports another stage's private names. Fast tier."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tracer"

#: Bottom first. A module may import its own floor and those below it, never one above:
#: the leaves (standard library only), the trace format and the registry, what runs in a
#: framework's environment (collect, probes), the pure processing stages and their
#: renderers, the environments, the runner, the engines that run probes or read files,
#: the command line. A module is on the floor of its longest listed prefix.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("tracer", "tracer.paths", "tracer.errors", "tracer.evidence_classes", "tracer.contract", "tracer.bounded",
     "tracer.machine"),
    ("tracer.files", "tracer.trace_meta", "tracer.data_file", "tracer.registry_entries"),
    ("tracer.trace", "tracer.gap", "tracer.registry", "tracer.libraries"),
    ("tracer.knowledge", "tracer.profile_reader", "tracer.probes"),
    ("tracer.collect",),
    ("tracer.processing",),
    ("tracer.analysis",),
    ("tracer.render",),
    ("tracer.envs", "tracer.fleet_credentials"),
    ("tracer.emulation", "tracer.env_add"),
    ("tracer.runner",),
    ("tracer.importers", "tracer.elf_code"),
    ("tracer.survey",),
    ("tracer.derive", "tracer.fleet", "tracer.fleet_routing", "tracer.scaffold", "tracer.workload_record"),
    ("tracer.pipeline",),
    ("tracer.cli",),
    ("tracer.__main__",),
)


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in PACKAGE.rglob("*.py") if "reference" not in p.relative_to(PACKAGE).parts}


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute)
                                                                      and t.attr == "TYPE_CHECKING")


def _imports(module: str) -> list[tuple[str, str, int, bool]]:
    """(module imported, name imported or "", line, in a function) of every import of a
    tracer module that runs."""
    path = MODULES[module]
    found: list[tuple[str, str, int, bool]] = []

    def resolve(base: str, name: str) -> str:
        full = f"{base}.{name}" if base else name
        target = full if full in MODULES else base
        while target not in MODULES and "." in target:
            target = target.rsplit(".", 1)[0]
        return target

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    visit_one(other, local)
                continue
            visit_one(child, local)

    def visit_one(child: ast.AST, local: bool) -> None:
        if isinstance(child, ast.Import):
            for alias in child.names:
                if alias.name.split(".")[0] == "tracer":
                    found.append((resolve(alias.name, ""), "", child.lineno, local))
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                package = package[:len(package) - child.level + 1]
                base = ".".join(package + ([child.module] if child.module else []))
            if base.split(".")[0] == "tracer":
                for alias in child.names:
                    found.append((resolve(base, alias.name), alias.name, child.lineno, local))
        else:
            visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text()), False)
    return found


IMPORTS = {m: _imports(m) for m in MODULES}


def _graph() -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(MODULES)
    for module, found in IMPORTS.items():
        g.add_edges_from((module, target) for target, _, _, _ in found if target != module)
    return g


def floor(module: str) -> int:
    best = max((p for fl in FLOORS for p in fl if module == p or module.startswith(p + ".")), key=len, default=None)
    assert best is not None, f"{module} is on no floor: add it to FLOORS"
    return next(i for i, fl in enumerate(FLOORS) if best in fl)


def stage(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_the_graph_is_read() -> None:
    """The reader finds what is there: a known edge of each kind."""
    g = _graph()
    assert len(MODULES) > 80 and g.number_of_edges() > 300
    assert g.has_edge("tracer.runner", "tracer.paths") and g.has_edge("tracer.cli", "tracer.cli.tracing")
    assert g.has_edge("tracer.emulation.debian", "tracer.envs")  # from tracer import envs: a module, not a name


def test_no_circle() -> None:
    cycles = [sorted(c) for c in nx.strongly_connected_components(_graph()) if len(c) > 1]
    assert not cycles, f"import circles: {cycles}"


def test_no_import_from_a_lower_floor_to_a_higher_one() -> None:
    upward = [f"{a} (floor {floor(a)}) imports {b} (floor {floor(b)})"
              for a, b in _graph().edges if floor(b) > floor(a)]
    assert not upward, "\n".join(upward)


def test_no_stage_imports_another_stages_private_names() -> None:
    reaching = [f"{m}:{line} imports {name} from {target}" for m, found in IMPORTS.items()
                for target, name, line, _ in found
                if name.startswith("_") and not name.startswith("__") and stage(target) != stage(m)]
    assert not reaching, "\n".join(reaching)


#: Function-local imports of the tool's own modules that remain, each with why: an
#: optional part (the C core may not build), or a module owned by another lane whose
#: owner moves it (see the issue). A new one fails this test.
LOCAL_ALLOWED = {
    ("tracer.collect.collector", "tracer.collect.ctracer"): "optional: the C core may be missing or not build",
    ("tracer.importers", "tracer.bounded"): "importers' owner",
    ("tracer.importers", "tracer.registry"): "importers' owner",
    ("tracer.importers.env_reader", "tracer.envs"): "importers' owner",
    ("tracer.importers.env_reader", "tracer.registry"): "importers' owner",
    ("tracer.importers.env_reader", "tracer.paths"): "importers' owner",
    ("tracer.importers.op_timeline", "tracer.registry"): "importers' owner",
    ("tracer.importers.source", "tracer.importers"): "importers' owner",
    ("tracer.probes.torch", "tracer.probes.torch_standin"): "probes' owner",
    ("tracer.probes.torch", "tracer.probes.torch_compiled"): "probes' owner",
    ("tracer.probes.torch", "tracer.probes.torch_op_hooks"): "probes' owner",
    ("tracer.probes.torch_standin", "tracer.probes.base"): "probes' owner",
    ("tracer.analysis.backend_needs", "tracer.processing.pairs"): "process' owner",
}


def test_function_local_imports_are_the_listed_ones() -> None:
    local = {(m, target) for m, found in IMPORTS.items() for target, _, _, inside in found if inside}
    assert local <= set(LOCAL_ALLOWED), sorted(local - set(LOCAL_ALLOWED))


@pytest.mark.parametrize("module", ["tracer.paths", "tracer.contract", "tracer.errors", "tracer.evidence_classes"])
def test_leaves_import_nothing_of_the_tool(module: str) -> None:
    assert not IMPORTS[module], IMPORTS[module]


def test_no_circle_between_stages() -> None:
    """Stages (tracer/X/ or tracer/X.py) import each other one way: a module circle is
    one failure, a stage circle (collect ran probes, whose skeleton checks ran collect's
    case maker) is the same knot one size up."""
    g = nx.DiGraph()
    for module, found in IMPORTS.items():
        g.add_edges_from((stage(module), stage(target)) for target, _, _, _ in found
                         if stage(target) != stage(module) and stage(target) != "tracer")
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert not cycles, f"stage circles: {cycles}"


@pytest.mark.parametrize("reader", ["tracer.render", "tracer.cli"])
def test_no_renderer_or_command_imports_an_analysis_function(reader: str) -> None:
    """Renderers read the survey model (its types, its constants) and compute nothing, and
    the command line parses and calls tracer.pipeline: a function of tracer.analysis
    imported into either is a figure computed twice (the audit once did its own)."""
    import importlib
    import inspect

    computing = [f"{m}:{line} imports {name} from {target}" for m, found in IMPORTS.items()
                 if stage(m) == reader for target, name, line, _ in found
                 if stage(target) == "tracer.analysis" and name
                 and inspect.isfunction(getattr(importlib.import_module(target), name, None))]
    assert not computing, "\n".join(computing)
