"""A read-only view of a Python source tree: modules parsed on demand, names followed through imports.

The extractors read a package's code without importing it (no torch, no GPU): classes, module-level constants and
type aliases are found by name, in the module that uses them first, then through its `from X import Y` lines.
"""

from __future__ import annotations

import ast
from pathlib import Path


class SourceTree:
    def __init__(self, root: Path):
        self.root = root  # the directory holding the top-level package (e.g. .../vllm-0.33.0)
        self._modules: dict[str, ast.Module | None] = {}

    # -- modules ---------------------------------------------------------------------------------------------

    def path_of(self, module: str) -> Path | None:
        base = self.root / module.replace(".", "/")
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def module(self, name: str) -> ast.Module | None:
        if name not in self._modules:
            path = self.path_of(name)
            self._modules[name] = ast.parse(path.read_text(encoding="utf-8")) if path else None
        return self._modules[name]

    def relpath(self, module: str) -> str:
        path = self.path_of(module)
        return str(path.relative_to(self.root)) if path else module.replace(".", "/") + ".py"

    def where(self, module: str, node: ast.AST) -> str:
        """`path/inside/package.py:LINE` of a node."""
        return f"{self.relpath(module)}:{getattr(node, 'lineno', 0)}"

    # -- names ---------------------------------------------------------------------------------------------

    def top_level(self, module: str, name: str) -> ast.AST | None:
        """The class, function or assignment that binds NAME at module level (also under `if TYPE_CHECKING:`)."""
        tree = self.module(module)
        if tree is None:
            return None
        for node in _module_statements(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
                return node
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return node
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name \
                    and node.value is not None:
                return node
            if type(node).__name__ == "TypeAlias" and getattr(node.name, "id", None) == name:  # `type X = ...`
                return node
        return None

    def imported_from(self, module: str, name: str) -> tuple[str, str] | None:
        """(module, original name) a module-level `from M import name [as alias]` points at."""
        tree = self.module(module)
        if tree is None:
            return None
        package = module if self.path_of(module) and self.path_of(module).name == "__init__.py" \
            else module.rpartition(".")[0]
        for node in _module_statements(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        source = node.module or ""
                        if node.level:
                            base = package.split(".")
                            base = base[: len(base) - node.level + 1]
                            source = ".".join(base + ([source] if source else []))
                        return source, alias.name
        return None

    def resolve(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """(module, node) binding NAME as seen from MODULE, following imports (and package re-exports)."""
        if depth > 8:
            return None
        node = self.top_level(module, name)
        if node is not None:
            return module, node
        origin = self.imported_from(module, name)
        if origin is None:
            return None
        source, original = origin
        if self.path_of(source) is None:
            # `from package import submodule`
            return None
        return self.resolve(source, original, depth + 1)

    def string_constant(self, module: str, name: str) -> str | None:
        found = self.resolve(module, name)
        if found and isinstance(found[1], (ast.Assign, ast.AnnAssign)):
            return literal_string(found[1].value, self, found[0])
        return None


def _module_statements(tree: ast.Module):
    for node in tree.body:
        yield node
        if isinstance(node, ast.If):  # if TYPE_CHECKING: / else:
            yield from node.body
            yield from node.orelse
        elif isinstance(node, ast.Try):
            yield from node.body
            for handler in node.handlers:
                yield from handler.body


def literal_string(node: ast.AST | None, tree: SourceTree | None = None, module: str = "") -> str | None:
    """The text of a string expression: constants, implicit concatenation, `+`, f-strings (placeholders kept as
    {…}), and names of string constants."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{…}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = literal_string(node.left, tree, module), literal_string(node.right, tree, module)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.Name) and tree is not None:
        return tree.string_constant(module, node.id)
    return None


def class_fields(tree: SourceTree, module: str, cls: ast.ClassDef) -> list[tuple[str, ast.AnnAssign, str, str]]:
    """(name, field node, module, docstring) of a dataclass-like class, base classes first (as dataclasses order
    them); ClassVar and private names left out."""
    fields: dict[str, tuple[str, ast.AnnAssign, str, str]] = {}
    for base in cls.bases:
        name = base.id if isinstance(base, ast.Name) else None
        found = tree.resolve(module, name) if name else None
        if found and isinstance(found[1], ast.ClassDef):
            for entry in class_fields(tree, found[0], found[1]):
                fields[entry[0]] = entry
    body = cls.body
    for index, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        if name.startswith("_") or "ClassVar" in ast.unparse(node.annotation):
            continue
        doc = ""
        following = body[index + 1] if index + 1 < len(body) else None
        if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant) \
                and isinstance(following.value.value, str):
            doc = following.value.value
        fields[name] = (name, node, module, doc)
    return list(fields.values())


def decorator_names(cls: ast.ClassDef) -> list[str]:
    names = []
    for decorator in cls.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        names.append(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return names
