"""Facts of one LMCache release, read from its source: the config keys of lmcache/v1/config.py (`_CONFIG_DEFINITIONS`:
type, default, env converter; the variable LMCACHE_<KEY> that sets each), the renamed and deprecated keys
(`_CONFIG_ALIASES`, `_DEPRECATED_CONFIGS`), and the `remote_url` schemes of the remote connector adapters
(lmcache/v1/storage_backend/connector/*_adapter.py: the scheme each adapter's `__init__` passes up, and the prefixes
its `can_parse` accepts), and LMCache's own server (multiprocess mode): where the `lmcache server` command is
defined, the flags it takes (every `add_argument` of the modules that build its parser) and the L2 adapter types
its `--l2-adapter` accepts (`register_l2_adapter_type` calls). A release without the command has none of these.
"""

from __future__ import annotations

import ast
import re

from factgen.pysource import SourceTree, literal_string

CONFIG = "lmcache.v1.config"
CONNECTORS = "lmcache/v1/storage_backend/connector"
SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)://")
ENV_NAME = re.compile(r"^LMCACHE_[A-Z0-9_]+$")


def extract(tree: SourceTree) -> dict:
    return {
        "config": config_keys(tree),
        "aliases": _string_dict(tree, "_CONFIG_ALIASES"),
        "deprecated": _string_dict(tree, "_DEPRECATED_CONFIGS"),
        "env_prefix": env_prefix(tree),
        "remote_url_schemes": remote_url_schemes(tree),
        "env_read": env_read(tree),
        "python_fallback": python_fallback(tree),
        "chunk_hash": chunk_hash(tree),
        **mp_server(tree),
    }


# The pure-Python/torch stand-in for LMCache's native ops under each name it has had (LMCache#3338 renamed the
# first to the second; 0.5.3 moved the code into the platform package).
FALLBACK_MODULES = ("lmcache.non_cuda_equivalents", "lmcache.python_ops_fallback", "lmcache.v1.platform.torch_ops")


def python_fallback(tree: SourceTree) -> dict:
    """Which fallback module the release ships (the first of FALLBACK_MODULES with a source file) and where LMCache
    first names it as a module to import (an `import_module("...")` string or a `from ... import`)."""
    for name in FALLBACK_MODULES:
        if tree.path_of(name) is None:
            continue
        return {"module": name, "file": tree.relpath(name), "imported_at": _first_import(tree, name)}
    return {"module": None, "file": None, "imported_at": None}


def _first_import(tree: SourceTree, name: str) -> str | None:
    for path in sorted((tree.root / "lmcache").rglob("*.py")):
        module = ".".join(path.relative_to(tree.root).with_suffix("").parts)
        parsed = tree.module(module)
        for node in sorted(ast.walk(parsed), key=lambda n: getattr(n, "lineno", 0)) if parsed else ():
            if isinstance(node, ast.ImportFrom) and node.module == name:
                return tree.where(module, node)
            if isinstance(node, ast.Constant) and node.value == name:
                return tree.where(module, node)
    return None


SERVER_COMMAND = "lmcache.cli.commands.server"
# The modules whose argument groups `lmcache server` composes (lmcache/cli/commands/server.py: add_arguments).
SERVER_ARG_MODULES = ("lmcache.v1.multiprocess.config", "lmcache.v1.distributed.config",
                      "lmcache.v1.distributed.l2_adapters.config", "lmcache.v1.mp_observability.config")
L2_ADAPTERS = "lmcache/v1/distributed/l2_adapters"


def mp_server(tree: SourceTree) -> dict:
    """{"mp_server": {"command": file:line}, "mp_server_flags": {flag: file:line}, "l2_adapter_types": {type:
    file:line}}; empty sections when the release has no `lmcache server` command."""
    module = tree.module(SERVER_COMMAND)
    if module is None:
        return {"mp_server": {}, "mp_server_flags": {}, "l2_adapter_types": {}}
    command = next((node for node in ast.walk(module) if isinstance(node, ast.ClassDef)), module)
    flags: dict[str, str] = {}
    for name in SERVER_ARG_MODULES:
        parsed = tree.module(name)
        for node in ast.walk(parsed) if parsed is not None else ():
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                        flags.setdefault(arg.value, tree.where(name, node))
    adapters: dict[str, str] = {}
    for path in sorted((tree.root / L2_ADAPTERS).glob("*.py")):
        name = ".".join(path.relative_to(tree.root).with_suffix("").parts)
        parsed = tree.module(name)
        for node in ast.walk(parsed) if parsed is not None else ():
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "register_l2_adapter_type"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                adapters.setdefault(node.args[0].value, tree.where(name, node))
    return {"mp_server": {"command": tree.where(SERVER_COMMAND, command)},
            "mp_server_flags": dict(sorted(flags.items())), "l2_adapter_types": dict(sorted(adapters.items()))}


def config_keys(tree: SourceTree) -> dict:
    bound = tree.top_level(CONFIG, "_CONFIG_DEFINITIONS")
    value = getattr(bound, "value", None)
    if not isinstance(value, ast.Dict):
        raise SystemExit("lmcache/v1/config.py: no _CONFIG_DEFINITIONS dict")
    keys = {}
    for key, spec in zip(value.keys, value.values):
        if not (isinstance(key, ast.Constant) and isinstance(spec, ast.Dict)):
            continue
        fields = {k.value: v for k, v in zip(spec.keys, spec.values) if isinstance(k, ast.Constant)}
        entry = {"type": _type_text(fields.get("type"))}
        default = fields.get("default")
        try:
            entry["default"] = ast.literal_eval(default) if default is not None else None
        except ValueError:
            entry["default"] = ast.unparse(default)
        entry["at"] = tree.where(CONFIG, key)
        keys[key.value] = entry
    return dict(sorted(keys.items()))


