"""The Docker engine edge: docker-py imported lazily, errors turned into one-line StackctlErrors.

Pure functions build the docker-py keyword arguments (tests assert on them, `--dry-run` prints them); the few
functions that talk to the engine take those kwargs and do nothing else.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from stackctl.engine.handles import Container, Engine, Image, opened
from stackctl.engine.records import ContainerState, engine_time
from stackctl.errors import ExitCode, StackctlError

LABEL_STACK = "dev.stackctl.stack"
LABEL_RECIPE_HASH = "dev.stackctl.recipe-hash"
LABEL_IMAGE_HASH = "dev.stackctl.image-hash"
LABEL_RECIPE_PATH = "dev.stackctl.recipe"
LABEL_DESCRIPTION = "dev.stackctl.description"  # stack.description, shown by status
LABEL_BASE_IMAGE = "dev.stackctl.base-image"
LABEL_BASE_ID = "dev.stackctl.base-image-id"
PING_TIMEOUT_S = 10
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def client() -> Engine:
    """The engine in DOCKER_HOST (default: the local socket), through docker-py."""
    return Engine(_client())


def _client():
    """docker-py's client for the engine in DOCKER_HOST."""
    try:
        import docker
    except ImportError:  # pragma: no cover - docker is a dependency
        raise StackctlError("the `docker` Python package is missing (fix: pip install docker)") from None
    try:
        # A short timeout for the first question: an engine that does not answer is reported in seconds, not
        # after the 10 minutes a long build request may take.
        engine = docker.from_env(timeout=PING_TIMEOUT_S)
        engine.ping()
        engine.api.timeout = 600
        return engine
    except (docker.errors.DockerException, OSError) as exc:  # requests' connection errors are OSErrors
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise StackctlError(f"cannot reach the Docker engine at {where}: {_short(exc)} (fix: start dockerd, "
                            "or set DOCKER_HOST)", exit_code=ExitCode.COULD_NOT_RUN) from None


def reader() -> Engine:
    """The engine as doctor reads a running stack: ping, version, an image's or a container's inspect, a container's
    log and files, over a local engine's unix socket with the standard library (`LightEngine`), because importing
    docker-py (requests, urllib3) was about a fifth of a warm doctor's time. Anything else it is asked (running a
    container, exec, remove) goes to a docker-py client made then. An engine that is not a local socket (tcp://,
    ssh://, TLS) gets docker-py's client() straight away."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not where.startswith("unix://") or os.environ.get("DOCKER_TLS_VERIFY"):
        return client()
    engine = LightEngine(where[len("unix://"):])
    try:
        engine.ping()
    except OSError as exc:
        raise StackctlError(f"cannot reach the Docker engine at {where}: {_short(exc)} (fix: start dockerd, or set "
                            "DOCKER_HOST)", exit_code=ExitCode.COULD_NOT_RUN) from None
    return Engine(engine)


class LightEngine:
    """A Docker engine on a unix socket, asked with http.client: the reads of a warm doctor, each on a connection of
    its own. Any attribute it does not have (containers, images, api, ...) is docker-py's client's, made on first
    use, so a caller that needs more gets the whole client."""

    def __init__(self, socket_path: str, timeout: float = 120.0):
        self.socket_path, self.timeout, self._client = socket_path, timeout, None

    def get(self, path: str, timeout: float | None = None) -> tuple[int, bytes]:
        import http.client
        import socket

        connection = http.client.HTTPConnection("localhost", timeout=timeout or self.timeout)
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.settimeout(timeout or self.timeout)
        try:
            raw.connect(self.socket_path)
        except OSError:
            raw.close()
            raise
        connection.sock = raw
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def inspect(self, path: str) -> dict | None:
        """GET path's JSON; None on 404; a StackctlError naming the engine's message on any other error."""
        import json

        status, body = self.get(path)
        if status == 404:
            return None
        if status >= 300:
            raise StackctlError(f"the Docker engine answered {status} to GET {path}: "
                                f"{body.decode(errors='replace').strip()[:200]}")
        return json.loads(body)

    def ping(self) -> bool:
        status, body = self.get("/_ping", PING_TIMEOUT_S)  # an engine that does not answer, reported in seconds
        if status != 200:
            raise OSError(f"/_ping answered {status}: {body[:100]!r}")
        return True

    def version(self) -> dict:
        return self.inspect("/version") or {}

    def full(self):
        """docker-py's client, for everything this class does not do."""
        if self._client is None:
            self._client = _client()
        return self._client


