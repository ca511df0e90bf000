"""Small text helpers shared by the rule catalog, the check registry and the checks' messages."""


def clean_doc(text: str) -> str:
    """A docstring as a doc page: first line stripped, the rest dedented (without importing inspect)."""
    lines = text.expandtabs().splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    margin = min(indents) if indents else 0
    return "\n".join([lines[0].strip()] + [line[margin:] for line in lines[1:]]).strip()


def size_text(size_bytes: float) -> str:
    """A size for a message, in the unit that keeps it readable: 1.5 GiB, 64.0 MiB, 256 KiB, 512 B."""
    for unit, scale in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    if size_bytes >= 1024:
        return f"{size_bytes / 1024:.0f} KiB"
    return f"{size_bytes:.0f} B"
