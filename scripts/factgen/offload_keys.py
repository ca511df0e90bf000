"""Which `kv_connector_extra_config` keys vLLM's own offload connectors read, per release, and which offload specs
the OffloadingConnector can build.

A key is read where the code asks a mapping named `extra_config` or `kv_connector_extra_config` (a name or an
attribute: `self.extra_config.get("k", d)`, `extra_config["k"]`, `"k" in extra_config`). The OffloadingConnector
builds a spec named by `spec_name` (default in `OffloadingSpecFactory`, vllm/v1/kv_offload/factory.py) from the
specs that file registers (`register_spec(name, module, class)`), else from `spec_module_path`. A key read in a
spec's own package (vllm/v1/kv_offload/cpu/ for `...cpu.spec`; the module alone for a flat `...cpu`) belongs to that
spec and to the specs that subclass it; a key read anywhere else in the connector's code belongs to every spec.
A key is required when it is read unconditionally, with no default, and a `None` check on it raises."""

from __future__ import annotations

import ast
import operator
from pathlib import Path

from factgen.pysource import SourceTree

CONFIG_NAMES = {"extra_config", "kv_connector_extra_config"}
OFFLOAD_ROOT = "vllm.v1.kv_offload"
CONNECTOR_DIR = "vllm/distributed/kv_transfer/kv_connector/v1"
# The connector modules whose keys are read, beside the spec packages (vllm/v1/kv_offload/).
CONNECTORS = {
    "OffloadingConnector": ("offloading_connector.py", "offloading"),
    "SimpleCPUOffloadConnector": ("simple_cpu_offload_connector.py",),
    "MultiConnector": ("multi_connector.py",),
}
CASTS = {"int": "int", "float": "float", "bool": "bool", "str": "str"}


def extract(tree: SourceTree) -> dict:
    """{connector: {"keys": {key: entry}, ...}}; the OffloadingConnector also has "specs" and "default_spec"."""
    found: dict = {}
    for connector, parts in CONNECTORS.items():
        files = [f for part in parts for f in _py_files(tree.root / CONNECTOR_DIR / part)]
        if not files:
            continue
        if connector == "OffloadingConnector":
            found[connector] = _offloading(tree, files)
        else:
            found[connector] = {"keys": _keys_in(tree, files)}
    return found


def _offloading(tree: SourceTree, connector_files: list[Path]) -> dict:
    factory = tree.path_of(OFFLOAD_ROOT + ".factory")
    specs = _registered_specs(tree, factory) if factory else {}
    owned: dict[str, list[Path]] = {}
    for name, spec in specs.items():
        module_path = tree.path_of(spec["module"])
        if module_path is None:
            continue
        package = spec["module"].rsplit(".", 1)[0]
        owned[name] = _py_files(module_path.parent) if package != OFFLOAD_ROOT else [module_path]
    spec_files = {path for files in owned.values() for path in files}
    common_files = [p for p in _py_files(tree.root / OFFLOAD_ROOT.replace(".", "/")) if p not in spec_files]
    result: dict = {"keys": _keys_in(tree, connector_files + common_files), "specs": {}}
    if factory:
        default = _default_spec(tree, factory)
        if default:
            result["default_spec"] = default
    for name, spec in specs.items():
        keys = _keys_in(tree, owned.get(name, []))
        for base in _base_specs(tree, spec, specs):
            keys = {**_keys_in(tree, owned.get(base, [])), **keys}
        result["specs"][name] = {**spec, "keys": dict(sorted(keys.items()))}
    return result


def _py_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(path.rglob("*.py")) if path.is_dir() else []


