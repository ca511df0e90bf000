"""Compose files and Kubernetes manifests, read as YAML (safely, with the limits of yaml_input), never as shell.

The service or container that runs the vLLM server becomes a container.DockerRun (image, command, environment,
mounts, devices, GPU requests) and launch.launch_from_container finds its server the way it does for `docker run`.
What only the cluster or the host knows at run time (a Secret's value, a field of the pod, an unset compose
variable) stays a reference: secrets become references in the recipe, everything else a note.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from stackctl.errors import StackctlError
from stackctl.importer.container import DockerRun, env_file
from stackctl.importer.k8s_shapes import NOTES, kustomize_patch_args, kustomize_patch_script, shape_pods
from stackctl.importer.launch import Launch, launch_from_container
from stackctl.importer.lmcache_server import form_notes, run_note, server_args_at
from stackctl.importer.yaml_input import load_yaml_documents

# Top-level keys (column 0) of a compose file or a manifest; a shell script has none of them.
_TOP_LEVEL = re.compile(r"^(services|apiVersion|kind|modelArtifacts)\s*:", re.MULTILINE)
# Compose keys stackctl decides itself when it runs the stack (named in a note, not copied).
_COMPOSE_DECIDES = ("ports", "ipc", "network_mode", "networks", "cap_add", "group_add", "security_opt", "privileged",
                    "restart", "ulimits", "healthcheck", "stdin_open", "tty", "user", "working_dir", "extra_hosts",
                    "sysctls", "runtime", "deploy", "depends_on", "labels", "logging")
# Kubernetes pod and container fields stackctl decides itself.
_POD_DECIDES = ("hostIPC", "hostNetwork", "hostPID", "nodeSelector", "tolerations", "affinity", "runtimeClassName")
_CONTAINER_DECIDES = ("ports", "securityContext", "livenessProbe", "readinessProbe", "startupProbe", "workingDir")


def looks_like_manifest(text: str) -> bool:
    """Whether a launch file is a compose file or a Kubernetes manifest rather than a shell script."""
    return bool(_TOP_LEVEL.search(text))


def parse_manifest(text: str, source: str, script_dir: Path | None = None) -> Launch:
    """The server launch a compose file or Kubernetes manifest describes (a StackctlError when there is none)."""
    docs = [doc for doc in load_yaml_documents(text, source) if isinstance(doc, dict)]
    if any(isinstance(doc.get("services"), dict) for doc in docs):
        runs = [_compose_service(name, service, script_dir) for doc in docs
                for name, service in (doc.get("services") or {}).items() if isinstance(service, dict)]
        shape = "compose service"
    else:
        config_maps = {str((doc.get("metadata") or {}).get("name")): doc.get("data") or {}
                       for doc in docs if doc.get("kind") == "ConfigMap"}
        runs = [_k8s_container(container, pod, config_maps) for doc in docs
                for pod in shape_pods(doc, docs, _pod_specs)
                for container in pod.get("containers") or [] if isinstance(container, dict)]
        shape = "container"
    launches = [(run, launch) for run in runs if run is not None
                for launch in [launch_from_container(run, script_dir)] if launch is not None]
    if not launches:
        raise StackctlError(f"no {shape} runs a vLLM server (fix: its command must be `vllm serve MODEL ...` or the "
                            "arguments of an image whose entrypoint is the server, e.g. vllm/vllm-openai)")
    run, launch = launches[0]
    if len(launches) > 1:
        launch.notes.append(f"the file describes {len(launches)} servers; imported the first one ({run.name})")
    servers = {id(r) for r, _ in launches}
    for other in runs:
        if other is not None and id(other) not in servers and _lmcache_server(other, launch, shape):
            continue
        if other is not None and id(other) not in servers:
            command = " ".join(other.command) or "its image's default command"
            env = f" (environment: {', '.join(sorted(other.env) + other.passthrough)})" if other.env or \
                other.passthrough else ""
            launch.notes.append(f"{shape} {other.name} ({other.image}) is not part of the recipe: it runs "
                                f"{command}{env}")
    launch.image_source = "compose" if shape == "compose service" else "kubernetes"
    return launch


def _lmcache_server(run: DockerRun, launch: Launch, shape: str) -> bool:
    """A service or container that runs LMCache's own server beside vLLM (a compose service, a sidecar in vLLM's
    pod, a DaemonSet on its node): its flags become the launch's `lmcache server`; whether vLLM reaches it is
    judged with the connector (importer/offload.py)."""
    start = server_args_at(run.command)
    if start is None:
        return False
    if launch.lmcache_server is not None:
        launch.notes.append(f"{shape} {run.name} starts a second LMCache server; imported the first one")
        return True
    launch.lmcache_server = run.command[start:]
    launch.notes += form_notes(run.command, start)
    launch.notes.append(run_note(run, f"{shape} {run.name}"))
    return True


# -- compose ---------------------------------------------------------------------------------------------------------

def _compose_service(name: str, service: dict, script_dir: Path | None) -> DockerRun | None:
    image = _interpolate(service.get("image"))
    if not isinstance(image, str) or not image:
        return None
    command = _words(service.get("entrypoint")) + _words(service.get("command"))
    run = DockerRun(image, command, name=_interpolate(service.get("container_name")) or name,
                    workdir=service.get("working_dir"))
    run.env.update(_compose_env(service.get("environment"), run))
    for path in service.get("env_file") or [] if not isinstance(service.get("env_file"), str) \
            else [service["env_file"]]:
        run.env.update(env_file(str(path.get("path") if isinstance(path, dict) else path), script_dir, run.notes))
    for volume in service.get("volumes") or []:
        if isinstance(volume, str) and ":" in volume:
            host, container = _interpolate(volume).split(":")[:2]
            run.volumes.append((host, container))
        elif isinstance(volume, dict) and volume.get("source") and volume.get("target"):
            run.volumes.append((str(_interpolate(volume["source"])), str(volume["target"])))
    run.devices += [str(d).split(":", 1)[0].rstrip("/") if str(d).startswith("/") else str(d)
                    for d in service.get("devices") or []]
    shm = service.get("shm_size")
    run.shm_size = str(shm).lower() if shm is not None else None
    run.cpus = str(service["cpuset"]) if service.get("cpuset") is not None else None
    run.runtime = service.get("runtime")
    for device in ((((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {})
                   .get("devices") or []):
        if isinstance(device, dict):
            run.gpu_resources.append("compose device reservation " + ", ".join(
                f"{key}: {value}" for key, value in device.items()))
    run.decided += [f"compose {key}: {_short(service[key])}" for key in _COMPOSE_DECIDES if key in service]
    return run


def _compose_env(environment: Any, run: DockerRun) -> dict[str, str]:
    """compose `environment` (a mapping, or a list of NAME=value / NAME): NAME alone is the host's value."""
    pairs: list[tuple[str, Any]] = []
    if isinstance(environment, dict):
        pairs = list(environment.items())
    elif isinstance(environment, list):
        pairs = [(item.partition("=")[0], item.partition("=")[2] if "=" in item else None)
                 for item in map(str, environment)]
    env = {}
    for key, value in pairs:
        if value is None:
            run.passthrough.append(str(key))
        else:
            env[str(key)] = _scalar(_interpolate(value))
    return env