class LightImage:
    """An image as the engine's inspect describes it; `full()` is docker-py's image of the same id."""

    def __init__(self, engine: LightEngine, attrs: dict):
        self.engine, self.attrs, self.id = engine, attrs, attrs["Id"]

    @property
    def labels(self) -> dict:
        return (self.attrs.get("Config") or {}).get("Labels") or {}

    def full(self):
        return self.engine.full().images.get(self.id)


class LightContainer:
    """A container as the engine's inspect describes it, its log and its files; `full()` is docker-py's container of
    the same id (exec, stop, remove)."""

    def __init__(self, engine: LightEngine, attrs: dict):
        self.engine, self.attrs, self.id = engine, attrs, attrs["Id"]

    @property
    def name(self) -> str:
        return str(self.attrs.get("Name") or "").lstrip("/")

    @property
    def status(self) -> str:
        return (self.attrs.get("State") or {}).get("Status") or ""

    @property
    def labels(self) -> dict:
        return (self.attrs.get("Config") or {}).get("Labels") or {}

    def reload(self) -> None:
        attrs = self.engine.inspect(f"/containers/{self.id}/json")
        if attrs is None:
            raise StackctlError(f"container {self.name or self.id[:12]} is gone")
        self.attrs = attrs

    def logs(self, stdout: bool = True, stderr: bool = True, since: float | None = None, tail: str | int = "all",
             timestamps: bool = False) -> bytes:
        """The log as docker-py's Container.logs returns it: both streams' frames in the order written."""
        from urllib.parse import urlencode

        query: dict[str, str | int | float] = {"stdout": int(stdout), "stderr": int(stderr), "tail": tail,
                                               "timestamps": int(timestamps)}
        if since is not None:
            query["since"] = since
        status, body = self.engine.get(f"/containers/{self.id}/logs?{urlencode(query)}")
        if status >= 300:
            raise StackctlError(f"the Docker engine answered {status} for the log of {self.name}: {body[:200]!r}")
        return body if (self.attrs.get("Config") or {}).get("Tty") else demultiplex(body)

    def archive(self, path: str) -> bytes | None:
        """The tar stream of `path` in the container (GET .../archive); None when it is absent."""
        from urllib.parse import quote

        status, body = self.engine.get(f"/containers/{self.id}/archive?path={quote(path)}")
        if status == 404:
            return None
        if status >= 300:
            raise StackctlError(f"the Docker engine answered {status} for {path} in {self.name}: {body[:200]!r}")
        return body

    def full(self):
        return self.engine.full().containers.get(self.id)


def _docker(thing):
    """docker-py's own object for an engine, image or container (or a handle of one): a light one asks docker-py for
    it then (the light classes read; running, exec, stop and remove are docker-py's)."""
    thing = opened(thing)
    return thing.full() if isinstance(thing, (LightEngine, LightImage, LightContainer)) else thing


def _attrs(thing) -> dict:
    """The engine's inspect record of a container or an image (a handle's, read where the handle was last asked)."""
    return opened(thing).attrs


def engine_version(engine: Engine) -> dict:
    """The engine's version record (Version, ApiVersion, ...)."""
    return opened(engine).version()


# -- what callers read of a container or an image: stackctl's records and plain values, never docker-py's fields --

def container_state(container: Container) -> ContainerState:
    return ContainerState.from_engine(_attrs(container).get("State"))


def container_image_id(container: Container) -> str:
    """The id of the image the container runs."""
    return str(_attrs(container).get("Image") or "")


def container_cpuset(container: Container) -> tuple[str, str]:
    """The CPUs and memory nodes the engine confines the container to ("" when it does not)."""
    config = _attrs(container).get("HostConfig") or {}
    return config.get("CpusetCpus") or "", config.get("CpusetMems") or ""


