"""Facts of one vLLM release, read from its source: the `vllm serve` flags, compilation_config / pass_config keys,
the KV connector registry and the environment variables vLLM knows.

Flags: `make_arg_parser` (vllm/entrypoints/{openai,launchers,common}/cli_args.py) is walked in order, and so is every
`X.add_cli_args(parser)` it calls (FrontendArgs, AsyncEngineArgs -> EngineArgs in vllm/engine/arg_utils.py). Each
`add_argument` call gives the flag names; its `**X_kwargs["field"]` names the config dataclass field whose type
decides the value (typekind.flag_kind); explicit keywords (action, type, choices, nargs, deprecated, help) override.
"""

from __future__ import annotations

import ast
import re

from factgen import offload_keys, typekind
from factgen.pysource import SourceTree, class_fields, literal_string

CLI_ARGS_MODULES = ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args",
                    "vllm.entrypoints.common.cli_args")
DEPRECATION = re.compile(r"\[deprecated\]|\bis deprecated\b|\bare deprecated\b|deprecated and will be removed|"
                         r"\bdeprecated since\b|\bdeprecated in favou?r\b", re.I)


def extract(tree: SourceTree) -> dict:
    return {
        "flags": flags(tree),
        "compilation_config": config_keys(tree, "vllm.config.compilation", "CompilationConfig"),
        "pass_config": config_keys(tree, "vllm.config.compilation", "PassConfig"),
        "kv_connectors": kv_connectors(tree),
        "kv_connector_modules": kv_connector_modules(tree),
        "kv_connector_keys": offload_keys.extract(tree),
        "env": env_vars(tree),
        "hash_functions": hash_functions(tree),
        "none_hash": none_hash(tree),
    }


# -- flags -------------------------------------------------------------------------------------------------------

def flags(tree: SourceTree) -> dict:
    module = next((m for m in CLI_ARGS_MODULES if _function(tree, m, "make_arg_parser")), None)
    if module is None:
        raise SystemExit("no make_arg_parser in " + ", ".join(CLI_ARGS_MODULES))
    walker = _ParserWalker(tree)
    walker.walk(module, _function(tree, module, "make_arg_parser"), None)
    return dict(sorted(walker.flags.items()))


def _function(tree: SourceTree, module: str, name: str):
    node = tree.top_level(module, name)
    return node if isinstance(node, ast.FunctionDef) else None


