"""`docker run [options] IMAGE [command]` (or podman): what the options say about the container around the server."""

from __future__ import annotations

from pathlib import Path

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


class DockerRun:
    """The container a `docker run` starts: image, command (entrypoint first) and the options stackctl imports."""

    def __init__(self, image: str, command: list[str]):
        self.image = image
        self.command = command
        self.env: dict[str, str] = {}      # -e NAME=value, -e NAME (from the script's exports), --env-file
        self.passthrough: list[str] = []   # -e NAME the script did not set: taken from the host at run time
        self.devices: list[str] = []
        self.volumes: list[tuple[str, str]] = []  # (host, container)
        self.name: str | None = None
        self.shm_size: str | None = None
        self.cpus: str | None = None       # --cpuset-cpus (the last one)
        self.mems: str | None = None       # --cpuset-mems (the first one)
        self.notes: list[str] = []


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
