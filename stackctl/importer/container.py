"""The container a launch runs in: `docker run` / `podman run` options, `docker pull`, and what the images people use
run when given no command.

Image entrypoints, from the images' own Dockerfiles: vLLM's `vllm-openai` stage runs the OpenAI server,
`ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]` up to the 0.10 releases (vllm 0.10.2
docker/Dockerfile:535) and `ENTRYPOINT ["vllm", "serve"]` since (0.21.0 docker/Dockerfile:885 and
docker/Dockerfile.rocm:547; 0.33.0 docker/Dockerfile:1344 and Dockerfile.rocm:1037). Both read the words after the
image as server arguments, and `vllm serve` takes the model as the first one. LMCache's `lmcache/vllm-openai` images
are built on it. AMD's `rocm/vllm`, `rocm/vllm-dev`, `rocm/atom-dev` and `rocm/pytorch` images start a shell: the
server command is given after the image, or typed inside the container.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Repositories (registry host left out) whose entrypoint is the vLLM OpenAI server.
SERVER_ENTRYPOINT_IMAGES = ("vllm/vllm-openai", "vllm/vllm-openai-rocm", "lmcache/vllm-openai")
# CUDA builds among the images people run vLLM in (the ROCm build of vLLM's image is vllm/vllm-openai-rocm).
CUDA_IMAGES = ("vllm/vllm-openai", "lmcache/vllm-openai")

# docker run options that take a value (long, and short letters); everything else is a flag.
_VALUE_OPTIONS = {
    "--env", "--env-file", "--volume", "--mount", "--publish", "--name", "--device", "--group-add", "--cap-add",
    "--cap-drop", "--security-opt", "--shm-size", "--ipc", "--network", "--net", "--workdir", "--user",
    "--entrypoint", "--gpus", "--cpuset-cpus", "--cpuset-mems", "--memory", "--memory-swap", "--ulimit", "--label",
    "--label-file", "--hostname", "--restart", "--runtime", "--pid", "--platform", "--add-host", "--log-driver",
    "--log-opt", "--tmpfs", "--pull", "--cpus", "--cpu-shares", "--stop-signal", "--stop-timeout", "--dns",
    "--userns", "--uts", "--cgroupns", "--cgroup-parent", "--cidfile", "--volumes-from", "--link", "--expose",
    "--device-cgroup-rule", "--sysctl", "--health-cmd", "--health-interval", "--health-retries",
    "--health-timeout", "--health-start-period", "--mac-address", "--ip", "--ip6", "--network-alias",
    "--oom-score-adj", "--storage-opt", "--blkio-weight", "--attach", "--detach-keys", "--annotation",
    "--memory-reservation", "--pids-limit", "--hooks-dir", "--replace", "--requires", "--secret", "--group-entry",
}
_SHORT = {"e": "--env", "v": "--volume", "p": "--publish", "w": "--workdir", "u": "--user", "m": "--memory",
          "l": "--label", "h": "--hostname", "a": "--attach", "c": "--cpu-shares"}
# Options whose effect stackctl decides itself when it runs the stack (host networking, IPC, devices, groups,
# capabilities, the container's lifetime): named in one note, not copied.
_STACKCTL_DECIDES = {
    "--ipc", "--network", "--net", "--publish", "--group-add", "--cap-add", "--cap-drop", "--security-opt",
    "--privileged", "--rm", "--detach", "--interactive", "--tty", "--restart", "--ulimit", "--user", "--hostname",
    "--pid", "--uts", "--add-host", "--pull", "--label", "--log-driver", "--log-opt", "--init", "--memory",
    "--memory-swap", "--cpus", "--cpu-shares", "--hooks-dir", "--replace", "--group-entry", "--runtime", "--gpus",
    "-d", "-i", "-t", "--workdir", "--expose", "--health-cmd", "--health-interval", "--health-retries",
    "--health-timeout", "--health-start-period", "--stop-signal", "--stop-timeout", "--sysctl", "--tmpfs",
}


# Options whose value the import carries into the recipe (environment, devices, mounts, pinning, shared memory).
_IMPORTED = {"--env", "--env-file", "--device", "--volume", "--mount", "--name", "--shm-size", "--cpuset-cpus",
             "--cpuset-mems", "--entrypoint", "--workdir"}


@dataclass
class DockerRun:
    """The container a `docker run` (or podman) starts: image, command (entrypoint first) and its options."""

    image: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)      # -e NAME=value, -e NAME (script's exports), --env-file
    passthrough: list[str] = field(default_factory=list)   # -e NAME the script did not set: the host's at run time
    devices: list[str] = field(default_factory=list)
    volumes: list[tuple[str, str]] = field(default_factory=list)  # (host, container)
    name: str | None = None
    shm_size: str | None = None
    cpus: str | None = None       # --cpuset-cpus (the last one)
    mems: str | None = None       # --cpuset-mems (the first one)
    gpus: str | None = None       # --gpus (NVIDIA's container toolkit)
    runtime: str | None = None    # --runtime (nvidia)
    workdir: str | None = None
    decided: list[str] = field(default_factory=list)  # options stackctl sets its own way, as written
    notes: list[str] = field(default_factory=list)
    secret_refs: dict[str, str] = field(default_factory=dict)  # variable -> where its value comes from (manifests)
    gpu_resources: list[str] = field(default_factory=list)     # GPU requests of a manifest, as written
    files: dict[str, str] = field(default_factory=dict)        # path in the container -> text (ConfigMap files)


def repository(image: str) -> str:
    """`registry.example:5000/vllm/vllm-openai:v0.9` -> `vllm/vllm-openai`: the image's repository path."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name.rsplit(":", 1)[0]
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    if parts[:1] == ["library"]:
        parts = parts[1:]
    return "/".join(parts).lower()