def container_mounts(container: Container) -> dict[str, str]:
    """The container's mounts, {destination in the container: source on the host}."""
    return {str(mount.get("Destination")): str(mount.get("Source")) for mount in _attrs(container).get("Mounts") or []}


def container_image(engine: Engine, container: Container) -> Image | None:
    """The image the container runs, as find_image returns it (None when it is gone)."""
    return find_image(engine, container_image_id(container))


def short_id(thing: Container | Image) -> str:
    """An image's or a container's id as `docker ps` / `docker images` print it."""
    return short_form(str(opened(thing).id))


def short_form(ident: str) -> str:
    """An id as `docker ps` / `docker images` print it: an image's sha256:... to 19 characters, a container's to 12."""
    return ident[:19] if ident.startswith("sha256:") else ident[:12]


def image_tags(image: Image) -> list[str]:
    return list(_attrs(image).get("RepoTags") or [])


def image_name(image: Image) -> str:
    """The image's first tag, else its short id."""
    return (image_tags(image) or [short_id(image)])[0]


def running_image_name(container: Container, image: Image | None) -> str:
    """What a container runs, as `docker ps` names it: its image's name (`image`: container_image's answer), or the
    image id when that image is gone."""
    return image_name(image) if image is not None else container_image_id(container)


def image_size(image: Image) -> int:
    return int(_attrs(image).get("Size") or 0)


def demultiplex(stream: bytes) -> bytes:
    """The payloads of the engine's multiplexed log stream (each frame: stream type, 3 zero bytes, a big-endian
    32-bit length, the payload), in order; a stream that is not framed is returned as it is."""
    parts: list[bytes] = []
    at = 0
    while at + 8 <= len(stream):
        kind, size = stream[at], int.from_bytes(stream[at + 4:at + 8], "big")
        if kind not in (0, 1, 2) or stream[at + 1:at + 4] != b"\0\0\0":
            return stream if at == 0 else b"".join(parts) + stream[at:]
        parts.append(stream[at + 8:at + 8 + size])
        at += 8 + size
    return b"".join(parts) + stream[at:]


def build_kwargs(context_dir: str, tag: str, labels: dict, nocache: bool = False) -> dict:
    """Arguments of the low-level `APIClient.build`: host networking (no bridge exists on many build hosts),
    proxies passed through as build args (Docker keeps these out of the image history)."""
    return {
        "path": context_dir,
        "tag": tag,
        "labels": labels,
        "network_mode": "host",
        "rm": True,
        "forcerm": True,
        "nocache": nocache,
        "decode": True,
        "buildargs": {name: os.environ[name] for name in PROXY_VARS if os.environ.get(name)},
    }


def push(engine: Engine, repository: str, tag: str, auth: dict | None = None) -> str:
    """Push REPOSITORY:TAG to its registry; the manifest digest the registry answered (sha256:...). The credentials
    go to the engine only, never into a message."""
    digest = None
    for chunk in _docker(engine).images.push(repository, tag=tag, stream=True, decode=True, auth_config=auth):
        if "error" in chunk:
            raise StackctlError(f"docker push {repository}:{tag}: {chunk['error'].strip()}")
        digest = (chunk.get("aux") or {}).get("Digest") or digest
    if not digest:
        raise StackctlError(f"docker push {repository}:{tag}: the registry answered no digest")
    return digest


def save_image(engine: Engine, tag: str) -> Iterator[bytes]:
    """`docker save` of the image under `tag`, its name kept: the archive's bytes, chunk by chunk."""
    image = find_image(engine, tag)
    if image is None:
        raise StackctlError(f"docker save {tag}: no such image")
    return _docker(image).save(named=True)


def add_tag(engine: Engine, tag: str, repository: str, version: str) -> None:
    """Give the image under `tag` a second name, REPOSITORY:VERSION."""
    image = find_image(engine, tag)
    if image is None:
        raise StackctlError(f"docker tag {tag}: no such image")
    _docker(image).tag(repository, version)


def untag(engine: Engine, reference: str) -> None:
    """Remove one name of an image (the image stays under its other names)."""
    import docker

    try:
        _docker(engine).images.remove(reference, noprune=True)
    except docker.errors.ImageNotFound:
        pass


