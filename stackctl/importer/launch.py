"""Finding the launch in a shell script: the server's argv and environment, the wrappers (numactl, taskset, env,
bash -c, aliases) and the container around it: `docker run [options] IMAGE [command]` (or podman), a container
started first and entered with `docker exec`, or the image the script pulls. container.py reads the container's
options; manifest.py builds the same Launch from compose files and Kubernetes manifests."""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.importer.container import DockerRun, read_docker_run, runs_server
from stackctl.importer.lmcache_server import container_note, form_notes, server_args_at
from stackctl.importer.packages import image_change, read_installs
from stackctl.importer.shell import (
    ASSIGNMENT,
    KEYWORDS,
    ScriptBlocks,
    assignment,
    command_words,
    code_part,
    cut_blocks,
    expand,
    split_commands,
)
from stackctl.knowledge.serving_engines import OTHER_ENGINES
from stackctl.unresolved import runtime_reference


@dataclass
class Launch:
    """What a launch runs: the server's argv and environment, and the container around it (if any)."""

    kind: str = ""  # "vllm serve", "api_server", "demo api_server", "atom server" or "image entrypoint"
    args: list[str] = field(default_factory=list)       # server arguments after `vllm serve` / `-m module`
    env: dict[str, str] = field(default_factory=dict)   # the server process's environment as the launch sets it
    passthrough: list[str] = field(default_factory=list)  # names taken from the host at run time (-e NAME, export)
    secret_refs: dict[str, str] = field(default_factory=dict)  # container variable -> where its value comes from
    image: str | None = None
    image_source: str = ""         # how the image was found: "docker run", "docker pull", ...
    devices: list[str] = field(default_factory=list)
    volumes: list[tuple[str, str]] = field(default_factory=list)  # (host, container)
    container_name: str | None = None
    workdir: str | None = None      # the container's working directory (relative paths start there)
    shm_size: str | None = None
    numa: str | None = None    # numactl --cpunodebind / --membind
    cpus: str | None = None    # taskset -c / docker --cpuset-cpus
    gpus: list[str] = field(default_factory=list)    # GPU requests as written: docker --gpus, k8s resources, ...
    decided: list[str] = field(default_factory=list)  # container options stackctl sets its own way, as written
    notes: list[str] = field(default_factory=list)
    pins: dict[str, str] = field(default_factory=dict)  # package -> version, from `pip install NAME==VER`
    installs: list[str] = field(default_factory=list)   # engines installed by hand: "atom"
    files: dict[str, str] = field(default_factory=dict)  # path -> text the launch writes there (heredocs, ConfigMaps)
    lmcache_server: list[str] | None = None  # the arguments of an `lmcache server` the script starts (LMCache's MP mode)

    def host_path(self, path: str) -> tuple[str, bool]:
        """(host path, whether it differs) behind a container path (docker -v): stackctl mounts host paths at the
        same place."""
        if not path.startswith("/"):
            return path, False
        for host, container in sorted(self.volumes, key=lambda v: -len(v[1])):
            container = container.rstrip("/") or "/"
            if host.startswith(("/", "$", "~")) and (path == container or path.startswith(container.rstrip("/") + "/")):
                mapped = posixpath.normpath(host.rstrip("/") + path[len(container.rstrip("/")):]) \
                    if container != "/" else posixpath.normpath(host + path)
                return mapped, mapped != path
        return path, False


# Variables a server reads: set without `export`, the server never sees them (worth a note).
_SERVER_VARIABLE = re.compile(r"^(PYTHONHASHSEED|LMCACHE_\w+|VLLM_\w+|HIP_\w+|CUDA_\w+|ROCR_\w+|AITER_\w+|"
                              r"ATOM_\w+|HF_\w+|HUGGING\w+|AWS_\w+|OMP_\w+|NCCL_\w+|RCCL_\w+)$")
_SHELLS = {"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/usr/bin/bash"}


@dataclass
class _Scan:
    """What a scan of the script carries along: its functions and files, the versions it pins, the variables it
    sets without export, the functions being run, its aliases, the images it pulls, the containers it starts
    without a server (their commands are typed inside later), and what it installs by hand."""

    blocks: ScriptBlocks
    script_dir: Path | None
    pins: dict[str, str] = field(default_factory=dict)
    unexported: set[str] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    pulled: list[str] = field(default_factory=list)
    containers: dict[str, DockerRun] = field(default_factory=dict)
    inside: DockerRun | None = None   # the container later commands run in (`docker exec -it NAME bash`, `-it`)
    installs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lmcache_server: list[str] | None = None


