#!/usr/bin/env python3
"""The HIP images' package pins (scripts/hip-toolchain.pins): read them, hold an image to them, refresh them.

    python scripts/hip_pins.py check TAG IMAGE...    exit 1 naming each package of IMAGE (and the images it is built
                                                     on) whose installed version is not the pinned one
    python scripts/hip_pins.py refresh TAG IMAGE     write IMAGE's pins from what TAG has installed now
    python scripts/hip_pins.py facts                 the facts the tests read, as NAME=value lines

IMAGE is a pin file's image column: toolchain, test-torch (FROM toolchain) or kernels (FROM test-torch).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

PINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hip-toolchain.pins")
IMAGES = ("toolchain", "test-torch", "kernels")  # each built FROM the one before it, so it has its packages too


class PinError(Exception):
    pass


def read_pins(path: str = PINS) -> dict[str, dict[str, str]]:
    """{image: {package: version}} in file order."""
    pins: dict[str, dict[str, str]] = {image: {} for image in IMAGES}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) != 3 or fields[0] not in pins:
                raise PinError(f"{path}:{number}: expected `IMAGE PACKAGE VERSION` with IMAGE one of "
                               f"{', '.join(IMAGES)}, got {line.strip()!r}")
            pins[fields[0]][fields[1]] = fields[2]
    return pins


def held(pins: dict[str, dict[str, str]], image: str) -> dict[str, str]:
    """The packages an image must have at their pinned versions: its own and those of the images under it."""
    wanted: dict[str, str] = {}
    for name in IMAGES[:IMAGES.index(image) + 1]:
        wanted.update(pins[name])
    return wanted


def drift(wanted: dict[str, str], installed: dict[str, str]) -> list[str]:
    """One line per package not installed at its pinned version."""
    lines = []
    for package, version in wanted.items():
        found = installed.get(package)
        if found != version:
            lines.append(f"{package}: pinned {version}, installed {found or 'nothing'}")
    return lines


def facts(pins: dict[str, dict[str, str]]) -> dict[str, str]:
    """What the tests expect of the toolchain, from the pinned package names: LLVM's major version (clang-N) and the
    HIP runtime's soname (Debian names a library's package after its soname: libamdhip64-N holds libamdhip64.so.N)."""
    toolchain = pins["toolchain"]
    return {"LLVM_MAJOR": _only(toolchain, r"clang-(\d+)", "clang-N"),
            "HIP_SONAME": "libamdhip64.so." + _only(toolchain, r"libamdhip64-(\d+)", "libamdhip64-N")}


def _only(packages: dict[str, str], pattern: str, what: str) -> str:
    found = [m.group(1) for m in (re.fullmatch(pattern, name) for name in packages) if m]
    if len(found) != 1:
        raise PinError(f"{PINS}: the toolchain pins name {len(found)} {what} packages; exactly one is needed")
    return found[0]


def installed_versions(tag: str, packages: list[str]) -> dict[str, str]:
    """{package: version} of those installed in the image (dpkg's database, read in a throwaway container)."""
    result = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "dpkg-query", tag, "-W",
                             "-f", "${Package}=${Version}\\n", *packages], capture_output=True, text=True)
    if not result.stdout and result.returncode != 0 and "no packages found" not in result.stderr:
        raise PinError(f"cannot read the packages of {tag}: {result.stderr.strip()}")
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def check(tag: str, image: str, pins: dict[str, dict[str, str]]) -> list[str]:
    wanted = held(pins, image)
    return drift(wanted, installed_versions(tag, list(wanted)))


def refresh(tag: str, image: str, path: str = PINS) -> list[str]:
    """Rewrite IMAGE's version column from TAG; returns the lines that changed."""
    pins = read_pins(path)
    now = installed_versions(tag, list(pins[image]))
    missing = [package for package in pins[image] if package not in now]
    if missing:
        raise PinError(f"{tag} has none of {', '.join(missing)}; add or drop them in {path} by hand")
    changed, out = [], []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.split("#", 1)[0].split()
            if len(fields) == 3 and fields[0] == image and now[fields[1]] != fields[2]:
                changed.append(f"{fields[1]}: {fields[2]} -> {now[fields[1]]}")
                line = line.replace(fields[2], now[fields[1]].ljust(len(fields[2])), 1)
            out.append(line)
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.writelines(out)
    os.replace(temporary, path)
    return changed


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["facts"] and len(argv) == 1:
            print("\n".join(f"{name}={value}" for name, value in facts(read_pins()).items()))
            return 0
        if argv[:1] == ["check"] and len(argv) >= 3 and set(argv[2:]) <= set(IMAGES):
            pins = read_pins()
            lines = [line for image in argv[2:] for line in check(argv[1], image, pins)]
            for line in dict.fromkeys(lines):
                print(f"{argv[1]}: {line}", file=sys.stderr)
            if lines:
                print(f"{argv[1]} is not the pinned HIP toolchain ({PINS}): Debian sid has moved on (fix: take the "
                      "new versions on purpose with `scripts/make-hip-toolchain.sh --kernels --refresh-pins`, then "
                      "run the HIP tests)", file=sys.stderr)
                return 1
            print(f"{argv[1]}: every pinned package at its pinned version")
            return 0
        if argv[:1] == ["refresh"] and len(argv) == 3 and argv[2] in IMAGES:
            for line in refresh(argv[1], argv[2]) or ["no change"]:
                print(f"{argv[2]} pins: {line}")
            return 0
    except PinError as exc:
        print(f"hip_pins: {exc}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
