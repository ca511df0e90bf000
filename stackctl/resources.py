"""Locate the folders that ship with stackctl: recipes/, templates/, playbooks/, probes/, connector/.

In a wheel they live in stackctl/_shipped/<name> (pyproject force-include); in a source checkout or an
editable install they are the top-level folders of the repository.
"""

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def shipped(name: str) -> Path:
    """Path of a shipped folder (``recipes``, ``templates``, ``playbooks``, ``probes`` or ``connector``)."""
    for candidate in (_PACKAGE_DIR / "_shipped" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"stackctl installation is missing its {name}/ folder")
