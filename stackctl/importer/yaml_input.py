"""Reading YAML inputs (LMCache configs, compose files, Kubernetes manifests) the safe way: PyYAML's safe loader, after
checks on size and aliases.

The limits: a launch script, LMCache config or manifest is a few kilobytes, so a huge input or a YAML alias bomb is
refused with a clear message in well under a second, instead of eating memory and time."""

from __future__ import annotations

from typing import Any

from stackctl.errors import StackctlError
from stackctl.importer.draft import clean

MAX_INPUT_BYTES = 1_000_000  # launch scripts, LMCache configs and manifests in the wild are under 20 kB
MAX_YAML_NODES = 100_000  # values once aliases are expanded; an LMCache config has a few dozen


def load_yaml(text: str, source: str) -> Any:
    """The first document of a YAML text (PyYAML's safe_load, as LMCache reads its config), after the limits."""
    import yaml

    check_yaml_size_and_aliases(text, source)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise StackctlError(f"{source}: not valid YAML: {clean(str(exc))}") from None


def load_yaml_documents(text: str, source: str) -> list[Any]:
    """Every document of a multi-document YAML text (a manifest with `---` separators), after the limits."""
    import yaml

    check_yaml_size_and_aliases(text, source)
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise StackctlError(f"{source}: not valid YAML: {clean(str(exc))}") from None


def check_yaml_size_and_aliases(text: str, source: str) -> None:
    """Refuse a YAML text that is too large, or whose aliases expand to more values than a config could hold (a
    "billion laughs" document is small, but every walk over its loaded value visits billions of nodes)."""
    if len(text) > MAX_INPUT_BYTES:
        raise StackctlError(f"{source}: {len(text):,} characters, more than a launch or LMCache config can be "
                            f"({MAX_INPUT_BYTES:,}) (fix: check the file)")
    if "*" not in text:
        return
    import yaml

    try:
        roots = list(yaml.compose_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except (yaml.YAMLError, RecursionError):
        return  # the loader reports the problem itself
    if sum(_expanded_size(root) for root in roots if root is not None) > MAX_YAML_NODES:
        raise StackctlError(f"{source}: its YAML aliases (*name) expand to more than {MAX_YAML_NODES:,} values: "
                            "refused, a config is a few dozen (fix: write the values out)")


def _expanded_size(root) -> int:
    """Number of nodes with every alias expanded, counted once per distinct node (aliases share the node object),
    children before parents, without recursion."""
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # a node inside itself (`&a [*a]`) never ends: as good as infinite
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else \
            list(node.value) if isinstance(node, yaml.SequenceNode) else []
        if children_done or not children:
            sizes[id(node)] = min(1 + sum(sizes.get(id(c), 1) for c in children), MAX_YAML_NODES + 1)
            open_nodes.discard(id(node))
        elif id(node) in open_nodes:
            return MAX_YAML_NODES + 1
        else:
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(root)]
