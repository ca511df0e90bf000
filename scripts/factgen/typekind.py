"""What value a vLLM config field takes on the command line, read from its type annotation.

The same decisions vLLM's `_compute_kwargs` (vllm/engine/arg_utils.py, `get_kwargs`) takes at run time from the
real type objects, here from the annotation's syntax: a nested config dataclass is JSON, `bool | str | None` is a
flag with an optional value, any other bool is `--x/--no-x`, a Literal gives choices (unless `str` is also allowed),
a list/tuple/set takes one or more values, then int, float, dict (JSON), str. `None` in the union makes "None" and
"" accepted as null.
"""

from __future__ import annotations

import ast

from factgen.pysource import SourceTree, decorator_names

BUILTIN = {"bool": "bool", "int": "int", "float": "float", "str": "str", "bytes": "str", "dict": "dict",
           "list": "list", "List": "list", "Sequence": "list", "tuple": "tuple", "Tuple": "tuple", "set": "set",
           "Set": "set", "Dict": "dict", "Mapping": "dict", "Any": "other"}
DATACLASS_DECORATORS = {"config", "dataclass", "configclass"}


def atoms(tree: SourceTree, module: str, node: ast.AST | None, depth: int = 0) -> list[tuple]:
    """The union members of an annotation: ("none",), ("bool",), ("int",), ("literal", values), ("list", elem
    atoms), ("dict",), ("dataclass", name), ("other", text), ..."""
    if node is None or depth > 12:
        return [("other", "?")]
    if isinstance(node, ast.Constant):
        if node.value is None:
            return [("none",)]
        if isinstance(node.value, str):  # a forward reference
            try:
                return atoms(tree, module, ast.parse(node.value, mode="eval").body, depth + 1)
            except SyntaxError:
                return [("other", node.value)]
        return [("other", repr(node.value))]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return atoms(tree, module, node.left, depth + 1) + atoms(tree, module, node.right, depth + 1)
    if isinstance(node, ast.Subscript):
        head = _name(node.value)
        args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Optional":
            return atoms(tree, module, args[0], depth + 1) + [("none",)]
        if head == "Union":
            return [a for arg in args for a in atoms(tree, module, arg, depth + 1)]
        if head == "Annotated":
            return atoms(tree, module, args[0], depth + 1)
        if head == "Literal":
            values = []
            for arg in args:
                if isinstance(arg, ast.Constant):
                    values.append(arg.value)
                else:  # a Literal nested by name
                    values += [v for a in atoms(tree, module, arg, depth + 1) if a[0] == "literal" for v in a[1]]
            return [("literal", tuple(values))]
        kind = BUILTIN.get(head or "")
        if kind in ("list", "tuple", "set"):
            element = [a for a in atoms(tree, module, args[0], depth + 1)] if args else [("other", "?")]
            return [(kind, tuple(element))]
        if kind == "dict":
            return [("dict",)]
        return [("other", ast.unparse(node))]
    name = _name(node)
    if name is None:
        return [("other", ast.unparse(node))]
    if name == "None":
        return [("none",)]
    if name in BUILTIN and isinstance(node, ast.Name):
        kind = BUILTIN[name]
        return [(kind, (("other", "?"),))] if kind in ("list", "tuple", "set") else [(kind,)]
    if not isinstance(node, ast.Name):
        return [("other", name)]
    found = tree.resolve(module, name)
    if found is None:
        return [("other", name)]
    found_module, bound = found
    if isinstance(bound, ast.ClassDef):
        bases = {_name(b) for b in bound.bases}
        if DATACLASS_DECORATORS & set(decorator_names(bound)) or "BaseModel" in bases:
            return [("dataclass", name)]
        if bases & {"dict", "Dict"}:
            return [("dict",)]
        return [("other", name)]
    value = getattr(bound, "value", None)
    if isinstance(bound, (ast.Assign, ast.AnnAssign)) and value is not None and _looks_like_type(value):
        return atoms(tree, found_module, value, depth + 1)
    return [("other", name)]


def _looks_like_type(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):  # TypeAliasType("X", ...) / NewType: not followed
        return False
    return isinstance(node, (ast.Subscript, ast.BinOp, ast.Name, ast.Attribute)) or (
        isinstance(node, ast.Constant) and node.value is None)


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def flag_kind(members: list[tuple]) -> dict:
    """The CLI shape of a field (vLLM's _compute_kwargs decisions, in its order)."""
    heads = {m[0] for m in members}
    nullable = "none" in heads
    if "dataclass" in heads:
        return {"kind": "json"}
    if heads == {"bool", "str", "none"}:
        return {"kind": "optional_value"}
    if "bool" in heads:
        return {"kind": "bool"}
    if "literal" in heads:
        literal = next(m for m in members if m[0] == "literal")[1]
        kind = "int" if literal and all(isinstance(v, int) for v in literal) else "str"
        out: dict = {"kind": kind}
        if "str" not in heads:
            out["choices"] = sorted(str(v) for v in literal)
        return _nullable(out, nullable)
    for collection in ("tuple", "list", "set"):
        if collection in heads:
            element = next(m for m in members if m[0] == collection)[1]
            inner = flag_kind(list(element))
            out = {"kind": "list", "element": inner["kind"]}
            if "choices" in inner:
                out["choices"] = inner["choices"]
            return _nullable(out, nullable)
    if "int" in heads:
        return _nullable({"kind": "int"}, nullable)
    if "float" in heads:
        return _nullable({"kind": "float"}, nullable)
    if "dict" in heads:
        return _nullable({"kind": "json_or_str" if heads & {"str", "other"} else "json"}, nullable)
    return _nullable({"kind": "str"}, nullable)


def _nullable(out: dict, nullable: bool) -> dict:
    if nullable:
        out["nullable"] = True
    return out


def value_kind(members: list[tuple]) -> dict:
    """The JSON shape a config key takes inside --compilation-config (pydantic's view, not argparse's)."""
    heads = {m[0] for m in members}
    out: dict = {"types": sorted(h if h != "dataclass" else "object" for h in heads - {"other"})}
    if "other" in heads:
        out["types"].append("other")
    literal = next((m[1] for m in members if m[0] == "literal"), None)
    if literal is not None and "str" not in heads and "other" not in heads:
        out["choices"] = sorted(str(v) for v in literal)
    return out
