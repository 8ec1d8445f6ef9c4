"""No import circle anywhere in ``src/attnum``, and no study family importing another.

What counts as an edge A -> B: any ``import B`` / ``from B import x`` written in A, at module level or
inside a function or class body (a function-level import is still a dependency, only a later one), with
``from P import m`` counted as A -> P.m when ``P.m`` is a module. Not counted: imports under
``if TYPE_CHECKING:`` (never executed), the implicit import of a package's ``__init__`` when a submodule
is named, and dynamic ``importlib.import_module`` calls (the registry's lazy look-up of families).
The graph is read from the source with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# Circles allowed: none.
ALLOWED: set[frozenset[str]] = set()
# Family -> family edges allowed, each with its reason: none (the bundled models the training,
# consistency and lowbit families share live in attnum.workloads, outside every family).
ALLOWED_FAMILY_EDGES: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "attnum").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                todo += child.orelse  # the else branch runs
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            todo.append(child)
    return found


def import_graph() -> dict[str, set[str]]:
    """{module: modules of src/attnum it imports} as described in the module docstring."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            edges |= {t for t in targets if t in mods and t != name}
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = set()
                while True:
                    top = stack.pop()
                    on.discard(top)
                    scc.add(top)
                    if top == node:
                        break
                if len(scc) > 1:
                    out.append(frozenset(scc))
    return out


def test_the_walk_sees_imports_at_every_level():
    graph = import_graph()
    assert "attnum.sweep.registry" in graph["attnum.sweep.point_runner"]  # module level
    assert "attnum.studies.paper.compare" in graph["attnum.studies.paper.run"]  # inside a function
    assert "attnum.studies.paper.cli_attribute" in graph["attnum.studies.paper.cli"]  # from P import m
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_no_import_circle_in_attnum():
    found = [sorted(c) for c in cycles(import_graph()) if c not in ALLOWED]
    assert not found, f"import circles: {found}"


def test_no_family_imports_another():
    from attnum.studies import FAMILIES

    graph = import_graph()
    bad = []
    for name, edges in graph.items():
        parts = name.split(".")
        if len(parts) < 3 or parts[1] != "studies" or parts[2] not in FAMILIES:
            continue
        bad += [(name, e) for e in edges if e.split(".")[:2] == ["attnum", "studies"] and len(e.split(".")) > 2
                and e.split(".")[2] in FAMILIES and e.split(".")[2] != parts[2]
                and (parts[2], e.split(".")[2]) not in ALLOWED_FAMILY_EDGES]
    assert not bad, f"a family imports another: {bad}"


def test_the_infrastructure_names_no_family():
    """The sweep spec, runner, executors, store, export and report shell reach families only through
    the registry."""
    graph = import_graph()
    shell = ("attnum.sweep.spec", "attnum.sweep.point_runner", "attnum.sweep.executors", "attnum.sweep.executor_pool",
             "attnum.sweep.executor_ray", "attnum.store.db",
             "attnum.report.export", "attnum.report.html", "attnum.report.generic", "attnum.cli.sweep",
             "attnum.cli.runs", "attnum.cli.export", "attnum.cli.report", "attnum.cli.reproduce")
    bad = [(m, e) for m in shell for e in graph[m] if e.startswith("attnum.studies.")
           and e not in ("attnum.sweep.registry",)]
    assert not bad, bad


# ---- the layers ---------------------------------------------------------------------------------
# Each package of src/attnum sits on one floor; a module may import its own package and packages on
# lower floors only. Packages on one floor are peers and import neither each other. The table is
# docs/architecture.md's, and that page is checked against it below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("attnum.errors", "attnum"),                    # 0: the input-error type; the package root (lazy exports)
    ("attnum.numerics", "attnum.console"),          # 1: formats, rounding, policy, metrics | terminal output
    ("attnum.attention", "attnum.sampling"),        # 2: every attention and sampler, emulated
    ("attnum.kernels", "attnum.workloads"),         # 3: real kernels behind one signature | models, inputs
    ("attnum.sandbox",),                            # 4: user code in a child process
    ("attnum.store",),                              # 5: the results store and output files
    ("attnum.sweep",),                              # 6: family registry, specs, points, executors
    ("attnum.report",),                             # 7: figures and the HTML report from a store
    ("attnum.audit", "attnum.spec_audit", "attnum.integrations"),  # 8: auditors, model integrations
    ("attnum.studies",),                            # 9: the study families
    ("attnum.cli", "attnum.testing"),               # 10: the faces: the CLI, the pytest assertion
    ("attnum.__main__",),                           # 11: ``python -m attnum`` runs the CLI
)
# Edges allowed across the rule, each with its reason: none.
ALLOWED_LAYER_EDGES: set[tuple[str, str]] = set()


def layer_of(module: str) -> tuple[int, str]:
    """(floor, package) of a module: the longest package prefix in :data:`LAYERS`."""
    best = None
    for floor, packages in enumerate(LAYERS):
        for p in packages:
            if (module == p or (p != "attnum" and module.startswith(p + "."))) and (best is None or len(p) > len(best[1])):
                best = (floor, p)
    if best is None:
        raise AssertionError(f"{module} is on no floor of LAYERS: add its package to the table")
    return best


def layer_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    bad = []
    for a, edges in graph.items():
        fa, pa = layer_of(a)
        for b in edges:
            fb, pb = layer_of(b)
            if pa == pb or (a, b) in ALLOWED_LAYER_EDGES or (a, b) == ("attnum", "attnum.errors"):
                continue  # the root's one static import is the error type it exports
            if fb >= fa:
                bad.append((a, b))
    return sorted(bad)


def test_every_module_is_on_a_floor():
    for m in import_graph():
        layer_of(m)


def test_no_lower_layer_imports_a_higher_one():
    bad = layer_violations(import_graph())
    assert not bad, "imports across the layers (lower -> higher, or between peers): " + ", ".join(
        f"{a} -> {b}" for a, b in bad)


def test_the_layer_rule_can_fail():
    assert layer_violations({"attnum.numerics.rounding": {"attnum.store.db"}}) == [
        ("attnum.numerics.rounding", "attnum.store.db")]
    assert layer_violations({"attnum.kernels.user": {"attnum.workloads.inputs"}})  # peers
    assert not layer_violations({"attnum.store.db": {"attnum.numerics.formats", "attnum.store.lock"}})


def test_the_top_level_holds_few_modules():
    top = sorted(p.stem for p in (SRC / "attnum").glob("*.py"))
    assert len(top) <= 8, f"src/attnum/ holds {len(top)} modules: {top}"


def test_architecture_doc_lists_the_floors():
    doc = (SRC.parent / "docs" / "architecture.md").read_text()
    for packages in LAYERS[1:]:
        for p in packages:
            if p.count(".") == 1 and not p.endswith("__main__"):
                name = p.split(".")[1]
                assert any(f"`{n}`" in doc for n in (f"{name}/", f"{name}.py", p)), f"docs/architecture.md does not name {p}"