def other_engine(text: str) -> tuple[str, str, int] | None:
    """(engine, the command as written, its line) of the first server of another engine the script starts, outside
    comments; None when it starts none stackctl knows of."""
    for number, line in enumerate(text.splitlines(), 1):
        code = code_part(line)
        for engine, commands in OTHER_ENGINES:
            for command in commands:
                if re.search(rf"(?<![\w.-]){re.escape(command)}(?![\w-])", code):
                    return engine, command, number
    return None


def parse_launch(text: str, script_dir: Path | None = None) -> Launch:
    """The first server launch in a shell script (a StackctlError when there is none)."""
    blocks = cut_blocks(text)
    scan = _Scan(blocks, script_dir)
    variables: dict[str, str] = {}
    exported: set[str] = set()
    launches = _scan(blocks.text, variables, exported, scan, in_container=False)
    # A container whose image's own entrypoint was taken for vLLM's, while its arguments start another engine
    # (`docker run ... IMAGE python3 -m sglang.launch_server`, through an alias too), is that engine's launch.
    if launches and launches[0].kind == "image entrypoint" and other_engine(shlex.join(launches[0].args)):
        launches = []
    if not launches:
        other = other_engine(text)
        if other:
            engine, command, line = other
            raise StackctlError(f"line {line}: the script starts {engine} (`{command}`), not vLLM: stackctl serves "
                                f"vLLM, with or without AMD's ATOM plugin, so it has no recipe for this launch (fix: "
                                f"start from a vLLM launch of the same model, or `stackctl init --list` for a "
                                f"shipped recipe)")
        raise StackctlError("no server command found (fix: the script must run `vllm serve MODEL ...`, `python -m "
                            "vllm.entrypoints.openai.api_server --model MODEL ...` or `docker run ... IMAGE [vllm "
                            "serve] MODEL ...`)")
    launch = launches[0]
    if len(launches) > 1:
        launch.notes.append(f"the script starts {len(launches)} servers; imported the first one")
    launch.pins, launch.installs = scan.pins, scan.installs
    launch.lmcache_server = scan.lmcache_server
    launch.files = {**launch.files, **blocks.files}
    launch.notes += scan.notes
    if not launch.image and scan.pulled:
        launch.image, launch.image_source = scan.pulled[-1], "docker pull"
        launch.notes.append(f"the server runs in the image the script pulls ({scan.pulled[-1]}): assumed, as the "
                            "script runs the server command outside any docker run")
    unset_exports = sorted(name for name in exported if name not in variables and name not in launch.env
                           and launch.image_source != "docker run")
    launch.passthrough += [name for name in unset_exports if name not in launch.passthrough]
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
        if words and words[0] in scan.aliases:
            words = command_words(scan.aliases[words[0]]) + words[1:]
        if not words:
            continue
        head = words[0]
        if all(ASSIGNMENT.match(w) for w in words):
            for word in words:
                key, value = assignment(word, variables)
                if value is not None and _keeps_literal(key, value, variables, scan):
                    continue
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
        elif head == "alias":
            for word in words[1:]:
                name, eq, value = word.partition("=")
                if eq:
                    scan.aliases[name] = value
        elif head in scan.blocks.functions and head not in scan.calls:
            scan.calls.append(head)  # a function runs its body where it is called (once: no recursion)
            launches += _scan(scan.blocks.functions[head], variables, exported, scan, in_container)
            scan.calls.remove(head)
        else:
            argv = [part for word in words for part in expand(word, variables)]
            read_installs(argv, scan.pins, scan.installs)
            change = image_change(argv)
            if change:
                scan.notes.append(f"the launch changes the image before serving: {change}; not imported (stackctl "
                                  "builds the image from the recipe and does not replay it: bake the change into a "
                                  "base image and name it in stack.base_image, or drop it)")
            server_at = server_args_at(argv)
            if server_at is not None:
                if scan.lmcache_server is None:
                    scan.lmcache_server = argv[server_at:]
                    scan.notes += form_notes(argv, server_at)
                    container = container_note(argv[:server_at])
                    if container:
                        scan.notes.append(container)
                else:
                    scan.notes.append("the script starts a second `lmcache server`; imported the first one")
                continue
            launch = _launch_in(words, variables, exported, scan, in_container)
            if launch is not None:
                launches.append(launch)
    return launches


