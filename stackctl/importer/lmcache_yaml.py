"""Reading an LMCache config file: PyYAML when installed, else a reader for the flat `key: value` form; and the
limits on what the importer reads (a launch script or LMCache config is a few kilobytes, so a huge input or a YAML
alias bomb is refused with a clear message in well under a second, instead of eating memory and time)."""

from __future__ import annotations


from stackctl.errors import StackctlError
from stackctl.importer.draft import clean

# -- limits on what the importer reads -----------------------------------------------------------------------------

MAX_INPUT_BYTES = 1_000_000  # launch scripts and LMCache configs in the wild are under 20 kB
MAX_YAML_NODES = 100_000  # values once aliases are expanded; an LMCache config has a few dozen


def check_yaml_size_and_aliases(text: str, source: str) -> None:
    """Refuse a YAML text that is too large, or whose aliases expand to more values than a config could hold (a
    "billion laughs" document is small, but every walk over its loaded value visits billions of nodes)."""
    if len(text) > MAX_INPUT_BYTES:
        raise StackctlError(f"{source}: {len(text):,} characters, more than an LMCache config can be "
                            f"({MAX_INPUT_BYTES:,}) (fix: check the file)")
    if "*" not in text:
        return
    import yaml

    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError):
        return  # the loader reports the problem itself
    if root is not None and _expanded_size(root) > MAX_YAML_NODES:
        raise StackctlError(f"{source}: its YAML aliases (*name) expand to more than {MAX_YAML_NODES:,} values: "
                            "refused, an LMCache config is a few dozen (fix: write the values out)")


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


# -- the reader ----------------------------------------------------------------------------------------------------

def read_lmcache_yaml(text: str, source: str = "LMCache config") -> dict:
    """An LMCache config file as a dict, read as LMCache reads it (PyYAML's safe_load)."""
    import yaml

    check_yaml_size_and_aliases(text, source)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise StackctlError(f"{source}: not valid YAML: {clean(str(exc))}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise StackctlError(f"{source}: must be a mapping of LMCache keys")
    return data
