"""The package's layering, read from the source with ``ast`` (nothing is imported, so this is fast).

Every ``.py`` under ``disentangle/`` is parsed and its imports (module level and inside functions) are resolved to
absolute module names: relative imports against the importing module's package, and ``from pkg import name`` to
the submodule ``pkg.name`` when that is a module of the package. The rules:

* no private name (``_x``, not a dunder) is imported from another module, nor read as ``module._x`` off an
  imported module;
* lower layers do not import higher ones (see ``FORBIDDEN``), and every import between two rooms of the house runs to
  a lower floor (``FLOORS``, lowest first): ``errors`` and ``checks``; ``foundation`` (precision, schedules, devices,
  provenance: nothing of the package but errors and checks); ``metrics``, ``data``, ``nn``, ``published``;
  ``quantizers``; ``regularizers``; ``models``; ``callbacks``; ``runtime``; ``reporting``; ``bench``; the entry
  points (``ENTRY_POINTS``: the modules and packages behind ``python -m disentangle.X``). No library module imports
  the runtime, with no exception by name;
* no import cycle among the modules of one subpackage (``disentangle/data``, ``disentangle/runtime``, ...; the
  top-level modules of ``disentangle/`` count as one group);
* no module, config or sweep file names a module by the old name it had before it moved (``disentangle.MOVED``:
  those names are aliases for stored configs and users' scripts only).

Each failure names the file, the line and the import.
"""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "disentangle"

# what the commands are: nothing below them imports them
ENTRY_POINTS = ("disentangle.train", "disentangle.evaluate", "disentangle.report", "disentangle.select",
                "disentangle.prepare", "disentangle.chaos", "disentangle.bench", "disentangle.doctor",
                "disentangle.claims", "disentangle.gpu_check")
# the foundation the library stands on: each module imports nothing of the package but errors, checks and the
# package itself (test_the_foundation_imports_only_errors_and_checks)
FOUNDATION = "disentangle.foundation"
FOUNDATIONS = ("disentangle", "disentangle.errors", "disentangle.checks")
RUNTIME = "disentangle.runtime"
LIBRARY = ("disentangle.models", "disentangle.callbacks", "disentangle.regularizers", "disentangle.quantizers")

# importer prefix -> module prefixes it must not import (no exceptions by name)
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "disentangle.metrics": (*LIBRARY, RUNTIME, "disentangle.reporting", *ENTRY_POINTS),
    "disentangle.data": (*LIBRARY, RUNTIME, "disentangle.reporting", *ENTRY_POINTS),
    "disentangle.quantizers": ("disentangle.models", "disentangle.callbacks", RUNTIME, "disentangle.reporting",
                               *ENTRY_POINTS),
    "disentangle.regularizers": ("disentangle.models", "disentangle.callbacks", RUNTIME, "disentangle.reporting",
                                 *ENTRY_POINTS),
    "disentangle.nn": ("disentangle.models", "disentangle.callbacks", RUNTIME, "disentangle.reporting",
                       *ENTRY_POINTS),
    "disentangle.models": ("disentangle.callbacks", RUNTIME, "disentangle.reporting", *ENTRY_POINTS),
    "disentangle.callbacks": (RUNTIME, "disentangle.reporting", *ENTRY_POINTS),
    "disentangle.runtime": ("disentangle.reporting", *ENTRY_POINTS),
    "disentangle.reporting": ("disentangle.models", "disentangle.data", *ENTRY_POINTS),
    "disentangle.bench": ("disentangle.doctor",),  # the doctor times with the benchmarks' step, not the reverse
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@dataclass(frozen=True)
class Import:
    """One imported name: ``importer`` imports ``target`` (absolute) at ``line`` by ``text``."""

    importer: str
    line: int
    text: str
    target: str
    name: str | None  # the name taken from the module by ``from ... import name``; None for ``import x``

    def where(self) -> str:
        return f"{MODULES[self.importer].relative_to(ROOT)}:{self.line}: {self.text}"


def _base(importer: str, level: int, module: str | None) -> str:
    """Absolute name of the module named by ``from <level dots><module> import ...`` in ``importer``."""
    if level == 0:
        return module or ""
    package = importer.split(".")
    if MODULES[importer].name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - (level - 1)]
    return ".".join(package + ([module] if module else []))


