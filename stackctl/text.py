"""Small text helpers shared by the rule catalog and the check registry."""


def clean_doc(text: str) -> str:
    """A docstring as a doc page: first line stripped, the rest dedented (without importing inspect)."""
    lines = text.expandtabs().splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    margin = min(indents) if indents else 0
    return "\n".join([lines[0].strip()] + [line[margin:] for line in lines[1:]]).strip()