def _keeps_literal(key: str, value: str, variables: dict, scan: _Scan) -> bool:
    """A variable the script first sets to a value it writes, then to one only its run time knows (`MODEL=x` in
    one branch, `MODEL=$2` in another): the written value is kept, with a note, since the branches cannot be told
    apart here and a recipe needs a value."""
    earlier = variables.get(key)
    if earlier is None or runtime_reference(earlier) or not runtime_reference(value):
        return False
    scan.notes.append(f"{key} is also set to {value} in the script (known only when it runs); the value the script "
                      f"writes, {earlier}, was used")
    return True


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
            return _container_command(argv[position + 1:], env, scan)
        kind, start = _server_at(argv, position)
        if kind:
            launch = Launch()
            launch.kind, launch.args, launch.env = kind, argv[start:], env
            _read_wrappers(argv[:position], launch)
            if scan.inside is not None and not in_container:
                return _in_container(scan.inside, launch, env, scan, entered=True)
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
    """(kind, index of its first argument) when a server command starts at argv[i]."""
    base = posixpath.basename(argv[i])
    if base == "vllm" and argv[i + 1:i + 2] == ["serve"]:
        return "vllm serve", i + 2
    if re.fullmatch(r"python[0-9.]*", base) and argv[i + 1:i + 2] == ["-m"]:
        module = argv[i + 2] if i + 2 < len(argv) else ""
        kind = {"vllm.entrypoints.openai.api_server": "api_server", "vllm.entrypoints.api_server": "demo api_server",
                "atom.entrypoints.openai_server": "atom server"}.get(module, "")
        return (kind, i + 3) if kind else ("", 0)
    return "", 0


def _container_command(words: list[str], host_env: dict, scan: _Scan) -> Launch | None:
    """`docker run`, `docker pull` and `docker exec` (or podman): a server launch, or what later commands run in."""
    verb = words[1] if words[:1] == ["container"] else words[0] if words else ""
    rest = words[2:] if words[:1] == ["container"] else words[1:]
    if verb in ("pull", "image") and rest:
        image = rest[-1] if verb == "pull" else (rest[-1] if rest[:1] == ["pull"] else "")
        if image and not image.startswith("-"):
            scan.pulled.append(image)
        return None
    if verb == "exec":
        return _docker_exec(rest, scan)
    if verb != "run":
        return None
    run = read_docker_run(rest, host_env, scan.script_dir)
    if run is None:
        return None
    return _docker_launch(run, host_env, scan)


def _docker_exec(words: list[str], scan: _Scan) -> Launch | None:
    """`docker exec [options] NAME COMMAND`: COMMAND runs in that container; a bare shell means the commands that
    follow are typed inside it."""
    i = 0
    env = {}
    while i < len(words) and words[i].startswith("-"):
        if words[i] in ("-e", "--env", "-w", "--workdir", "-u", "--user") and i + 1 < len(words):
            if words[i] in ("-e", "--env") and "=" in words[i + 1]:
                key, value = words[i + 1].split("=", 1)
                env[key] = value
            i += 1
        i += 1
    if i >= len(words) or words[i] not in scan.containers:
        return None
    container = scan.containers[words[i]]
    command = words[i + 1:]
    if not command or (command[0] in _SHELLS and "-c" not in command):
        scan.inside = container
        return None
    inner = _scan(shlex.join(command), {**container.env, **env}, set(container.env) | set(env), scan,
                  in_container=True)
    return _in_container(container, inner[0], env, scan, entered=True) if inner else None