def _type_text(node) -> str:
    """`Optional[str]` -> "str?", `list[str]` / `List[str]` -> "list[str]", `Optional[dict]` -> "dict?"."""
    if node is None:
        return "any"
    text = ast.unparse(node).replace("typing.", "").replace("List[", "list[").replace("Dict[", "dict[")
    optional = re.fullmatch(r"Optional\[(.*)\]", text)
    if optional:
        return optional.group(1) + "?"
    union = re.fullmatch(r"Union\[(.*), None\]|(.*) \| None", text)
    if union:
        return (union.group(1) or union.group(2)) + "?"
    return text


def _string_dict(tree: SourceTree, name: str) -> dict:
    bound = tree.top_level(CONFIG, name)
    value = getattr(bound, "value", None)
    if not isinstance(value, ast.Dict):
        return {}
    out = {}
    for key, item in zip(value.keys, value.values):
        if isinstance(key, ast.Constant):
            out[key.value] = {"value": literal_string(item, tree, CONFIG), "at": tree.where(CONFIG, key)}
    return dict(sorted(out.items()))


def env_prefix(tree: SourceTree) -> dict:
    """Where LMCache names a key's variable (`f"LMCACHE_{attr_name.upper()}"`)."""
    module = tree.module(CONFIG)
    for node in ast.walk(module) if module else ():
        if isinstance(node, ast.JoinedStr) and literal_string(node, tree, CONFIG) == "LMCACHE_{…}":
            return {"prefix": "LMCACHE_", "case": "upper", "at": tree.where(CONFIG, node)}
    raise SystemExit("lmcache/v1/config.py: the LMCACHE_<KEY> naming was not found")


def remote_url_schemes(tree: SourceTree) -> dict:
    """The schemes `ConnectorManager.create_connector` accepts: it asks each adapter's `can_parse(url)` (base class:
    `url.startswith(self.schema)`, the schema each adapter's `__init__` passes up); an adapter's own `can_parse`
    adds the prefixes it tests `url` for. Only those two methods count: other code of an adapter (a connector
    stripping its own prefix, looking at what follows it) names schemes remote_url cannot start with."""
    schemes: dict[str, str] = {}
    folder = tree.root / CONNECTORS
    for path in sorted(folder.glob("*_adapter.py")) if folder.is_dir() else ():
        module = f"{CONNECTORS.replace('/', '.')}.{path.stem}"
        parsed = tree.module(module)
        methods = [node for node in ast.walk(parsed) if isinstance(node, ast.FunctionDef)
                   and node.name in ("__init__", "can_parse")] if parsed else []
        for method in methods:
            wanted = "__init__" if method.name == "__init__" else "startswith"
            for node in ast.walk(method):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == wanted):
                    continue
                if wanted == "startswith" and not _is_name(node.func.value, _url_argument(method)):
                    continue
                for argument in node.args:
                    values = argument.elts if isinstance(argument, ast.Tuple) else [argument]
                    for value in values:
                        text = literal_string(value)
                        match = SCHEME.match(text or "")
                        if match and match.group(1) not in schemes:
                            schemes[match.group(1)] = tree.where(module, value)
    return dict(sorted(schemes.items()))


def _url_argument(method: ast.FunctionDef) -> str:
    """The name of can_parse's URL parameter (the first after self)."""
    names = [a.arg for a in method.args.args]
    return names[1] if len(names) > 1 else ""


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


TOKEN_DATABASE = "lmcache.v1.token_database"


def chunk_hash(tree: SourceTree) -> dict:
    """How LMCache hashes its chunk keys (lmcache/v1/token_database.py `TokenDatabase.__init__`): the function
    `pre_caching_hash_algorithm` names is looked up in vLLM (`get_hash_fn_by_name`), and any name vLLM does not
    resolve (`builtin`, the default, among them) falls back to Python's `hash` (`return hash`); NONE_HASH, the root of
    every chain, comes from vLLM's `init_none_hash(self.hash_func)`."""
    module = tree.module(TOKEN_DATABASE)
    found = {}
    for node in ast.walk(module) if module else ():
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id == "hash":
            found.setdefault("builtin_fallback", tree.where(TOKEN_DATABASE, node))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "init_none_hash":
            found.setdefault("none_hash_from_vllm", tree.where(TOKEN_DATABASE, node))
    if len(found) != 2:
        raise SystemExit("lmcache/v1/token_database.py: the builtin-hash fallback or the init_none_hash call was not "
                         "found: teach factgen/lmcache_facts.chunk_hash this release")
    return dict(sorted(found.items()))


def env_read(tree: SourceTree) -> dict:
    """Variables LMCache reads by their own name (LMCACHE_CONFIG_FILE, LMCACHE_LOG_LEVEL, ...) besides the
    LMCACHE_<KEY> of each config key: every LMCACHE_* string literal of its code, with its first file:line."""
    found: dict[str, str] = {}
    for path in sorted((tree.root / "lmcache").rglob("*.py")):
        module = ".".join(path.relative_to(tree.root).with_suffix("").parts)
        parsed = tree.module(module)
        for node in ast.walk(parsed) if parsed else ():
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ENV_NAME.match(node.value):
                found.setdefault(node.value, tree.where(module, node))
    return dict(sorted(found.items()))