def stream_build(engine: Engine, kwargs: dict, out: Any = None) -> None:
    """Run a build, showing progress: on a terminal one line updated in place (current step and its latest output);
    otherwise every line of build output, plain, for CI logs. A failure shows the end of the output. Ctrl-C
    cancels the build on the engine too (see cancel_build)."""
    out = out or sys.stderr
    tty = out.isatty()
    tail: list[str] = []
    step = ""
    started = time.time()
    stream = _BuildStream(engine)
    try:
        for chunk in stream.chunks(kwargs):
            if "error" in chunk:
                detail = chunk.get("error", "").strip()
                context = "".join(tail[-15:])
                raise StackctlError(f"image build failed: {detail}\n--- last build output ---\n{context}".rstrip())
            text = chunk.get("stream", "")
            if not text:
                continue
            tail.append(text)
            del tail[:-40]
            if not tty:
                out.write(text if text.endswith("\n") else text + "\n")
            else:
                line = text.strip()
                if line.startswith("Step "):
                    step = line.split(" :", 1)[0]
                if line:
                    width = os.get_terminal_size(out.fileno()).columns - 1
                    out.write("\r\033[K" + f"{step}: {line}"[:width])
            out.flush()
    except KeyboardInterrupt:
        stream.cancel(started)
        raise
    finally:
        if tty:
            out.write("\n")


class _BuildStream:
    """The build's HTTP response, kept so that Ctrl-C can close it: the engine cancels a build whose client went
    away and then removes the step's build container (forcerm). docker-py keeps the response inside its generator,
    so it is caught on its way there."""

    def __init__(self, engine):
        self.engine, self.response = engine, None

    def chunks(self, kwargs: dict):
        api = _docker(self.engine).api
        original = api._stream_helper

        def keep_response(response, decode=False):
            self.response = response
            return original(response, decode)

        api._stream_helper = keep_response
        try:
            yield from api.build(**kwargs)
        finally:
            api._stream_helper = original

    def cancel(self, started: float, wait_s: float = 30.0) -> None:
        """Close the build connection, then wait until the engine has removed the build's container."""
        if self.response is not None:
            self.response.close()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _build_containers(self.engine, started):
            time.sleep(0.5)


def _build_containers(engine, since: float) -> list:
    """Containers of a classic build step (run from a bare image id, unnamed by stackctl) created since `since`."""
    import docker

    found = []
    try:
        for container in _docker(engine).containers.list(all=True, ignore_removed=True):
            created = container.attrs.get("Created", "")
            image = (container.attrs.get("Config") or {}).get("Image", "")
            if image.startswith("sha256:") and _timestamp(created) >= since - 1:
                found.append(container)
    except docker.errors.APIError:
        return []
    return found


def _timestamp(created: str) -> float:
    return engine_time(created) or 0.0


def find_image(engine: Engine, tag: str) -> Image | None:
    native = opened(engine)
    if isinstance(native, LightEngine):
        from urllib.parse import quote

        attrs = native.inspect(f"/images/{quote(tag, safe='')}/json")
        return None if attrs is None else Image(LightImage(native, attrs))
    import docker

    try:
        return Image(native.images.get(tag))
    except docker.errors.ImageNotFound:
        return None


def find_container(engine: Engine, name: str) -> Container | None:
    native = opened(engine)
    if isinstance(native, LightEngine):
        from urllib.parse import quote

        attrs = native.inspect(f"/containers/{quote(name, safe='')}/json")
        return None if attrs is None else Container(LightContainer(native, attrs))
    import docker

    try:
        return Container(native.containers.get(name))
    except docker.errors.NotFound:
        return None


def stack_containers(engine: Engine, stack: str | None = None) -> list[Container]:
    label = f"{LABEL_STACK}={stack}" if stack else LABEL_STACK
    return [Container(found) for found in _docker(engine).containers.list(all=True, filters={"label": label},
                                                                         ignore_removed=True)]


def stack_images(engine: Engine, stack: str) -> list[Image]:
    """The images stackctl built for `stack` (by their stack label)."""
    return [Image(found) for found in _docker(engine).images.list(filters={"label": f"{LABEL_STACK}={stack}"})]


