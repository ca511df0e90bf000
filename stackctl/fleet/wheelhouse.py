"""The wheelhouse a rollout installs stackctl from: a folder of wheels (stackctl and every dependency), so the hosts
need no package index. Given with --wheelhouse, else built from this stackctl's source tree with `pip wheel`."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from stackctl.errors import ExitCode, StackctlError


def wheelhouse_id(directory: str | Path) -> str:
    """A short content hash of a wheelhouse (names and bytes of its wheels): hosts reinstall when it changes."""
    digest = hashlib.sha256()
    wheels = sorted(Path(directory).glob("*.whl"))
    for wheel in wheels:
        digest.update(wheel.name.encode() + b"\0")
        digest.update(hashlib.sha256(wheel.read_bytes()).digest())
    return digest.hexdigest()[:16]


def source_tree() -> Path | None:
    """The source checkout this stackctl runs from (editable install), if any."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "stackctl"' in pyproject.read_text(encoding="utf-8", errors="replace"):
        return root
    return None


def build_wheelhouse(dest: Path, say: Callable[[str], None]) -> Path:
    """`pip wheel SOURCE -w DEST`: stackctl and every dependency as wheels (pip's cache makes repeats quick)."""
    source = source_tree()
    if source is None:
        raise StackctlError("this stackctl was not installed from a source tree, so it cannot build its own wheel "
                            "(fix: pass --wheelhouse DIR made with `pip wheel stackctl -w DIR`)")
    say(f"building the wheelhouse: pip wheel {source}")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q",
                             "--wheel-dir", str(dest), str(source)], capture_output=True, text=True)
    if result.returncode != 0:
        tail = " ".join(result.stderr.strip().splitlines()[-3:])
        raise StackctlError(f"pip wheel failed: {tail} (fix: pass a ready --wheelhouse DIR)", exit_code=ExitCode.COULD_NOT_RUN)
    return dest


def ready_wheelhouse(given: str | None, run_dir: Path, say: Callable[[str], None],
                     dry_run: bool = False) -> tuple[str, str]:
    """The wheelhouse folder and its id: `given`, else one built into the run's folder. A dry run builds nothing
    and names both as made at run time."""
    if dry_run:
        return str(given or "<built at run time>"), "<computed at run time>"
    wheel_dir = str(Path(given).resolve()) if given else str(build_wheelhouse(run_dir / "wheelhouse", say))
    if not list(Path(wheel_dir).glob("stackctl-*.whl")):
        raise StackctlError(f"{wheel_dir}: no stackctl wheel in the wheelhouse (fix: pip wheel stackctl -w DIR)")
    return wheel_dir, wheelhouse_id(wheel_dir)