def _method(tree: SourceTree, module: str, cls: ast.ClassDef, name: str):
    """(module, method) of CLS or its first base class that defines it."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return module, node
    for base in cls.bases:
        found = tree.resolve(module, base.id) if isinstance(base, ast.Name) else None
        if found and isinstance(found[1], ast.ClassDef):
            method = _method(tree, found[0], found[1], name)
            if method:
                return method
    return None


class _ParserWalker:
    def __init__(self, tree: SourceTree):
        self.tree = tree
        self.flags: dict[str, dict] = {}
        self.seen: set[tuple[str, int]] = set()

    def walk(self, module: str, func: ast.FunctionDef, bound: tuple[str, ast.ClassDef] | None) -> None:
        if (module, func.lineno) in self.seen and bound is None:
            return
        self.seen.add((module, func.lineno))
        state: dict = {"kwargs": {}, "overrides": {}, "removed_choices": {}}
        for statement in _in_order(func.body):
            self._statement(module, statement, bound, state)

    def _statement(self, module, node, bound, state) -> None:
        if isinstance(node, ast.Assign):
            self._assign(module, node, bound, state)
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and _attr(node.iter.func) == "items":
            source = node.iter.func.value
            if isinstance(source, ast.Name) and source.id in state["kwargs"]:
                self._loop(module, node, state["kwargs"][source.id], state)
            return
        for call in _calls(node):
            name = _attr(call.func)
            if name == "remove" and isinstance(call.func, ast.Attribute) and call.args:
                self._remove_choice(module, call, state)
            elif name == "add_argument":
                self._add_argument(module, call, state)
            elif name == "add_cli_args" and isinstance(call.func, ast.Attribute):
                self._nested_cli_args(module, call.func.value, bound)

    def _assign(self, module, node: ast.Assign, bound, state) -> None:
        target = node.targets[0]
        value = node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Call) and _attr(value.func) == "get_kwargs":
            cls_ref = value.args[0] if value.args else None
            found = self._class(module, cls_ref, bound)
            if found:
                state["kwargs"][target.id] = found
                self._customize(found, target.id, state)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Subscript):
            var, field_name, key = _name_of(target.value.value), _const(target.value.slice), _const(target.slice)
            if var and field_name and key:
                state["overrides"].setdefault((var, field_name), {})[key] = (module, value)

    def _remove_choice(self, module, call: ast.Call, state) -> None:
        """`X_kwargs["field"]["choices"].remove(VALUE)` (e.g. --all2all-backend loses `passthrough`)."""
        target = call.func.value
        if isinstance(target, ast.Subscript) and _const(target.slice) == "choices" \
                and isinstance(target.value, ast.Subscript):
            var, field_name = _name_of(target.value.value), _const(target.value.slice)
            value = literal_string(call.args[0], self.tree, module)
            if var and field_name and value is not None:
                state["removed_choices"].setdefault((var, field_name), set()).add(value)

    def _customize(self, found, var: str, state) -> None:
        """Apply the _customize_cli_kwargs of the class and its bases (they modify the get_kwargs result)."""
        module, cls = found
        chain = []
        while cls is not None:
            method = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_customize_cli_kwargs"),
                          None)
            if method:
                chain.append((module, method))
            base = cls.bases[0] if cls.bases else None
            resolved = self.tree.resolve(module, base.id) if isinstance(base, ast.Name) else None
            module, cls = resolved if resolved and isinstance(resolved[1], ast.ClassDef) else (module, None)
        for method_module, method in reversed(chain):
            parameter = method.args.args[1].arg if len(method.args.args) > 1 else var
            for statement in _in_order(method.body):
                if isinstance(statement, ast.Assign):
                    target = statement.targets[0]
                    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Subscript) \
                            and _name_of(target.value.value) == parameter:
                        field_name, key = _const(target.value.slice), _const(target.slice)
                        if field_name and key:
                            state["overrides"].setdefault((var, field_name), {})[key] = (method_module,
                                                                                         statement.value)

    def _class(self, module, ref, bound):
        if isinstance(ref, ast.Name) and ref.id == "cls" and bound:
            return bound
        if isinstance(ref, ast.Name):
            found = self.tree.resolve(module, ref.id)
            if found and isinstance(found[1], ast.ClassDef):
                return found
        return None

    def _nested_cli_args(self, module, ref, bound) -> None:
        found = self._class(module, ref, bound)
        if not found:
            return
        method = _method(self.tree, found[0], found[1], "add_cli_args")
        if method:
            self.walk(method[0], method[1], found)

    def _loop(self, module, node: ast.For, found, state) -> None:
        """`for key, value in X_kwargs.items(): group.add_argument(f"--{key...}", **value)`: every field."""
        var = _name_of(node.iter.func.value)
        call = next((c for c in _calls_deep(node) if _attr(c.func) == "add_argument"), None)
        if call is None:
            return
        for name, field_node, field_module, doc in class_fields(self.tree, found[0], found[1]):
            facts = self._field_facts(field_module, field_node, doc)
            facts = self._apply(facts, state["overrides"].get((var, name), {}))
            self._record([f"--{name.replace('_', '-')}"], facts, self.tree.where(module, call))

    def _field_facts(self, module, field_node: ast.AnnAssign, doc: str) -> dict:
        facts = typekind.flag_kind(typekind.atoms(self.tree, module, field_node.annotation))
        facts["type_at"] = self.tree.where(module, field_node)
        if DEPRECATION.search(doc or ""):
            facts["deprecated"] = _one_line(doc)
        return facts

    def _field(self, module, var_node, field_name, state):
        var = _name_of(var_node)
        found = state["kwargs"].get(var)
        if not found or not field_name:
            return None, var
        for name, node, field_module, doc in class_fields(self.tree, found[0], found[1]):
            if name == field_name:
                return self._field_facts(field_module, node, doc), var
        return None, var

    def _add_argument(self, module, call: ast.Call, state) -> None:
        names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names or not all(n.startswith("-") for n in names):
            return  # a positional (model_tag), or a computed name
        facts: dict = {}
        explicit: dict = {}
        for keyword in call.keywords:
            if keyword.arg is not None:
                explicit[keyword.arg] = (module, keyword.value)
                continue
            spread = keyword.value
            if isinstance(spread, ast.Dict):  # **{**X_kwargs["f"], "default": None}
                for key, value in zip(spread.keys, spread.values):
                    if key is None:
                        facts = self._spread(module, value, state) or facts
                    elif _const(key):
                        explicit[_const(key)] = (module, value)
            else:
                facts = self._spread(module, spread, state) or facts
        facts = self._apply(dict(facts), explicit)
        self._record(names, facts, self.tree.where(module, call))

    def _spread(self, module, node, state):
        if isinstance(node, ast.Subscript):
            facts, var = self._field(module, node.value, _const(node.slice), state)
            if facts is not None:
                removed = state["removed_choices"].get((var, _const(node.slice)), set())
                if removed and "choices" in facts:
                    facts["choices"] = [c for c in facts["choices"] if c not in removed]
                return self._apply(facts, state["overrides"].get((var, _const(node.slice)), {}))
        return None

    def _apply(self, facts: dict, keywords: dict) -> dict:
        """Explicit add_argument keywords (or kwargs overrides) over the field's facts."""
        for key, (module, value) in keywords.items():
            text = ast.unparse(value)
            if key == "action":
                if "BooleanOptionalAction" in text:
                    facts.update(kind="bool")
                    facts.pop("choices", None)
                elif text.strip("'\"") in ("store_true", "store_false", "store_const"):
                    facts.update(kind="flag")
                    facts.pop("choices", None)
                elif text.strip("'\"") == "append":
                    facts["repeat"] = True
                if "Deprecated" in text:
                    facts.setdefault("deprecated", "deprecated (" + text + ")")
            elif key == "type":
                facts.update(_type_keyword(value, facts))
            elif key == "choices":
                choices = _choices(self.tree, module, value)
                if choices is not None:
                    facts["choices"] = choices
            elif key == "nargs":
                nargs = _const(value)
                if nargs in ("+", "*"):
                    facts["kind"] = "list"
                elif nargs == "?":
                    facts["optional_value"] = True
            elif key == "deprecated" and text == "True":
                facts.setdefault("deprecated", "deprecated")
            elif key == "help":
                help_text = literal_string(value, self.tree, module) or ""
                if DEPRECATION.search(help_text):
                    facts["deprecated"] = _one_line(help_text)
        facts.setdefault("kind", "str")
        return facts

    def _record(self, names: list[str], facts: dict, where: str) -> None:
        primary = next((n for n in names if n.startswith("--")), names[0])
        entry = {"kind": facts["kind"], **{k: v for k, v in facts.items() if k != "kind"}, "at": where}
        if len(names) > 1:
            entry["aliases"] = [n for n in names if n != primary]
        self.flags[primary] = entry