def _parse(module: str) -> tuple[ast.Module, list[Import]]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))
    imports = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imports.append(Import(module, node.lineno, f"import {alias.name}", alias.name, None))
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, node.level, node.module)
            source = "." * node.level + (node.module or "")
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in MODULES else base
                imports.append(Import(module, node.lineno, f"from {source} import {alias.name}", target, alias.name))
    return tree, imports


PARSED: dict[str, tuple[ast.Module, list[Import]]] = {m: _parse(m) for m in MODULES}


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attribute reads on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _module_references(tree: ast.Module, imports: list[Import]) -> set[str]:
    """Names (and dotted chains) by which the file refers to imported modules."""
    refs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    refs.add(alias.asname)
                else:  # ``import a.b.c`` binds ``a``; a.b and a.b.c are modules too
                    parts = alias.name.split(".")
                    refs.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    for imp in imports:  # ``from pkg import sub`` where sub is one of our modules
        if imp.name is not None and imp.target in MODULES and imp.target.endswith(f".{imp.name}"):
            refs.add(imp.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.asname and alias.name in refs:
                    refs.add(alias.asname)
    return refs


def _report(title: str, problems: list[str]) -> str:
    return f"{title} ({len(problems)}):\n  " + "\n  ".join(problems)


# ----------------------------------------------------------------------------------------------------------------
# Private names
# ----------------------------------------------------------------------------------------------------------------
def test_no_private_name_is_imported_from_another_module():
    problems = [
        imp.where()
        for _, imports in PARSED.values()
        for imp in imports
        if imp.name is not None and _is_private(imp.name)
    ]
    if problems:
        pytest.fail(_report("private names imported from another module", problems), pytrace=False)


# the private names read off the standard library: a forked child runs the interpreter's exit steps itself, and
# neither threading's shutdown nor the atexit handlers have a public way to be run (disentangle.runtime.launch)
STDLIB_PRIVATE_ALLOWED = {("disentangle.runtime.launch", "atexit._run_exitfuncs"),
                          ("disentangle.runtime.launch", "threading._shutdown")}


def test_no_private_attribute_of_an_imported_module_is_read():
    problems = []
    for module, (tree, imports) in PARSED.items():
        refs = _module_references(tree, imports)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                owner = _dotted(node.value)
                if owner in refs and (module, f"{owner}.{node.attr}") not in STDLIB_PRIVATE_ALLOWED:
                    problems.append(f"{MODULES[module].relative_to(ROOT)}:{node.lineno}: {owner}.{node.attr}")
    if problems:
        pytest.fail(_report("private attributes read off imported modules", problems), pytrace=False)


# ----------------------------------------------------------------------------------------------------------------
# Layers
# ----------------------------------------------------------------------------------------------------------------
def _forbidden_imports(importers: tuple[str, ...]) -> list[str]:
    problems = []
    for prefix in importers:
        banned = FORBIDDEN[prefix]
        for module, (_, imports) in PARSED.items():
            if not _within(module, prefix):
                continue
            for imp in imports:
                hit = next((b for b in banned if _within(imp.target, b)), None)
                if hit is not None:
                    problems.append(f"{imp.where()}  ({prefix} must not import {hit})")
    return problems


def test_metrics_and_data_import_no_models_callbacks_regularizers_or_quantizers():
    problems = _forbidden_imports(("disentangle.metrics", "disentangle.data"))
    if problems:
        pytest.fail(_report("metrics/data import a higher layer", problems), pytrace=False)


def test_quantizers_regularizers_and_nn_import_no_models_callbacks_or_runtime():
    problems = _forbidden_imports(("disentangle.quantizers", "disentangle.regularizers", "disentangle.nn"))
    if problems:
        pytest.fail(_report("quantizers/regularizers/nn import models, callbacks or the runtime", problems),
                    pytrace=False)


def test_models_import_no_callbacks_or_runtime():
    problems = _forbidden_imports(("disentangle.models",))
    if problems:
        pytest.fail(_report("models import callbacks or the runtime", problems), pytrace=False)


def test_reporting_imports_no_models_data_or_entry_points():
    problems = _forbidden_imports(("disentangle.reporting",))
    if problems:
        pytest.fail(_report("reporting imports models, data or an entry point", problems), pytrace=False)


def test_callbacks_import_no_runtime():
    problems = _forbidden_imports(("disentangle.callbacks",))
    if problems:
        pytest.fail(_report("callbacks import the runtime or higher", problems), pytrace=False)


def test_the_runtime_imports_no_entry_point_nor_reporting():
    problems = _forbidden_imports(("disentangle.runtime",))
    if problems:
        pytest.fail(_report("the runtime imports an entry point or reporting", problems), pytrace=False)


def test_bench_imports_no_doctor():
    problems = _forbidden_imports(("disentangle.bench",))
    if problems:
        pytest.fail(_report("bench imports the doctor", problems), pytrace=False)


def test_the_foundation_imports_only_errors_and_checks():
    foundation = [m for m in MODULES if _within(m, FOUNDATION)]
    problems = [
        f"{imp.where()}  ({module} may import only {', '.join(FOUNDATIONS)})"
        for module in foundation
        for imp in PARSED[module][1]
        if _within(imp.target, PACKAGE) and imp.target not in FOUNDATIONS and not _within(imp.target, FOUNDATION)
    ]
    assert {f"{FOUNDATION}.{leaf}" for leaf in ("precision", "schedules", "devices", "provenance")} <= set(foundation)
    if problems:
        pytest.fail(_report("the foundation imports more than errors and checks", problems), pytrace=False)


# the house, lowest floor first: each room (a subpackage or a top-level module) on one floor
FLOORS: tuple[tuple[str, ...], ...] = (
    FOUNDATIONS,
    (FOUNDATION,),
    ("disentangle.metrics", "disentangle.data", "disentangle.nn", "disentangle.published"),
    ("disentangle.quantizers",),
    ("disentangle.regularizers",),
    ("disentangle.models",),
    ("disentangle.callbacks",),
    (RUNTIME,),
    ("disentangle.reporting",),
    ("disentangle.bench",),
    tuple(e for e in ENTRY_POINTS if e != "disentangle.bench"),
)


def _room(module: str) -> str | None:
    """The longest room name of ``FLOORS`` that ``module`` lies in."""
    rooms = [room for floor in FLOORS for room in floor if _within(module, room) and room != PACKAGE]
    if module == PACKAGE:
        return PACKAGE
    return max(rooms, key=len) if rooms else None


FLOOR_OF = {room: level for level, floor in enumerate(FLOORS) for room in floor}


def test_every_module_has_a_room_in_the_house():
    homeless = sorted(m for m in MODULES if _room(m) is None)
    assert not homeless, f"modules on no floor of FLOORS: {homeless}"


def test_every_import_between_rooms_runs_downhill():
    """The whole import graph read: an import from one room to another goes to a strictly lower floor."""
    problems = []
    for module, (_, imports) in PARSED.items():
        here = _room(module)
        for imp in imports:
            if imp.target not in MODULES:
                continue
            there = _room(imp.target)
            if there != here and FLOOR_OF[there] >= FLOOR_OF[here]:
                problems.append(f"{imp.where()}  ({here}, floor {FLOOR_OF[here]} -> {there}, floor {FLOOR_OF[there]})")
    if problems:
        pytest.fail(_report("imports that run up (or across) the house", problems), pytrace=False)


def test_no_library_module_imports_the_runtime():
    """The rule the foundation made possible, spelled out: below the runtime, nothing imports it."""
    below = [room for floor in FLOORS[: FLOOR_OF[RUNTIME]] for room in floor]
    problems = [imp.where() for module, (_, imports) in PARSED.items()
                if _room(module) in below for imp in imports if _within(imp.target, RUNTIME)]
    assert not problems, "library modules import the runtime:\n  " + "\n  ".join(problems)


def test_every_rule_names_real_modules():
    """A renamed package must not leave a rule that checks nothing."""
    names = [*FORBIDDEN, *(b for banned in FORBIDDEN.values() for b in banned), *ENTRY_POINTS,
             *(room for floor in FLOORS for room in floor)]
    missing = sorted({n for n in names if not any(_within(m, n) for m in MODULES)})
    assert not missing, f"rules name no module of the package: {missing}"


# ----------------------------------------------------------------------------------------------------------------
# Cycles within a subpackage
# ----------------------------------------------------------------------------------------------------------------
def _group(module: str) -> str:
    """``disentangle.<sub>`` for a module of a subpackage (nested packages included), else ``disentangle``."""
    parts = module.split(".")
    if len(parts) >= 2 and (ROOT / PACKAGE / parts[1]).is_dir():
        return ".".join(parts[:2])
    return PACKAGE


def _strongly_connected(nodes: list[str], edges: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's strongly connected components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
            components.append(sorted(component))

    for v in nodes:
        if v not in index:
            visit(v)
    return components


def _cycle_through(start: str, component: set[str], edges: dict[str, dict[str, Import]]) -> list[Import]:
    """The imports of one shortest cycle from ``start`` back to itself inside ``component`` (breadth first)."""
    previous: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w, imp in sorted(edges[v].items()):
                if w not in component or w in previous:
                    continue
                previous[w] = imp
                if w == start:
                    path = [imp]
                    while path[-1].importer != start:
                        path.append(previous[path[-1].importer])
                    return path[::-1]
                following.append(w)
        frontier = following
    return []


def test_no_import_cycle_within_a_subpackage():
    edges: dict[str, dict[str, Import]] = defaultdict(dict)
    for module, (_, imports) in PARSED.items():
        for imp in imports:
            if imp.target in MODULES and imp.target != module and _group(imp.target) == _group(module):
                edges[module].setdefault(imp.target, imp)  # the first import of a module stands for all
    problems = []
    for group in sorted({_group(m) for m in MODULES}):
        nodes = [m for m in MODULES if _group(m) == group]
        for component in _strongly_connected(nodes, edges):
            if len(component) > 1:
                path = _cycle_through(component[0], set(component), edges)
                problems.append(
                    f"{group}: cycle among {', '.join(component)}:\n    " + "\n    ".join(i.where() for i in path)
                )
    if problems:
        pytest.fail(_report("import cycles within a subpackage", problems), pytrace=False)


# ----------------------------------------------------------------------------------------------------------------
# Old names of moved modules
# ----------------------------------------------------------------------------------------------------------------
def _moved() -> dict[str, str]:
    """``disentangle.MOVED`` read from the source (old module name -> new)."""
    tree, _ = PARSED[PACKAGE]
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MOVED" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("disentangle/__init__.py defines no MOVED")


MOVED = _moved()
OLD_NAME = re.compile(r"\b(" + "|".join(re.escape(old) for old in sorted(MOVED, key=len, reverse=True))
                      + r")\b(?![\w])")


def test_moved_modules_are_gone_from_their_old_places_and_exist_at_their_new_ones():
    assert MOVED, "MOVED is empty"
    assert not [old for old in MOVED if old in MODULES], "a moved module is still at its old place"
    assert not [new for new in MOVED.values() if new not in MODULES], "a MOVED target is not a module"


def test_no_module_config_or_sweep_names_a_moved_module_by_its_old_name():
    problems = []
    for module, (tree, imports) in PARSED.items():
        for imp in imports:
            named = imp.target if imp.name is None else f"{imp.target}.{imp.name}"
            if any(_within(imp.target, old) or named == old for old in MOVED):
                problems.append(f"{imp.where()}  (moved: {MOVED.get(named) or named})")
        if module == PACKAGE:  # the MOVED table itself
            continue
        for node in ast.walk(tree):  # a _target_ or a command written in a string, a docstring's reference
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for match in OLD_NAME.finditer(node.value):
                    problems.append(f"{MODULES[module].relative_to(ROOT)}:{node.lineno}: '{match.group(1)}' "
                                    f"(now {MOVED[match.group(1)]})")
    for path in sorted([*(ROOT / "conf").rglob("*.yaml"), *(ROOT / "sweeps").rglob("*.yaml")]):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in OLD_NAME.finditer(line):
                problems.append(f"{path.relative_to(ROOT)}:{number}: '{match.group(1)}' (now {MOVED[match.group(1)]})")
    if problems:
        pytest.fail(_report("old names of moved modules", problems), pytrace=False)


# what code outside disentangle/models may not do to a model: read its latent module or probe its attributes; it asks
# the model's interface (latent_spec, updates_per_step, steps_per_period, ...) instead (issue 30 item 7)
MODEL_NAMES = {"model", "pl_module", "net", "lightning_module"}


def model_probes(path: Path) -> list[str]:
    """``X.latent`` and ``getattr(X, ...)``/``hasattr(X, ...)`` on a model variable (or ``self.model``) in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        target = None
        if isinstance(node, ast.Attribute) and node.attr == "latent":
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args:
            target = node.args[0]
        if isinstance(target, ast.Name) and target.id in MODEL_NAMES or (
                isinstance(target, ast.Attribute) and target.attr == "model"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_outside_models_probes_a_models_latent_module_or_attributes():
    probes = [probe for path in sorted((ROOT / PACKAGE).rglob("*.py")) if "models" not in path.parts
              for probe in model_probes(path)]
    assert not probes, "model internals read outside disentangle/models:\n  " + "\n  ".join(probes)