def remove_image(engine: Engine, image: Image) -> None:
    _docker(engine).images.remove(opened(image).id, force=True)


def run_detached(engine: Engine, **kwargs: Any) -> Container:
    """Start a container (docker-py's `containers.run` keyword arguments, detach among them) and return it."""
    return Container(_docker(engine).containers.run(**kwargs))


def output_of(engine: Engine, image: str, command: list[str], **kwargs: Any) -> str:
    """Run `command` in a container of `image`, wait for it, and return its stdout; the engine removes the
    container when it ends."""
    output = _docker(engine).containers.run(image, command, remove=True, stdout=True, stderr=False, **kwargs)
    return output.decode("utf-8", errors="replace")


def exec_in(container: Container, argv: list[str]) -> tuple[int, str, str]:
    """Run `argv` in a running container: its exit code, stdout and stderr."""
    run = _docker(container).exec_run(argv, demux=True)
    out, err = (part.decode(errors="replace") if part else "" for part in run.output)
    return run.exit_code, out, err


def exec_output(container: Container, argv: list[str]) -> str:
    """Run `argv` in a running container: its stdout and stderr as one text, as the process wrote them."""
    return _docker(container).exec_run(argv, demux=False).output.decode("utf-8", errors="replace")


def logs_text(container: Container, **kwargs: Any) -> str:
    """The container's log (docker-py's `logs` keyword arguments: tail, stdout, stderr) as text."""
    return opened(container).logs(**kwargs).decode("utf-8", errors="replace")


def follow_logs(container: Container, **kwargs: Any) -> Iterator[str]:
    """The container's log as it is written, piece by piece, as text, until the container ends."""
    for chunk in _docker(container).logs(stream=True, follow=True, **kwargs):
        yield chunk.decode(errors="replace")


def logs_or_reason(container: Container) -> str:
    """The container's log, or one line saying why it cannot be read (the container may be gone already)."""
    import docker

    try:
        return logs_text(container)
    except docker.errors.APIError as exc:
        return f"(log unavailable: {exc})\n"


def refresh(container: Container) -> Container:
    """The container's state as the engine has it now (status, attrs); returns the container."""
    opened(container).reload()
    return container


def stop_container(container: Container, timeout: int) -> None:
    _docker(container).stop(timeout=timeout)


def rename_container(container: Container, name: str) -> None:
    _docker(container).rename(name)


def start_container(container: Container) -> None:
    _docker(container).start()


def container_env(container: Container) -> dict[str, str]:
    """The environment a container was started with (its `Config.Env`)."""
    pairs = (_attrs(container).get("Config") or {}).get("Env") or []
    return dict(item.split("=", 1) for item in pairs if "=" in item)


def run_to_end(engine: Engine, image: str, command: list[str], *, environment: dict, volumes: dict | None = None,
               timeout: float = 300, **kwargs: Any) -> str:
    """Run `command` in a throwaway container of `image` (host network, no entrypoint) and return its stdout. The
    container is removed whatever happens, Ctrl-C included: a probe leaves nothing behind."""
    container = _docker(engine).containers.run(image, command, entrypoint="", detach=True, network_mode="host",
                                      environment=environment, volumes=volumes or {}, **kwargs)
    try:
        container.wait(timeout=timeout)
        return container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
    finally:
        remove_container(container)


def read_file(container: Container, path: str, limit: int = 1 << 20) -> bytes | None:
    """A small file from a container's filesystem (docker cp, no process started); None when it is absent."""
    import io
    import tarfile

    native = opened(container)
    if isinstance(native, LightContainer):
        data = native.archive(path)
        if data is None:
            return None
    else:
        import docker

        try:
            stream, _ = native.get_archive(path)
        except docker.errors.NotFound:
            return None
        data = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = next((m for m in archive.getmembers() if m.isfile()), None)
        handle = archive.extractfile(member) if member is not None and member.size <= limit else None
        return handle.read() if handle is not None else None


def remove_container(container: Container) -> None:
    import docker

    try:
        _docker(container).remove(force=True)
    except docker.errors.NotFound:
        pass


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]