def _type_keyword(value: ast.AST, facts: dict) -> dict:
    text = ast.unparse(value)
    out: dict = {}
    nullable = text.startswith("optional_type(")
    inner = value.args[0] if nullable and isinstance(value, ast.Call) and value.args else value
    inner_text = ast.unparse(inner)
    if inner_text in ("int", "float", "str"):
        out["kind"] = inner_text if facts.get("kind") != "list" else "list"
        if facts.get("kind") == "list":
            out["element"] = inner_text
    elif "json" in inner_text or "loads" in inner_text:
        out["kind"] = "json"
    elif "int" in inner_text:
        out["kind"] = "int"
    elif "float" in inner_text:
        out["kind"] = "float"
    elif facts.get("kind") not in (None, "str"):
        out["kind"] = facts["kind"]
    else:
        out["kind"] = "str"
    if nullable:
        out["nullable"] = True
    return out


def _choices(tree, module, value) -> list[str] | None:
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        items = [_const(e) if _const(e) is not None else getattr(e, "value", None) for e in value.elts]
        return sorted(str(i) for i in items if i is not None) if all(i is not None for i in items) else None
    if isinstance(value, ast.Call) and _attr(value.func) == "get_args" and value.args:
        members = typekind.atoms(tree, module, value.args[0])
        literal = next((m[1] for m in members if m[0] == "literal"), None)
        return sorted(str(v) for v in literal) if literal else None
    return None


# -- config keys, connectors, environment -------------------------------------------------------------------------

def config_keys(tree: SourceTree, module: str, class_name: str) -> dict:
    found = tree.resolve(module, class_name)
    if not found or not isinstance(found[1], ast.ClassDef):
        return {}
    keys = {}
    for name, node, field_module, doc in class_fields(tree, found[0], found[1]):
        entry = typekind.value_kind(typekind.atoms(tree, field_module, node.annotation))
        if DEPRECATION.search(doc or ""):
            entry["deprecated"] = _one_line(doc)
        entry["at"] = tree.where(field_module, node)
        keys[name] = entry
    return dict(sorted(keys.items()))


def kv_connectors(tree: SourceTree) -> dict:
    module = "vllm.distributed.kv_transfer.kv_connector.factory"
    parsed = tree.module(module)
    names = {}
    for node in ast.walk(parsed) if parsed else ():
        if isinstance(node, ast.Call) and _attr(node.func) == "register_connector" and node.args:
            name = _const(node.args[0])
            if name:
                names[name] = tree.where(module, node)
    return dict(sorted(names.items()))


def kv_connector_modules(tree: SourceTree) -> dict:
    """The module each registered connector is loaded from (`register_connector(name, module_path, class)`): LMCache's
    connectors are the ones in an `lmcache` module, whatever their names."""
    module = "vllm.distributed.kv_transfer.kv_connector.factory"
    parsed = tree.module(module)
    modules = {}
    for node in ast.walk(parsed) if parsed else ():
        if isinstance(node, ast.Call) and _attr(node.func) == "register_connector" and len(node.args) >= 2:
            name, path = _const(node.args[0]), _const(node.args[1])
            if name and path:
                modules[name] = path
    return dict(sorted(modules.items()))