def runs_server(image: str) -> bool:
    """Whether the image's entrypoint is the vLLM OpenAI server (the words after the image are its arguments)."""
    return repository(image) in SERVER_ENTRYPOINT_IMAGES


def is_cuda_image(image: str) -> bool:
    """Whether the image is a CUDA build: vLLM's or LMCache's CUDA images, NVIDIA's own (nvidia/..., nvcr.io)."""
    repo = repository(image)
    return repo in CUDA_IMAGES or repo.startswith("nvidia/") or image.lower().startswith("nvcr.io/")


def read_docker_run(words: list[str], host_env: dict, script_dir) -> DockerRun | None:
    """The words after `docker run` as a DockerRun; None when they name no image.
    host_env is what the script exported (docker -e NAME copies from it)."""
    options, i = split_options(words)
    if i >= len(words):
        return None
    run = DockerRun(words[i], words[i + 1:])
    entrypoint = None
    for name, value, written in options:
        if name == "--env":
            key, eq, val = value.partition("=")
            if eq:
                run.env[key] = val
            elif key in host_env:
                run.env[key] = host_env[key]
            else:
                run.passthrough.append(key)
        elif name == "--env-file":
            variables = env_file(value, script_dir, run.notes)
            run.env.update(variables)
            if variables:
                run.notes.append(f"--env-file {value}: its variables were read ({', '.join(variables)})")
        elif name == "--device":
            run.devices.append(value.split(":", 1)[0].rstrip("/") if value.startswith("/") else value)
        elif name == "--volume":
            parts = value.split(":")
            if len(parts) >= 2:
                run.volumes.append((parts[0], parts[1]))
        elif name == "--mount":
            fields = dict(item.partition("=")[::2] for item in value.split(","))
            source = fields.get("source") or fields.get("src")
            target = fields.get("target") or fields.get("destination") or fields.get("dst")
            if source and target:
                run.volumes.append((source, target))
        elif name == "--name":
            run.name = value
        elif name == "--shm-size":
            run.shm_size = value.lower()
        elif name == "--cpuset-cpus":
            run.cpus = value
        elif name == "--cpuset-mems":
            run.mems = run.mems or value
        elif name == "--entrypoint":
            entrypoint = value
            run.decided.append(written)
        elif name == "--workdir":
            run.workdir = value
        if name == "--gpus":
            run.gpus = value
        elif name == "--runtime":
            run.runtime = value
        if name in _STACKCTL_DECIDES or name not in _IMPORTED:
            run.decided.append(written)
    if entrypoint:
        run.command = entrypoint.split() + run.command
    return run


def split_options(words: list[str]) -> tuple[list[tuple[str, str, str]], int]:
    """(long option name, value, the option as written) of the leading options, and the index of the image."""
    options: list[tuple[str, str, str]] = []
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        word = words[i]
        if word == "--":
            i += 1
            break
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if eq:
                options.append((name, value, word))
            elif name in _VALUE_OPTIONS and i + 1 < len(words):
                options.append((name, words[i + 1], f"{name} {words[i + 1]}"))
                i += 1
            else:
                options.append((name, "", word))
        else:
            for pos, letter in enumerate(word[1:], start=1):
                if letter in _SHORT:
                    value = word[pos + 1:]
                    if not value and i + 1 < len(words):
                        value = words[i + 1]
                        i += 1
                    options.append((_SHORT[letter], value, f"-{letter} {value}"))
                    break
                options.append((f"-{letter}", "", f"-{letter}"))
        i += 1
    return options, i


def env_file(path: str, script_dir, notes: list) -> dict:
    """docker --env-file / compose env_file: KEY=VALUE lines, taken literally."""
    candidate = Path(path)
    if not candidate.is_absolute() and script_dir is not None:
        candidate = Path(script_dir) / candidate
    from stackctl.errors import StackctlError
    from stackctl.recipe.loader import read_small_text

    try:
        lines = read_small_text(str(candidate), "env file", 1_000_000).splitlines()
    except (OSError, UnicodeDecodeError, StackctlError):
        notes.append(f"env file {path} could not be read here: its variables were not imported; add them to "
                     "serve.env (or serve.secret_env for secrets)")
        return {}
    env = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key.strip().removeprefix("export ").strip()] = value.strip().strip("'\"")
    return env