_COMPOSE_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def _interpolate(value: Any) -> Any:
    """compose's interpolation of host variables: `${NAME:-default}` takes its default (the host's value is unknown
    here); `${NAME}` and `$NAME` stay as written (known at run time only); `$$` is a literal `$`."""
    if not isinstance(value, str):
        return value
    value = _COMPOSE_VARIABLE.sub(lambda m: m.group(3) if m.group(2) in (":-", "-") else m.group(0), value)
    return value.replace("$$", "$")


def _words(value: Any) -> list[str]:
    """A compose command or entrypoint: a list as given, a string split like compose does (no shell)."""
    if isinstance(value, list):
        return [str(_scalar(_interpolate(item))) for item in value]
    if isinstance(value, str):
        try:
            return shlex.split(_interpolate(value))
        except ValueError:
            return _interpolate(value).split()
    return []


# -- Kubernetes ------------------------------------------------------------------------------------------------------

def _pod_specs(node: Any) -> list[dict]:
    """Every pod spec in a document (Pod, Deployment, StatefulSet, Job, LeaderWorkerSet, ...): a mapping with a list
    of containers."""
    found, stack = [], [node]
    while stack:
        item = stack.pop(0)
        if isinstance(item, dict):
            if isinstance(item.get("containers"), list):
                found.append(item)
            stack += [value for key, value in item.items() if key != "containers"]
        elif isinstance(item, list):
            stack += item
    return found


def _k8s_container(container: dict, pod: dict, config_maps: dict) -> DockerRun | None:
    image = container.get("image")
    patch = None if isinstance(image, str) else kustomize_patch_args(container, _newest_flags())
    script = not isinstance(image, str) and kustomize_patch_script(container)
    if not isinstance(image, str) and patch is None and not script and NOTES not in container:
        return None
    image = image if isinstance(image, str) else ""
    run = DockerRun(image, [], name=str(container.get("name") or image), workdir=container.get("workingDir"))
    run.notes += list(container.get(NOTES) or [])
    if patch is not None:
        container = {**container, "command": ["vllm", "serve"]}
        run.notes.append(f"container {run.name} names no image and no command (a kustomize patch: its base sets "
                         "them, not in this file); its args read as `vllm serve` arguments; stack.base_image is "
                         "stackctl's default")
    if script:
        run.notes.append(f"container {run.name} names no image (a kustomize patch: its base sets it, not in this "
                         "file); its shell script is read as the launch; stack.base_image is stackctl's default")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        _env_from(source, config_maps, env, run)
    for item in container.get("env") or []:
        if isinstance(item, dict) and item.get("name"):
            _env_item(item, config_maps, env, run)
    run.env = env
    run.command = [_k8s_expand(str(word), env) for word in (container.get("command") or [])
                   + (container.get("args") or [])]
    _k8s_volumes(container, pod, config_maps, run)
    for kind in ("limits", "requests"):
        for key, value in ((container.get("resources") or {}).get(kind) or {}).items():
            if key.endswith("/gpu"):
                run.gpu_resources.append(f"{key}: {value}")
    run.decided += [f"pod {key}: {_short(pod[key])}" for key in _POD_DECIDES if key in pod]
    run.decided += [f"container {key}" for key in _CONTAINER_DECIDES if key in container]
    return run


