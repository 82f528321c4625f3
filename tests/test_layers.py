"""The house rule on imports, read from the source (AST, nothing imported): dependencies point one way,
``pipelines`` -> ``callbacks`` -> ``modules`` -> ``envs``, and no two files import each other, directly or
through others. Annotation-only imports under ``if TYPE_CHECKING:`` count like any other: a circle that only
annotations close is still two files that each need the other to be read. The one import that is no edge of a
circle is a package ``__init__`` importing its own files (it runs first, and its files import it for names it
re-exports). Since the layer rule forbids upward imports, every circle lies inside one package."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("envs", "modules", "callbacks", "pipelines")  # each may import only itself and the ones before it


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, packages: tuple[str, ...] = LAYERS) -> dict[str, set[str]]:
    """``{module: modules of the tree it imports}`` over the ``.py`` files of ``packages`` under ``root``.

    ``from a.b import c`` is an import of ``a.b.c`` when that is a file of the tree, else of ``a.b``;
    imports inside functions and under ``if TYPE_CHECKING:`` count too."""
    files = {_module_name(root, p): p for pkg in packages for p in (root / pkg).rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the file's package
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files:  # `import a.b.c` of a non-file attribute: its module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        out[name] = edges
    return out


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports that point up the layers (e.g. ``envs.x -> modules.y``)."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted(f"{src} -> {dst}" for src, dsts in graph.items() for dst in dsts
                  if rank[dst.split(".")[0]] > rank[src.split(".")[0]])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of files (Tarjan), ignoring a package ``__init__``'s imports of
    its own files."""
    def own(src: str, dst: str) -> bool:
        return dst.startswith(src + ".")

    edges = {src: {d for d in dsts if not own(src, d)} for src, dsts in graph.items()}
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_imports_point_one_way_and_have_no_cycles():
    """No upward import, and no circle of imports, annotation-only ones included, in any package."""
    graph = import_graph(REPO)
    assert len(graph) > 50, "the package tree was not found"
    assert layer_violations(graph) == []
    assert cycles(graph) == []


def test_the_checker_finds_upward_imports_and_cycles(tmp_path):
    """The checker itself, on a small tree with one upward import and one cycle."""
    for path, text in {
        "envs/__init__.py": "",
        "envs/a.py": "from envs import b\n",
        "envs/b.py": "import envs.a\n",
        "modules/__init__.py": "",
        "modules/m.py": "from envs.a import X\n",
        "callbacks/__init__.py": "",
        "pipelines/__init__.py": "from pipelines import p\n",
        "pipelines/p.py": "def f():\n    from modules import m\n",
        "envs/c.py": "from pipelines.p import f\n",
        "envs/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from envs.e import E\n",
        "envs/e.py": "from envs.d import D\n",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    graph = import_graph(tmp_path)
    assert layer_violations(graph) == ["envs.c -> pipelines.p"]
    assert cycles(graph) == [["envs.a", "envs.b"], ["envs.d", "envs.e"]]  # d -> e is annotation-only: it counts


def test_the_checker_finds_circles_inside_a_package(tmp_path):
    """The circle checker itself, on a small tree: a circle of three files in one package closed by an
    annotation-only import is reported; a package ``__init__`` importing its own file, which imports the package
    back for a name, is not; and neither is a chain that does not close."""
    for path, text in {
        "envs/__init__.py": "",
        "modules/__init__.py": "from modules.w import W\n",
        "modules/w.py": "from modules import helper\n",
        "modules/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from modules.y import Y\n",
        "modules/y.py": "from modules.z import Z\n",
        "modules/z.py": "import modules.x\n",
        "modules/u.py": "from modules.v import V\n",
        "modules/v.py": "from envs import thing\n",
        "callbacks/__init__.py": "",
        "pipelines/__init__.py": "",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["modules.x"] == {"modules.y"}  # the annotation-only import is an edge
    assert cycles(graph) == [["modules.x", "modules.y", "modules.z"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
