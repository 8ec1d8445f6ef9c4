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

import _paths

SRC = _paths.ROOT / "src"
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


def _imports(tree: ast.AST, typing: bool = False) -> list[ast.Import | ast.ImportFrom]:
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child) and not typing:
                todo += child.orelse  # the else branch runs
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            todo.append(child)
    return found


_DYNAMIC = ("import_module", "find_spec", "__import__")


def _dynamic_targets(tree: ast.AST) -> list[str]:
    """The module names passed to ``importlib.import_module`` / ``find_spec`` / ``__import__`` as a string or an
    f-string (its constant head, up to the last dot: ``f"attnum.studies.{name}.family"`` names attnum.studies)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        fn = node.func
        if (fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)) not in _DYNAMIC:
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            out.append(arg.value)
        elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
            out.append(str(arg.values[0].value).rpartition(".")[0])
    return [t for t in out if t.startswith("attnum")]


def import_graph(*, typing: bool = False, dynamic: bool = False) -> dict[str, set[str]]:
    """{module: modules of src/attnum it imports} as described in the module docstring; ``typing``: the imports
    under ``if TYPE_CHECKING:`` too; ``dynamic``: the modules named to importlib as well (an f-string names the
    longest module or package its constant head spells)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        tree = ast.parse(path.read_text(), str(path))
        if dynamic:
            for target in _dynamic_targets(tree):
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        for node in _imports(tree, typing):
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
    assert "attnum.studies.paper.cli.attribute" in graph["attnum.studies.paper.cli"]  # from P import m
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_no_import_circle_in_attnum():
    """No circle, counting the imports made only for type checkers as well (a circle there is a circle of
    concepts all the same)."""
    found = [sorted(c) for c in cycles(import_graph(typing=True)) if c not in ALLOWED]
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
    ("attnum.errors", "attnum._moved", "attnum"),   # 0: the input-error type; old module paths; the package root
    ("attnum.numerics", "attnum.console"),          # 1: formats, rounding, policy, metrics, tensor cores | terminal
    ("attnum.attention", "attnum.sampling", "attnum.mma"),  # 2: every attention and sampler, emulated | attnum.mma
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
            if pa == pb or (a, b) in ALLOWED_LAYER_EDGES or (a == "attnum" and b in ("attnum.errors", "attnum._moved")):
                continue  # the root's static imports: the error type it exports, the finder of old paths
            if fb >= fa:
                bad.append((a, b))
    return sorted(bad)


def test_every_module_is_on_a_floor():
    for m in import_graph():
        layer_of(m)


def test_no_lower_layer_imports_a_higher_one():
    """Static imports and the modules named to importlib alike: a layer that finds a higher one by name at run
    time depends on it all the same."""
    bad = layer_violations(import_graph(dynamic=True))
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


# ---- inside the rooms ----------------------------------------------------------------------------
# kernels/ has floors of its own: the protocol at the bottom, then the wheel source and the Triton model, then
# one adapter module per upstream project, then the registries. Same rule as LAYERS, one room at a time.
KERNEL_FLOORS: tuple[tuple[str, ...], ...] = (
    ("attnum.kernels.conventions", "attnum.kernels.serving_layout", "attnum.kernels.reference",
     "attnum.kernels.wheels"),                                   # 0: conventions, layouts, attnum's own, wheels
    ("attnum.kernels.serving",),                                 # 1: the serving protocol
    ("attnum.kernels.user", "attnum.kernels.protocol"),          # 2: user callables | the adapters' record
    ("attnum.kernels.triton",),                                  # 3: how a GPU runs a Triton kernel
    ("attnum.kernels.adapters",),                                # 4: one module per upstream project
    ("attnum.kernels.registry", "attnum.kernels.context_parallel"),  # 5: every name resolved
    ("attnum.kernels",),                                         # 6: the room's face
)


def room_violations(graph: dict[str, set[str]], floors=KERNEL_FLOORS) -> list[tuple[str, str]]:
    """Edges inside the room of ``floors`` that go up or sideways, and any adapter importing another adapter."""
    room = floors[-1][0]

    def floor(m: str) -> tuple[int, str]:
        best = None
        for i, packages in enumerate(floors):
            for p in packages:
                if (m == p or (p != room and m.startswith(p + "."))) and (best is None or len(p) > len(best[1])):
                    best = (i, p)
        if best is None:
            raise AssertionError(f"{m} is on no floor of its room: add it to the table")
        return best

    bad = []
    for a, edges in graph.items():
        if not (a == room or a.startswith(room + ".")):
            continue
        for b in edges:
            if not (b == room or b.startswith(room + ".")):
                continue
            (fa, pa), (fb, pb) = floor(a), floor(b)
            adapter_to_adapter = pa == pb == "attnum.kernels.adapters" and a != b and b != pa
            if adapter_to_adapter or (pa != pb and fb >= fa):
                bad.append((a, b))
    return sorted(bad)


def test_inside_kernels_adapters_import_the_protocol_and_never_each_other():
    bad = room_violations(import_graph(dynamic=True))
    assert not bad, "imports across kernels/' floors: " + ", ".join(f"{a} -> {b}" for a, b in bad)


def test_the_room_rule_can_fail():
    assert room_violations({"attnum.kernels.adapters.vllm": {"attnum.kernels.adapters.sglang"}}) == [
        ("attnum.kernels.adapters.vllm", "attnum.kernels.adapters.sglang")]  # an adapter importing another
    assert room_violations({"attnum.kernels.triton.faithful": {"attnum.kernels.adapters.vllm"}})  # model -> adapter
    assert room_violations({"attnum.kernels.wheels.source": {"attnum.kernels.registry"}})  # up
    assert not room_violations({"attnum.kernels.adapters.vllm": {"attnum.kernels.protocol",
                                                                 "attnum.kernels.triton.faithful"}})


def test_a_planted_wrong_import_fails_the_graph_tests(tmp_path, monkeypatch):
    """The tests above read the real tree: plant a wrong import in a copy of it and they must see it."""
    import shutil

    copy = tmp_path / "src"
    shutil.copytree(SRC / "attnum", copy / "attnum")
    vllm = copy / "attnum" / "kernels" / "adapters" / "vllm.py"
    vllm.write_text(vllm.read_text() + "\n\ndef _planted():\n    from attnum.kernels.adapters import sglang  # noqa\n")
    formats = copy / "attnum" / "numerics" / "formats.py"
    formats.write_text(formats.read_text() + "\n\ndef _planted():\n    import importlib\n\n"
                       "    return importlib.import_module('attnum.studies.paper.family')\n")
    monkeypatch.setattr(__import__(__name__), "SRC", copy)
    graph = import_graph(dynamic=True)
    assert ("attnum.kernels.adapters.vllm", "attnum.kernels.adapters.sglang") in room_violations(graph)
    assert ("attnum.numerics.formats", "attnum.studies.paper.family") in layer_violations(graph)


# Folders whose modules are a catalogue (one probe per file) may hold more.
CATALOGUES = {"attnum/audit/probes"}
MAX_MODULES = 15


def test_no_folder_holds_more_than_fifteen_modules():
    big = {}
    for folder in [SRC / "attnum", *(p for p in (SRC / "attnum").rglob("*") if p.is_dir())]:
        rel = folder.relative_to(SRC).as_posix()
        n = sum(1 for f in folder.glob("*.py") if f.name != "__init__.py")
        if n > MAX_MODULES and rel not in CATALOGUES:
            big[rel] = n
    assert not big, f"folders over {MAX_MODULES} modules: {big}"