def _newest_flags() -> dict:
    """The `vllm serve` flags of the newest vLLM release stackctl has facts for."""
    from stackctl.knowledge import facts

    known = facts.versions("vllm")
    return facts.load("vllm", known[-1]).get("flags") or {} if known else {}


def _env_item(item: dict, config_maps: dict, env: dict, run: DockerRun) -> None:
    """One `env` entry: a value ($(VAR) expanded as Kubernetes does), or a reference the cluster resolves."""
    name = str(item["name"])
    if "value" in item:
        env[name] = _k8s_expand(str(_scalar(item["value"])), env)
        return
    ref = item.get("valueFrom") or {}
    if "secretKeyRef" in ref:
        secret = ref["secretKeyRef"] or {}
        run.secret_refs[name] = f"Secret {secret.get('name')} key {secret.get('key')}"
    elif "configMapKeyRef" in ref and (ref["configMapKeyRef"] or {}).get("name") in config_maps:
        key_ref = ref["configMapKeyRef"]
        env[name] = str(config_maps[key_ref["name"]].get(key_ref.get("key"), ""))
    else:
        what = next(iter(ref), "valueFrom")
        env[name] = f"$({what} {_short(ref.get(what))})"  # only the cluster knows it: a run-time value


def _env_from(source: dict, config_maps: dict, env: dict, run: DockerRun) -> None:
    """`envFrom`: a ConfigMap of the same file gives its values; anything else is named in a note."""
    if not isinstance(source, dict):
        return
    config = (source.get("configMapRef") or {}).get("name")
    if config in config_maps:
        env.update({str(k): str(v) for k, v in config_maps[config].items()})
        return
    what = "Secret" if "secretRef" in source else "ConfigMap"
    name = (source.get("secretRef") or source.get("configMapRef") or {}).get("name")
    run.notes.append(f"envFrom {what} {name}: every key of it reached the server; their names are not in this file: "
                     f"add them by hand ({'serve.secret_env' if what == 'Secret' else 'serve.env'})")


def _k8s_volumes(container: dict, pod: dict, config_maps: dict, run: DockerRun) -> None:
    """volumeMounts: hostPath mounts (devices among them), memory emptyDir at /dev/shm (the shared memory size),
    ConfigMap files of the same manifest; other volumes (PVCs) are named in a note."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or [] if isinstance(v, dict)}
    files: dict[str, str] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name")) or {}
        path = str(mount.get("mountPath") or "")
        if "hostPath" in volume:
            host = str((volume["hostPath"] or {}).get("path") or "")
            if host.startswith("/dev/"):
                run.devices.append(host)
            else:
                run.volumes.append((host, path))
        elif "emptyDir" in volume and path == "/dev/shm":
            size = str((volume["emptyDir"] or {}).get("sizeLimit") or "")
            run.shm_size = re.sub(r"^(\d+)([KMGT])i?$", lambda m: m.group(1) + m.group(2).lower(), size) or None
        elif "configMap" in volume and (volume["configMap"] or {}).get("name") in config_maps:
            for key, text in config_maps[volume["configMap"]["name"]].items():
                files[f"{path.rstrip('/')}/{key}"] = str(text)
        else:
            kind = next((k for k in volume if k != "name"), "volume")
            run.notes.append(f"volume {mount.get('name')} ({kind}) at {path}: stackctl mounts host paths only; not "
                             "imported (a model or tier under it needs a host path)")
    run.files = files


def _k8s_expand(text: str, env: dict) -> str:
    """Kubernetes' `$(VAR)` in command, args and env values: replaced when VAR is a literal of the container's
    environment, kept (a run-time value) otherwise; `$$(VAR)` stays `$(VAR)`."""
    return re.sub(r"(\$?)\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: m.group(0)[1:] if m.group(1) else env.get(m.group(2), m.group(0)), text)


# -- shared ----------------------------------------------------------------------------------------------------------

def _scalar(value: Any) -> Any:
    """YAML scalars as the strings a process environment holds (true -> "true", 1 -> "1")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, (int, float)) else value


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."