def _docker_launch(run: DockerRun, host_env: dict, scan: _Scan) -> Launch | None:
    """The server a `docker run` starts; a container started without one (a shell, `sleep infinity`) is where the
    script's later commands run. host_env is what the script exported (docker -e NAME copies from it)."""
    command = run.command
    scan.containers[run.name or run.image] = run  # `docker exec NAME ...` may run the server in it later
    interactive = any(option in ("-i", "-t", "--interactive", "--tty") for option in run.decided)
    shell = bool(command) and posixpath.basename(command[0]) in _SHELLS and "-c" not in command
    if shell or command[:1] == ["sleep"] or not command and interactive and not runs_server(run.image):
        scan.inside = run  # a container to work in: the commands that follow are typed inside it
        return None
    server = server_in_container(run, scan) if command or runs_server(run.image) else None
    if server is None:
        scan.notes.append(f"the script also starts a container of {run.image} that runs no vLLM server "
                          f"({' '.join(run.decided + run.command) or 'its default command'}): not part of the recipe")
        return None
    launch = _in_container(run, server, {}, scan, entered=False)
    if "PYTHONHASHSEED" in host_env and "PYTHONHASHSEED" not in launch.env:
        launch.notes.append("PYTHONHASHSEED is set in the script but not passed to the container (no -e "
                            "PYTHONHASHSEED): the server ran without it")
    return launch


def launch_from_container(run: DockerRun, script_dir: Path | None = None) -> Launch | None:
    """The launch of a container described elsewhere (a compose service, a Kubernetes container): its server, with
    the container around it; None when it starts none."""
    scan = _Scan(ScriptBlocks(""), script_dir)
    server = server_in_container(run, scan)
    if server is None:
        return None
    launch = _in_container(run, server, {}, scan, entered=False)
    launch.pins, launch.installs = scan.pins, scan.installs
    launch.notes += scan.notes  # what the container's own script did before serving (an image change, ...)
    return launch


def server_in_container(run: DockerRun, scan: _Scan | None = None) -> Launch | None:
    """The server a container's command starts: the image's own entrypoint when the command is only arguments
    (vLLM's images run `vllm serve`, so a first word that is no flag is the model), else the command itself."""
    command = run.command
    server = Launch()
    if runs_server(run.image) and (not command or not _is_program(command[0])):
        server.kind, server.args = "vllm serve", list(command)
        return server
    if command and command[0].startswith("-"):
        server.kind, server.args = "image entrypoint", list(command)
        run.notes.append(f"the container command starts with a flag: assumed {run.image}'s entrypoint is the vLLM "
                         "OpenAI server")
        return server
    scan = scan or _Scan(ScriptBlocks(""), None)
    inner = _scan(shlex.join(command), dict(run.env), set(run.env), scan, in_container=True)
    return inner[0] if inner else None


def _is_program(word: str) -> bool:
    """Whether the first word after a vLLM image is a program rather than a server argument. An absolute path is a
    program when it names one (a known program, a script, anything in a bin directory); else it is the model, as in
    `docker run vllm/vllm-openai /models/m --flags` (the image's entrypoint is `vllm serve`, vLLM 0.33.0
    docker/Dockerfile:1344)."""
    base = posixpath.basename(word)
    known = base in ("vllm", "bash", "sh", "env", "numactl", "taskset") or bool(re.fullmatch(r"python[0-9.]*", base))
    return known or word.startswith("/") and ("/bin/" in word or base.endswith((".sh", ".py")))


def _in_container(run: DockerRun, server: Launch, extra_env: dict, scan: _Scan, entered: bool) -> Launch:
    """The server with the container around it: image, environment, devices, mounts, pinning, GPU requests."""
    launch = Launch()
    launch.kind, launch.args = server.kind, server.args
    launch.env = {**run.env, **extra_env, **server.env}
    launch.passthrough = list(run.passthrough)
    launch.secret_refs = dict(run.secret_refs)
    launch.image, launch.image_source = run.image, "docker run"
    launch.devices, launch.volumes = list(run.devices), list(run.volumes)
    launch.container_name, launch.shm_size, launch.workdir = run.name, run.shm_size, run.workdir
    launch.numa = server.numa or run.mems
    launch.cpus = server.cpus or run.cpus
    launch.gpus = ([f"--gpus {run.gpus}"] if run.gpus else []) + list(run.gpu_resources)
    if run.runtime:
        launch.gpus.append(f"--runtime {run.runtime}")
    launch.decided = list(run.decided)
    launch.files = dict(run.files)
    launch.notes = run.notes + server.notes
    if entered:
        launch.notes.append(f"the server command runs inside the container started first ({run.image}"
                            f"{', ' + run.name if run.name else ''}): its image, environment and mounts were used")
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
