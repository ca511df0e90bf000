"""An in-memory container engine for unit tests of pure logic: the second implementation of
stackctl.engine.interface.EngineInterface (docker_adapter is the first). It holds containers and images as plain
records and hands out the same handles docker_adapter does; what a container would compute (a probe's output, an
exec's answer) is scripted by the test.

    engine = FakeEngine()
    engine.add_image("stackctl/cpu-smoke:abc", labels={...})
    engine.add_container("stackctl-cpu-smoke", image="stackctl/cpu-smoke:abc", env={"PYTHONHASHSEED": "0"})
    engine.install(monkeypatch)  # docker_adapter's engine functions now answer from this engine

Conformance is checked twice: mypy (the assignments at the end of this file, which pyproject's [tool.mypy] checks)
and tests/unit/test_engine_interface.py (the same names and signatures as the interface)."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stackctl.engine.handles import Container, Engine, Image, opened
from stackctl.engine.records import ContainerState
from stackctl.errors import StackctlError

_ids = itertools.count(1)


def _new_id() -> str:
    return f"{next(_ids):064x}"


@dataclass
class FakeImage:
    """An image as the fake engine keeps it; the handle reads id and labels."""
    id: str
    tags: list[str]
    labels: dict[str, str] = field(default_factory=dict)
    size: int = 0


@dataclass
class FakeContainer:
    """A container as the fake engine keeps it; the handle reads id, name, status and labels."""
    id: str
    name: str
    image_id: str
    labels: dict[str, str] = field(default_factory=dict)
    status: str = "running"
    state: ContainerState = field(default_factory=lambda: ContainerState(status="running", pid=4242))
    env: dict[str, str] = field(default_factory=dict)
    log: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    mounts: dict[str, str] = field(default_factory=dict)
    cpuset: tuple[str, str] = ("", "")
    run_kwargs: dict[str, Any] = field(default_factory=dict)


class FakeEngine:
    """The engine: its containers by name, its images, and what the test scripted for what would run."""

    def __init__(self) -> None:
        self.container_records: dict[str, FakeContainer] = {}
        self.image_records: list[FakeImage] = []
        self.version = {"Version": "27.5.1", "ApiVersion": "1.47"}
        # what a throwaway container prints: (image, command, environment) -> stdout
        self.on_run: Callable[[str, list[str], dict], str] = lambda image, command, environment: ""
        # what an exec answers: (container name, argv) -> (exit code, stdout, stderr)
        self.on_exec: Callable[[str, list[str]], tuple[int, str, str]] = lambda name, argv: (0, "", "")
        self.calls: list[tuple[str, tuple]] = []  # every operation that changes something, in order
        self.runs: list[tuple[str, list[str], dict]] = []  # every throwaway container (image, command, environment)

    # -- set-up, for the tests --
    def add_image(self, *tags: str, labels: dict | None = None, size: int = 0) -> FakeImage:
        image = FakeImage("sha256:" + _new_id(), list(tags), dict(labels or {}), size)
        self.image_records.append(image)
        return image

    def add_container(self, name: str, image: str = "", **fields: Any) -> FakeContainer:
        found = self._image(image)
        record = FakeContainer(_new_id(), name, found.id if found else image, **fields)
        if "state" not in fields:
            record.state = ContainerState(status=record.status, pid=4242 if record.status == "running" else 0)
        self.container_records[name] = record
        return record

    def install(self, monkeypatch) -> FakeEngine:
        """Make docker_adapter's engine functions answer from this engine for the test's length."""
        from stackctl.engine import docker_adapter
        from stackctl.engine.interface import EngineInterface

        for name in interface_names(EngineInterface):
            monkeypatch.setattr(docker_adapter, name, getattr(self, name))
        return self

    def _image(self, reference: str) -> FakeImage | None:
        return next((image for image in self.image_records if reference in image.tags or reference == image.id), None)

    def _record(self, container: Container) -> FakeContainer:
        record: FakeContainer = opened(container)
        if self.container_records.get(record.name) is not record:
            raise StackctlError(f"container {record.name} is gone")
        return record

    # -- the engine --
    def client(self) -> Engine:
        return Engine(self)

    def reader(self) -> Engine:
        return Engine(self)

    def engine_version(self, engine: Engine) -> dict:
        return dict(self.version)

    # -- finding what stackctl made --
    def find_image(self, engine: Engine, tag: str) -> Image | None:
        found = self._image(tag)
        return Image(found) if found else None

    def find_container(self, engine: Engine, name: str) -> Container | None:
        found = self.container_records.get(name) or next(
            (record for record in self.container_records.values() if record.id == name), None)
        return Container(found) if found else None

    def stack_containers(self, engine: Engine, stack: str | None = None) -> list[Container]:
        from stackctl.engine.docker_adapter import LABEL_STACK

        return [Container(record) for record in self.container_records.values()
                if LABEL_STACK in record.labels and (stack is None or record.labels[LABEL_STACK] == stack)]

    def stack_images(self, engine: Engine, stack: str) -> list[Image]:
        from stackctl.engine.docker_adapter import LABEL_STACK

        return [Image(image) for image in self.image_records if image.labels.get(LABEL_STACK) == stack]

    # -- what is read of a container --
    def refresh(self, container: Container) -> Container:
        self._record(container)
        return container

    def container_state(self, container: Container) -> ContainerState:
        return opened(container).state

    def container_image_id(self, container: Container) -> str:
        return opened(container).image_id

    def container_cpuset(self, container: Container) -> tuple[str, str]:
        return opened(container).cpuset

    def container_mounts(self, container: Container) -> dict[str, str]:
        return dict(opened(container).mounts)

    def container_env(self, container: Container) -> dict[str, str]:
        return dict(opened(container).env)

    def container_image(self, engine: Engine, container: Container) -> Image | None:
        return self.find_image(engine, self.container_image_id(container))

    def running_image_name(self, container: Container, image: Image | None) -> str:
        return self.image_name(image) if image is not None else self.container_image_id(container)

    def logs_text(self, container: Container, **kwargs: Any) -> str:
        return opened(container).log

    def follow_logs(self, container: Container, **kwargs: Any) -> Iterator[str]:
        yield from opened(container).log.splitlines(keepends=True)

    def logs_or_reason(self, container: Container) -> str:
        try:
            return self.logs_text(self.refresh(container))
        except StackctlError as exc:
            return f"(log unavailable: {exc})\n"

    def read_file(self, container: Container, path: str, limit: int = 1 << 20) -> bytes | None:
        data = opened(container).files.get(path)
        return data if data is not None and len(data) <= limit else None

    # -- what is read of an image --
    def short_id(self, thing: Container | Image) -> str:
        from stackctl.engine.docker_adapter import short_form

        return short_form(thing.id)

    def image_tags(self, image: Image) -> list[str]:
        return list(opened(image).tags)

    def image_name(self, image: Image) -> str:
        return (self.image_tags(image) or [self.short_id(image)])[0]

    def image_size(self, image: Image) -> int:
        return opened(image).size

    # -- acting on containers --
    def run_detached(self, engine: Engine, **kwargs: Any) -> Container:
        name = kwargs.get("name") or f"fake_{len(self.container_records)}"
        if name in self.container_records:
            raise StackctlError(f'Conflict: the container name "/{name}" is already in use')
        env = kwargs.get("environment") or {}
        record = self.add_container(name, kwargs.get("image", ""), labels=dict(kwargs.get("labels") or {}),
                                    env=dict(env) if isinstance(env, dict) else dict(e.split("=", 1) for e in env),
                                    run_kwargs=dict(kwargs))
        self.calls.append(("run_detached", (name,)))
        return Container(record)

    def run_to_end(self, engine: Engine, image: str, command: list[str], *, environment: dict,
                   volumes: dict | None = None, timeout: float = 300, **kwargs: Any) -> str:
        self.runs.append((image, list(command), dict(environment)))
        return self.on_run(image, list(command), dict(environment))

    def output_of(self, engine: Engine, image: str, command: list[str], **kwargs: Any) -> str:
        environment = dict(kwargs.get("environment") or {})
        self.runs.append((image, list(command), environment))
        return self.on_run(image, list(command), environment)

    def exec_in(self, container: Container, argv: list[str]) -> tuple[int, str, str]:
        return self.on_exec(self._record(container).name, list(argv))

    def exec_output(self, container: Container, argv: list[str]) -> str:
        code, out, err = self.exec_in(container, argv)
        return out + err

    def start_container(self, container: Container) -> None:
        record = self._record(container)
        record.status, record.state = "running", ContainerState(status="running", pid=4242)
        self.calls.append(("start_container", (record.name,)))

    def stop_container(self, container: Container, timeout: int) -> None:
        record = self._record(container)
        record.status, record.state = "exited", ContainerState(status="exited", exit_code=0)
        self.calls.append(("stop_container", (record.name,)))

    def rename_container(self, container: Container, name: str) -> None:
        record = self._record(container)
        if name in self.container_records:
            raise StackctlError(f'Conflict: the container name "/{name}" is already in use')
        del self.container_records[record.name]
        record.name = name
        self.container_records[name] = record
        self.calls.append(("rename_container", (name,)))

    def remove_container(self, container: Container) -> None:
        record: FakeContainer = opened(container)
        if self.container_records.get(record.name) is record:
            del self.container_records[record.name]
            self.calls.append(("remove_container", (record.name,)))

    # -- acting on images --
    def stream_build(self, engine: Engine, kwargs: dict, out: Any = None) -> None:
        self.add_image(kwargs["tag"], labels=dict(kwargs.get("labels") or {}))
        self.calls.append(("stream_build", (kwargs["tag"],)))

    def push(self, engine: Engine, repository: str, tag: str, auth: dict | None = None) -> str:
        if self._image(f"{repository}:{tag}") is None:
            raise StackctlError(f"docker push {repository}:{tag}: no such image")
        self.calls.append(("push", (f"{repository}:{tag}",)))
        return "sha256:" + _new_id()

    def save_image(self, engine: Engine, tag: str) -> Iterator[bytes]:
        image = self._image(tag)
        if image is None:
            raise StackctlError(f"docker save {tag}: no such image")
        yield f"archive of {image.id}".encode()

    def add_tag(self, engine: Engine, tag: str, repository: str, version: str) -> None:
        image = self._image(tag)
        if image is None:
            raise StackctlError(f"docker tag {tag}: no such image")
        image.tags.append(f"{repository}:{version}")
        self.calls.append(("add_tag", (tag, f"{repository}:{version}")))

    def untag(self, engine: Engine, reference: str) -> None:
        image = self._image(reference)
        if image is not None and reference in image.tags:
            image.tags.remove(reference)
            self.calls.append(("untag", (reference,)))

    def remove_image(self, engine: Engine, image: Image) -> None:
        record = opened(image)
        self.image_records = [kept for kept in self.image_records if kept is not record]
        self.calls.append(("remove_image", (record.id,)))


def interface_names(protocol: type) -> list[str]:
    """The functions an interface (a typing.Protocol) names, in the order it declares them."""
    return [name for name, member in vars(protocol).items() if inspect.isfunction(member) and not name.startswith("_")]


if TYPE_CHECKING:  # mypy holds both implementations to the interface
    from stackctl.engine import docker_adapter as _docker_adapter
    from stackctl.engine.interface import EngineInterface

    _the_adapter: EngineInterface = _docker_adapter
    _the_fake: EngineInterface = FakeEngine()
