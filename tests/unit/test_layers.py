"""Data flows one way: no import cycle inside stackctl/ and no import from a lower layer to a higher one, with the
layers in the table of docs/ARCHITECTURE.md (read from there: the doc is the one place the order is written).

Every import counts as an arrow, also one inside a function (a lazy import is still a dependency) and one under
`if TYPE_CHECKING:`. A package's face (its __init__.py) is a node of its own: `from pkg import x` reads x from the
face's namespace, so it is an arrow to the face (and to pkg.x too when that is a module); a face that imports a
module which imports from that face is a cycle, however it happens to load. Modules import their siblings by module
path (`from pkg.loader import load`); the face only re-exports. The checker runs on a small planted package too, so
it is seen to fail on a cycle, on a face cycle and on an upward import. `python tests/unit/test_layers.py` prints the figures: modules, arrows, and what following a recipe
through `up` visits.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"


# -- the checker ------------------------------------------------------------------------------------------------

def read_layers(text: str) -> dict[str, int]:
    """{module or package prefix: layer number} from the ```layers block: "N name prefix prefix ...", continued on
    indented lines."""
    block = re.search(r"^```layers\n(.*?)^```", text, re.M | re.S)
    assert block, "no ```layers block"
    layers: dict[str, int] = {}
    number = None
    for line in block.group(1).splitlines():
        words = line.split()
        if not words:
            continue
        if not line[0].isspace():
            number, words = int(words[0]), words[2:]
        assert number is not None, line
        for prefix in words:
            assert prefix not in layers, f"{prefix} is listed twice"
            layers[prefix] = number
    return layers


def modules_of(root: Path) -> dict[str, Path]:
    """{dotted name: file} for every module of the package at `root` (a package is its __init__.py)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, from the source with ast (nothing is imported). A package's face
    is the node named by the package."""
    modules = modules_of(root)
    package = root.name

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {known(alias.name) for alias in node.names if alias.name.split(".")[0] == package}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")[:len(here.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                if base.split(".")[0] != package:
                    continue
                targets.add(known(base))  # the names come from base's namespace: a face when base is a package
                for alias in node.names:  # `from pkg import sub` also loads the submodule
                    if f"{base}.{alias.name}" in modules:
                        targets.add(f"{base}.{alias.name}")
        graph[name] = {t for t in targets if t and t != name}
    return graph


def layer_of(module: str, layers: dict[str, int]) -> int:
    name = module
    while name:
        if name in layers:
            return layers[name]
        name = name.rpartition(".")[0]
    raise AssertionError(f"{module}: in no layer (add it, or a package holding it, to the table)")


def upward_imports(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    return sorted(f"{a} (layer {layer_of(a, layers)}) -> {b} (layer {layer_of(b, layers)})"
                  for a, targets in graph.items() for b in targets if layer_of(b, layers) > layer_of(a, layers))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


# -- stackctl ---------------------------------------------------------------------------------------------------

def stackctl_graph() -> tuple[dict[str, set[str]], dict[str, int]]:
    return import_graph(REPO / "stackctl"), read_layers(ARCHITECTURE.read_text())


def test_stackctl_has_no_import_cycle():
    graph, _ = stackctl_graph()
    assert cycles(graph) == []


def test_no_stackctl_module_imports_a_higher_layer():
    graph, layers = stackctl_graph()
    assert upward_imports(graph, layers) == []


def test_every_prefix_in_the_table_names_a_module_or_package():
    graph, layers = stackctl_graph()
    assert sorted(p for p in layers if p not in graph) == []


def test_following_a_recipe_through_up_never_climbs():
    """What `up` reaches (lifecycle/up.py onward) only ever imports downward, and never doctor: `up --gate` gets
    doctor as a callback the CLI composes."""
    graph, layers = stackctl_graph()
    visited = reachable(graph, "stackctl.lifecycle.up")
    sub = {module: graph[module] for module in visited}
    assert "stackctl.bundle.render" in visited  # the path is followed
    assert not any(module.startswith("stackctl.doctor") for module in visited)
    assert upward_imports(sub, layers) == []


# -- the checker fails where it should --------------------------------------------------------------------------

PLANTED_LAYERS = "```layers\n2 top     pkg.top\n1 bottom  pkg pkg.low pkg.other\n```\n"


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_checker_finds_a_planted_cycle_through_a_lazy_import(tmp_path):
    root = plant(tmp_path, {"low.py": "from pkg.other import helper\n",
                            "other.py": "def helper():\n    from pkg import low\n    return low\n",
                            "top.py": "from pkg import low\n"})
    assert cycles(import_graph(root)) == [["pkg.low", "pkg.other"]]


def test_the_checker_finds_a_planted_upward_import(tmp_path):
    root = plant(tmp_path, {"low.py": "def f():\n    from .top import g\n    return g\n", "other.py": "",
                            "top.py": "from pkg.low import f\n\ndef g():\n    return f\n"})
    graph, layers = import_graph(root), read_layers(PLANTED_LAYERS)
    assert upward_imports(graph, layers) == ["pkg.low (layer 1) -> pkg.top (layer 2)"]
    assert cycles(graph) == [["pkg.low", "pkg.top"]]


def test_the_checker_finds_a_planted_face_cycle(tmp_path):
    """The face imports a module that takes a sibling through the face (`from pkg.sub import helper`): a cycle
    between the face and the module, though every name it imports is a module. By module path, there is none."""
    files = {"sub/__init__.py": "from pkg.sub.impl import run\n\n__all__ = ['run']\n",
             "sub/helper.py": "def help():\n    return 1\n",
             "sub/impl.py": "from pkg.sub import helper\n\ndef run():\n    return helper.help()\n"}
    root = plant(tmp_path, files)
    graph = import_graph(root)
    assert graph["pkg.sub.impl"] == {"pkg.sub", "pkg.sub.helper"}
    assert cycles(graph) == [["pkg.sub", "pkg.sub.impl"]]
    files["sub/impl.py"] = "from pkg.sub.helper import help\n\ndef run():\n    return help()\n"
    fixed = import_graph(plant(tmp_path / "fixed", files))
    assert fixed["pkg.sub.impl"] == {"pkg.sub.helper"} and cycles(fixed) == []


def test_the_checker_passes_a_clean_planted_package(tmp_path):
    root = plant(tmp_path, {"low.py": "import os\n", "other.py": "from pkg import low\n",
                            "top.py": "import pkg.low\nfrom pkg.other import x\n"})
    graph, layers = import_graph(root), read_layers(PLANTED_LAYERS)
    assert graph["pkg.top"] == {"pkg.low", "pkg.other"}
    assert cycles(graph) == [] and upward_imports(graph, layers) == []


if __name__ == "__main__":
    graph, layers = stackctl_graph()
    visited = reachable(graph, "stackctl.lifecycle.up")
    climbs = upward_imports({m: graph[m] for m in visited}, layers)
    print(f"{len(graph)} modules, {sum(len(t) for t in graph.values())} imports, "
          f"{len(cycles(graph))} cycles, {len(upward_imports(graph, layers))} upward imports")
    print(f"following a recipe through up (stackctl.lifecycle.up onward): {len(visited)} modules visited, "
          f"{len(climbs)} imports to a higher layer")
    sys.exit(1 if climbs or cycles(graph) or upward_imports(graph, layers) else 0)