HASHING_MODULES = ("vllm.utils.hashing", "vllm.utils")
KV_CACHE_UTILS = "vllm.v1.core.kv_cache_utils"


def hash_functions(tree: SourceTree) -> dict:
    """The names `get_hash_fn_by_name` resolves (`if hash_fn_name == "sha256": return sha256`): what
    --prefix-caching-hash-algo and LMCache's pre_caching_hash_algorithm can name; LMCache falls back to Python's
    builtin hash for any other name."""
    for module in HASHING_MODULES:
        function = _function(tree, module, "get_hash_fn_by_name")
        if function is None:
            continue
        names = {}
        for node in ast.walk(function):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and node.test.comparators:
                name = _const(node.test.comparators[0])
                returned = next((n.value for n in node.body if isinstance(n, ast.Return)), None)
                if name and _name_of(returned):
                    names[name] = {"function": _name_of(returned), "at": tree.where(module, node)}
        return dict(sorted(names.items()))
    return {}  # before vLLM 0.10 (no get_hash_fn_by_name): LMCache takes Python's builtin hash


def none_hash(tree: SourceTree) -> dict:
    """How `init_none_hash` seeds NONE_HASH (the root of every block-hash chain, and of LMCache's chunk keys) when
    PYTHONHASHSEED is unset: from `os.urandom` for every hash function (`random`), or from a fixed default seed
    except for the functions listed as not collision resistant (`fixed`, with `random_for`). With PYTHONHASHSEED
    set, NONE_HASH is `hash_fn(PYTHONHASHSEED)` in every release."""
    function = _function(tree, KV_CACHE_UTILS, "init_none_hash")
    if function is None:  # before vLLM 0.10: NONE_HASH is set when the module loads; LMCache uses 0
        bound = tree.top_level(KV_CACHE_UTILS, "NONE_HASH")
        if bound is None:
            raise SystemExit("vllm/v1/core/kv_cache_utils.py: neither init_none_hash nor NONE_HASH")
        return {"unset": "absent", "at": tree.where(KV_CACHE_UTILS, bound)}
    resolve = _function(tree, KV_CACHE_UTILS, "resolve_none_hash_seed")
    default = tree.top_level(KV_CACHE_UTILS, "DEFAULT_NONE_HASH_SEED")
    listed = tree.top_level(KV_CACHE_UTILS, "_NON_CRYPTO_HASH_FUNCTIONS")
    if resolve is not None and default is not None and listed is not None:
        names = sorted(n.id for n in ast.walk(listed) if isinstance(n, ast.Name) and n.id != "frozenset"
                       and n.id != "_NON_CRYPTO_HASH_FUNCTIONS")
        urandom = next(n for n in ast.walk(resolve) if isinstance(n, ast.Call) and _attr(n.func) == "urandom")
        return {"unset": "fixed", "default_seed": _const(getattr(default, "value", None)),
                "random_for": names, "at": tree.where(KV_CACHE_UTILS, resolve),
                "random_at": tree.where(KV_CACHE_UTILS, urandom), "default_at": tree.where(KV_CACHE_UTILS, default)}
    urandom = next((n for n in ast.walk(function) if isinstance(n, ast.Call) and _attr(n.func) == "urandom"), None)
    if urandom is None:
        raise SystemExit("vllm/v1/core/kv_cache_utils.py: init_none_hash neither draws os.urandom nor resolves a "
                         "default seed: teach factgen/vllm_facts.none_hash this release")
    return {"unset": "random", "at": tree.where(KV_CACHE_UTILS, function),
            "random_at": tree.where(KV_CACHE_UTILS, urandom)}


def env_vars(tree: SourceTree) -> dict:
    module = "vllm.envs"
    bound = tree.top_level(module, "environment_variables")
    value = getattr(bound, "value", None)
    if not isinstance(value, ast.Dict):
        return {}
    return dict(sorted((key.value, tree.where(module, key)) for key in value.keys
                       if isinstance(key, ast.Constant) and isinstance(key.value, str)))


# -- small AST helpers ---------------------------------------------------------------------------------------

def _in_order(body):
    """Statements of a body in source order, compound statements followed into (if/with/try/for bodies)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.With, ast.Try)):
            yield from _in_order(node.body)
            yield from _in_order(getattr(node, "orelse", []))
            for handler in getattr(node, "handlers", []):
                yield from _in_order(handler.body)


def _calls(node):
    """Calls in a simple statement (not descending into nested compound statements)."""
    if isinstance(node, (ast.If, ast.With, ast.Try, ast.For, ast.While, ast.FunctionDef, ast.ClassDef)):
        return []
    return sorted((n for n in ast.walk(node) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))


def _calls_deep(node):
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _attr(node) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _name_of(node) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _const(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 240 else text[:237] + "..."
