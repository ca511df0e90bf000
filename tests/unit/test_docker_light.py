"""doctor's light engine client (docker_adapter.reader, LightEngine): the reads of a warm doctor over the engine's
unix socket with the standard library, answered here by a stand-in speaking the Docker Engine API's shapes on a
socket of its own (inspect, /_ping, /version, a multiplexed log, a tar archive); everything else handed to
docker-py's client. On the real engine every integration test's doctor run goes through it."""

from __future__ import annotations

import io
import json
import socketserver
import tarfile
import threading
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

import pytest

from stackctl.engine import docker_adapter as dk
from stackctl.engine.handles import opened
from stackctl.errors import StackctlError

IMAGE = {"Id": "sha256:abc", "Config": {"Labels": {"dev.stackctl.stack": "x"}}}
CONTAINER = {"Id": "c1d2", "Name": "/stackctl-x", "State": {"Status": "running", "Pid": 0},
             "Config": {"Tty": False, "Env": ["PYTHONHASHSEED=0", "PATH=/usr/bin"]}}


def frame(kind: int, payload: bytes) -> bytes:
    return bytes([kind, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def tar_of(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Engine:
    """The stand-in engine: what it answers, and the paths and queries it was asked."""

    def __init__(self, path):
        self.asked: list[tuple[str, dict]] = []
        handler = type("Handler", (_Handler,), {"engine": self})
        self.server = socketserver.ThreadingUnixStreamServer(str(path), handler)

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    engine: Engine

    def log_message(self, *args):
        pass

    def address_string(self):
        return "unix"

    def _send(self, status: int, body: bytes, kind: str = "application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.engine.asked.append((url.path, query))
        routes = {"/_ping": (200, b"OK"), "/version": (200, json.dumps({"Version": "20.10.24",
                                                                         "ApiVersion": "1.41"}).encode()),
                  "/images/stackctl%2Fx%3Aabc/json": (200, json.dumps(IMAGE).encode()),
                  "/containers/stackctl-x/json": (200, json.dumps(CONTAINER).encode()),
                  "/containers/c1d2/json": (200, json.dumps(CONTAINER).encode()),
                  "/containers/c1d2/logs": (200, frame(1, b"line 1\n") + frame(2, b"\x1b[32mline 2\x1b[0m\n"))}
        if url.path == "/containers/tty/json":
            return self._send(200, json.dumps({**CONTAINER, "Id": "tty", "Config": {"Tty": True}}).encode())
        if url.path == "/containers/tty/logs":
            return self._send(200, b"raw terminal text\n", "application/vnd.docker.raw-stream")
        if url.path in ("/images/broken/json", "/containers/tty/archive"):
            return self._send(500, b'{"message": "engine trouble"}')
        if url.path == "/containers/c1d2/archive" and query.get("path") == "/m/config.json":
            return self._send(200, tar_of("config.json", b'{"hidden_size": 8}'), "application/x-tar")
        status, body = routes.get(url.path, (404, b'{"message": "No such object"}'))
        self._send(status, body)


@pytest.fixture
def engine(tmp_path, monkeypatch):
    socket_path = tmp_path / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    with Engine(socket_path) as stand_in:
        yield stand_in


def test_a_warm_doctors_reads_need_no_docker_py(engine):
    client = dk.reader()
    light = opened(client)
    assert isinstance(light, dk.LightEngine) and light._client is None
    assert dk.engine_version(client) == {"Version": "20.10.24", "ApiVersion": "1.41"}
    image = dk.find_image(client, "stackctl/x:abc")
    assert (image.id, image.labels) == ("sha256:abc", {"dev.stackctl.stack": "x"})
    assert dk.find_image(client, "stackctl/x:other") is None
    container = dk.find_container(client, "stackctl-x")
    assert (container.id, container.name, container.status) == ("c1d2", "stackctl-x", "running")
    assert dk.container_env(container) == {"PYTHONHASHSEED": "0", "PATH": "/usr/bin"}
    assert dk.find_container(client, "stackctl-gone") is None
    assert dk.logs_text(container) == "line 1\n\x1b[32mline 2\x1b[0m\n"  # both streams, in the order written
    assert dk.logs_text(container, since=1764129000.25).startswith("line 1")
    assert engine.asked[-1] == ("/containers/c1d2/logs", {"stdout": "1", "stderr": "1", "tail": "all",
                                                          "timestamps": "0", "since": "1764129000.25"})
    assert dk.read_file(container, "/m/config.json") == b'{"hidden_size": 8}'
    assert dk.read_file(container, "/m/missing.json") is None
    assert dk.refresh(container) is container and container.status == "running"
    assert light._client is None  # docker-py was never needed


def test_what_the_light_engine_does_not_read_goes_to_docker_pys_client_and_nothing_falls_through(engine, monkeypatch):
    """Running, exec and remove go to docker-py's object of the same id, asked for by the adapter; the light objects
    have no docker-py attributes of their own (no `__getattr__`), so no caller outside the adapter can read one."""
    class Container:
        def exec_run(self, argv, demux=False):
            return type("Result", (), {"output": b"ran " + " ".join(argv).encode(), "exit_code": 0})()

    class Client:
        containers = type("Containers", (), {"get": staticmethod(lambda ident: Container()),
                                             "run": staticmethod(lambda *a, **k: b"started")})()
        images = type("Images", (), {"get": staticmethod(lambda ident: type("I", (), {"tags": [ident]})())})()

    made = []
    monkeypatch.setattr(dk, "_client", lambda: made.append(1) or Client())
    light = dk.reader()
    container = dk.find_container(light, "stackctl-x")
    assert dk.exec_output(container, ["sh", "-c", "true"]) == "ran sh -c true"
    assert dk.output_of(light, "img", ["true"]) == "started"
    image = dk.find_image(light, "stackctl/x:abc")
    assert dk._docker(image).tags == ["sha256:abc"]
    assert made == [1]  # one docker-py client, made on first need
    for thing, name in ((light, "containers"), (light, "version"), (light, "full"), (container, "exec_run"), (container, "image"), (container, "attrs"),
                        (container, "full"), (image, "tags"), (image, "attrs"), (image, "full")):
        assert not hasattr(thing, name), name


def test_callers_hold_stackctls_handles_whichever_engine_answered(engine, monkeypatch):
    """find_container / find_image / stack_containers / run_detached hand out stackctl's handles, around the light
    engine's records or docker-py's objects alike: id, name, status and labels, read-only, and nothing of docker-py."""
    from stackctl.engine.handles import Container, Image

    class Native:
        id, name, status, labels, attrs = "c0ffee" * 10 + "abcd", "stackctl-x", "running", {"k": "v"}, {}

    class Client:
        containers = type("Containers", (), {"get": staticmethod(lambda name: Native()),
                                             "list": staticmethod(lambda **k: [Native()]),
                                             "run": staticmethod(lambda **k: Native())})()
        images = type("Images", (), {"get": staticmethod(lambda tag: Native())})()

    light = dk.reader()
    for found in (dk.find_container(light, "stackctl-x"), dk.find_container(Client(), "stackctl-x"),
                  dk.stack_containers(Client())[0], dk.run_detached(Client(), image="x")):
        assert type(found) is Container and found.name == "stackctl-x" and found.status == "running", found
        with pytest.raises(TypeError):
            found.labels["k"] = "changed"  # type: ignore[index]
        with pytest.raises(AttributeError):
            found.name = "other"  # type: ignore[misc]
    assert dk.find_container(Client(), "x") == dk.stack_containers(Client())[0]  # the same container, by id
    assert type(dk.find_image(light, "stackctl/x:abc")) is Image and type(dk.find_image(Client(), "x")) is Image


def test_an_engine_that_does_not_answer_is_one_line_and_another_address_gets_docker_py(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    with pytest.raises(StackctlError) as error:
        dk.reader()
    assert error.value.exit_code == 2
    assert str(error.value).startswith(f"cannot reach the Docker engine at unix://{tmp_path}/none.sock: ")
    assert str(error.value).endswith("(fix: start dockerd, or set DOCKER_HOST)") and "\n" not in str(error.value)
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    monkeypatch.setattr(dk, "client", lambda: "docker-py")
    assert dk.reader() == "docker-py"


def test_a_log_that_is_not_framed_is_kept_as_it_is():
    assert dk.demultiplex(b"plain text\n") == b"plain text\n"
    assert dk.demultiplex(frame(1, b"a") + frame(2, b"b")) == b"ab"


def test_a_terminal_containers_log_is_raw_and_engine_errors_are_one_line(engine):
    client = dk.reader()
    tty = dk.find_container(client, "tty")
    assert dk.logs_text(tty) == "raw terminal text\n"
    with pytest.raises(StackctlError, match="answered 500 to GET /images/broken/json: .*engine trouble"):
        dk.find_image(client, "broken")
    with pytest.raises(StackctlError, match="answered 500 for /m/x in stackctl-x"):
        dk.read_file(tty, "/m/x")
    gone = dk.LightContainer(opened(client), {**CONTAINER, "Id": "gone"})
    with pytest.raises(StackctlError, match="is gone"):
        dk.refresh(gone)
