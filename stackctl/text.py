"""Small text helpers shared by the rule catalog, the check registry and the checks' messages."""


def clean_doc(text: str) -> str:
    """A docstring as a doc page: first line stripped, the rest dedented (without importing inspect)."""
    lines = text.expandtabs().splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    margin = min(indents) if indents else 0
    return "\n".join([lines[0].strip()] + [line[margin:] for line in lines[1:]]).strip()


def size_text(size_bytes: float) -> str:
    """A size for a message, in the unit that keeps it readable: 59.1 GiB (one decimal: free space, tier sizes),
    64 MiB, 1.024 MiB, 256 KiB (four significant digits: KV chunks), 512 B."""
    if size_bytes >= 1024 ** 3:
        return f"{size_bytes / 1024 ** 3:.1f} GiB"
    for unit, scale in (("MiB", 1024 ** 2), ("KiB", 1024)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.4g} {unit}"
    return f"{size_bytes:.0f} B"
