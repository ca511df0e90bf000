"""The engine adapter (stackctl/engine/docker_adapter.py) is the only door to Docker: no other module imports docker-py
or calls it, not even its neighbours in stackctl/engine/ (the container's arguments, health waiting).
A module that needs the engine asks the adapter (run_detached, run_to_end, exec_in, logs_text, ...), so the
docker-py keyword arguments, its exceptions and the cleanup on every way out live in one place.

The scan reads each module's syntax tree: `import docker` / `from docker ...`, an attribute of `.containers` or
`.images` (`engine.containers.run`, `engine.images.list`), calls of `.exec_run(`, `.get_archive(` and
`.put_archive(`, and reads of an engine record's fields (`.attrs`) or of what a handle holds (`._native`): callers
hold stackctl's handles (stackctl/engine/handles.py) and ask the adapter for the rest."""

from __future__ import annotations

import ast

from helpers import REPO

PACKAGE = REPO / "stackctl"
DOOR = PACKAGE / "engine" / "docker_adapter.py"
COLLECTIONS = {"containers", "images"}
CALLS = {"exec_run", "get_archive", "put_archive"}
FIELDS = {"attrs", "_native"}
HANDLES = PACKAGE / "engine" / "handles.py"

# Modules outside the adapter that still call docker-py, as "path:line: what". Shrinks to empty; never grows.
ALLOWED: set[str] = set()


def docker_calls(source: str, name: str = "<string>") -> list[str]:
    """Where `source` imports or calls docker-py, as "line: what"."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {alias.name}" for alias in node.names
                      if alias.name.split(".")[0] == "docker"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "docker":
            found.append(f"{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr in COLLECTIONS:
            found.append(f"{node.lineno}: .{node.value.attr}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CALLS:
            found.append(f"{node.lineno}: .{node.func.attr}(")
        elif isinstance(node, ast.Attribute) and node.attr in FIELDS:
            found.append(f"{node.lineno}: .{node.attr}")
    return sorted(set(found), key=lambda text: int(text.split(":")[0]))


def test_only_the_engine_adapter_calls_docker_py():
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in (DOOR, HANDLES):
            continue
        relative = path.relative_to(REPO).as_posix()
        found |= {f"{relative}:{where}" for where in docker_calls(path.read_text(), relative)}
    assert sorted(found - ALLOWED) == [], "docker-py called outside stackctl/engine/docker_adapter.py: add a function to it"
    assert sorted(ALLOWED - found) == [], "moved behind the adapter: remove these from ALLOWED"


def test_the_scan_finds_each_kind_of_call():
    source = ("import docker\nimport docker.errors as e\nfrom docker.types import Mount\n"
              "engine.containers.run('x')\nengine.images.list()\nc.exec_run(['ls'])\nc.get_archive('/p')\n"
              "c.put_archive('/p', b'')\nfrom stackctl.engine import docker_adapter as dk\n"
              "scan.containers['n'] = 1\nwords[0] in scan.containers\nrecipe.image\ndk.exec_in(c, ['ls'])\n"
              "c.attrs['State']\nc._native.reload()\nc.labels\n")
    assert docker_calls(source) == ["1: import docker", "2: import docker.errors", "3: from docker.types import",
                                    "4: .containers.run", "5: .images.list", "6: .exec_run(", "7: .get_archive(",
                                    "8: .put_archive(", "14: .attrs", "15: ._native"]


def test_the_adapter_itself_is_where_docker_py_is_called():
    """The scan sees the adapter's calls (so it would see them elsewhere), and the adapter is skipped by path."""
    kinds = {where.split(": ", 1)[1] for where in docker_calls(DOOR.read_text())}
    assert {"import docker", ".containers.run", ".images.get", ".exec_run(", ".get_archive("} <= kinds


# -- the unit tests: the engine is faked through its interface (fake_engine.FakeEngine), not in docker-py's shapes --

UNIT = REPO / "tests" / "unit"
# The adapter's own tests fake docker-py's objects, at the edge they test (and this file names them to scan for).
IMITATORS = {"test_docker_adapter_logic.py", "test_docker_light.py", "test_engine_door.py"}


def imitations(source: str, name: str = "<string>") -> list[str]:
    """Where a test's source calls, reads or imitates docker-py's objects: what docker_calls finds, and fakes that
    define its methods (`def exec_run`) or its fields (a `"attrs"` key)."""
    found = docker_calls(source, name)
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.FunctionDef) and node.name in CALLS:
            found.append(f"{node.lineno}: def {node.name}")
        elif isinstance(node, ast.Constant) and node.value in FIELDS:
            found.append(f"{node.lineno}: {node.value!r}")
    return sorted(set(found), key=lambda text: int(text.split(":")[0]))


def test_unit_tests_fake_the_engine_through_its_interface_not_in_docker_pys_shapes():
    found = [f"{path.name}:{where}" for path in sorted(UNIT.glob("*.py")) if path.name not in IMITATORS
             for where in imitations(path.read_text(), path.name)]
    assert found == [], "fake the engine with fake_engine.FakeEngine (it implements stackctl/engine/interface.py)"


def test_the_imitation_scan_sees_a_fake_in_docker_pys_shape():
    source = ("class Container:\n    def exec_run(self, argv):\n        pass\n"
              "stub = type('C', (), {'attrs': {'State': {}}})()\nself.attrs = {}\nengine.container_records.get('x')\n")
    assert imitations(source) == ["2: def exec_run", "4: 'attrs'", "5: .attrs"]