def _registered_specs(tree: SourceTree, factory: Path) -> dict:
    specs = {}
    for node in ast.walk(ast.parse(factory.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "register_spec" \
                and len(node.args) == 3 and all(isinstance(a, ast.Constant) for a in node.args):
            name, module, cls = (a.value for a in node.args)
            specs[name] = {"module": module, "class": cls, "where": _where(tree, factory, node)}
    return specs


def _default_spec(tree: SourceTree, factory: Path) -> dict | None:
    for node in ast.walk(ast.parse(factory.read_text(encoding="utf-8"))):
        read = _read_key(node)
        if read and read[0] == "spec_name" and isinstance(read[1], ast.Constant):
            return {"name": read[1].value, "where": _where(tree, factory, node)}
    return None


def _base_specs(tree: SourceTree, spec: dict, specs: dict) -> list[str]:
    """The registered specs SPEC's class derives from, nearest first."""
    by_class = {s["class"]: name for name, s in specs.items()}
    found, module, cls_name = [], spec["module"], spec["class"]
    for _ in range(8):  # a short chain; stops at the first base outside the registry
        node = tree.top_level(module, cls_name)
        if not isinstance(node, ast.ClassDef) or not node.bases or not isinstance(node.bases[0], ast.Name):
            break
        base = node.bases[0].id
        origin = tree.imported_from(module, base)
        if base not in by_class or origin is None:
            break
        found.append(by_class[base])
        module, cls_name = origin
    return found


def _keys_in(tree: SourceTree, files: list[Path]) -> dict:
    keys: dict = {}
    for path in files:
        module = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: parent for parent in ast.walk(module) for child in ast.iter_child_nodes(parent)}
        for node in ast.walk(module):
            read = _read_key(node)
            if read is None or read[0] in keys and not keys[read[0]]["required"] and read[1] is None:
                continue
            key, default = read
            entry = {"where": _where(tree, path, node), "default": _value(default, tree, path),
                     "type": _type(node, default, parents, tree, path), "required": _required(node, parents)}
            if key not in keys or entry["required"] and not keys[key]["required"]:
                keys[key] = entry
    return dict(sorted(keys.items()))


def _is_config(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in CONFIG_NAMES
            or isinstance(node, ast.Attribute) and node.attr in CONFIG_NAMES)


def _read_key(node: ast.AST) -> tuple[str, ast.AST | None] | None:
    """(key, default expression or None) when NODE reads a key of the extra config."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and _is_config(node.func.value) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        return node.args[0].value, node.args[1] if len(node.args) > 1 else None
    if isinstance(node, ast.Subscript) and _is_config(node.value) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str):
        return node.slice.value, None
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
            and _is_config(node.comparators[0]) and isinstance(node.left, ast.Constant) \
            and isinstance(node.left.value, str):
        return node.left.value, None
    return None


_BINARY = {ast.Mult: operator.mul, ast.Pow: operator.pow, ast.Add: operator.add, ast.Sub: operator.sub}


def _value(node: ast.AST | None, tree: SourceTree, path: Path):
    """The default as JSON when it is a literal, simple arithmetic or a module constant; else its source text."""
    if node is None:
        return None
    try:
        return _evaluate(node, ast.parse(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError):
        return ast.unparse(node)


def _evaluate(node: ast.AST, module: ast.Module):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)) and not node.elts:
        return []
    if isinstance(node, ast.Dict) and not node.keys:
        return {}
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left, module), _evaluate(node.right, module))
    if isinstance(node, ast.Name):
        for statement in module.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else \
                [statement.target] if isinstance(statement, ast.AnnAssign) and statement.value else []
            if any(isinstance(t, ast.Name) and t.id == node.id for t in targets):
                return _evaluate(statement.value, module)
    raise ValueError(ast.unparse(node))


def _type(node: ast.AST, default: ast.AST | None, parents: dict, tree: SourceTree, path: Path) -> str:
    parent = parents.get(node)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in CASTS:
        return CASTS[parent.func.id]
    value = _value(default, tree, path)
    if isinstance(value, bool):
        return "bool"
    return {int: "int", float: "float", list: "list", dict: "dict"}.get(type(value), "")


def _required(node: ast.AST, parents: dict) -> bool:
    """`x = extra_config.get("k")`, not inside a branch, followed in the same function by `if x is None: raise`."""
    assign = parents.get(node)
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)
            and isinstance(node, ast.Call) and len(node.args) == 1):
        return False
    name = assign.targets[0].id
    function = parents.get(assign)
    while function is not None and not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(function, (ast.If, ast.For, ast.While, ast.Try, ast.With)):
            return False  # read on one path only (spec_module_path: when spec_name is not registered)
        function = parents.get(function)
    for check in ast.walk(function) if function is not None else ():
        if isinstance(check, ast.If) and _is_none_test(check.test, name) \
                and any(isinstance(s, ast.Raise) for s in check.body):
            return True
    return False


def _is_none_test(test: ast.AST, name: str) -> bool:
    if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == name:
        return isinstance(test.ops[0], ast.Is) and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value is None
    return isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name) \
        and test.operand.id == name


def _where(tree: SourceTree, path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(tree.root)}:{node.lineno}"
