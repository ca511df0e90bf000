"""The Kubernetes shapes that start vLLM without a plain pod spec saying so, turned into the pod specs
manifest.py reads: a KServe InferenceService (its predictor's `model`, run by the huggingface runtime or a
ServingRuntime of the same file), llm-d's ModelService (Helm values or the resource: containers with a
`modelCommand`), and a kustomize patch (a container with the server's arguments whose image and command its base
sets). What such a shape decides that a recipe cannot hold (replicas, the runtime's image, routing) is said in a note.

KServe's huggingface runtime (python/huggingfaceserver/huggingfaceserver/__main__.py) serves `--model_id` (else
`--model_dir`, default /mnt/models, where storageUri is downloaded) under `--model_name`, passes the other arguments
to vLLM's engine argument parser (`maybe_add_vllm_cli_parser`), and takes `--max_length` for `--max_model_len`.
llm-d-modelservice's chart (charts/llm-d-modelservice/templates/_helpers.tpl) turns `modelCommand: vllmServe` into
`vllm serve MODEL --port P [--tensor-parallel-size T] [--data-parallel-size D] --served-model-name NAME ARGS`, with
MODEL the hf:// model of `modelArtifacts.uri` (or the mounted path of a pvc:// one), and `imageDefault` into the
same arguments after `--model` for the image's own entrypoint.
"""

from __future__ import annotations

import copy
import posixpath
import re
from typing import Any

# huggingfaceserver's own arguments (and KServe's model server's) that are no vLLM flag: dropped, named in a note.
_KSERVE_OWN = ("--model_dir", "--model_revision", "--tokenizer_revision", "--disable_lower_case",
               "--disable_special_tokens", "--tensor_input_names", "--task", "--backend", "--return_token_type_ids",
               "--return_probabilities", "--max_log_len", "--max-log-len", "--http_port", "--grpc_port", "--workers",
               "--predictor_host", "--predictor_protocol", "--predictor_use_ssl", "--configure_logging",
               "--log_config_file", "--enable_docs_url", "--disable_log_requests")
_KSERVE_RENAMED = {"--model_name": "--served-model-name", "--max_length": "--max-model-len"}
KSERVE_MODEL_DIR = "/mnt/models"
NOTES = "__stackctl_notes__"  # a container's notes, carried to the DockerRun manifest.py builds from it


def shape_pods(doc: dict, docs: list[dict], pod_specs) -> list[dict]:
    """The pod specs of one document, the shapes above made plain (copies: the documents are not changed)."""
    if doc.get("kind") == "InferenceService":
        return _inference_service(doc, docs)
    if doc.get("kind") in ("ServingRuntime", "ClusterServingRuntime"):
        return []  # a template: it runs as the container of the InferenceService that uses it
    found = []
    for pod in pod_specs(doc):
        if any(isinstance(c, dict) and "modelCommand" in c for c in pod.get("containers") or []):
            pod = _model_service(pod, doc)
        found.append(pod)
    return found


# -- KServe ----------------------------------------------------------------------------------------------------------

def _inference_service(doc: dict, docs: list[dict]) -> list[dict]:
    spec = doc.get("spec") or {}
    predictor = spec.get("predictor") or {}
    name = str((doc.get("metadata") or {}).get("name") or "inferenceservice")
    notes = [f"InferenceService {name}: {key} {_short(predictor[key])} is KServe's to decide; not carried"
             for key in ("minReplicas", "maxReplicas", "scaleMetric", "scaleTarget", "serviceAccountName")
             if key in predictor]
    notes += [f"InferenceService {name}: the {part} is not part of the recipe (stackctl runs the predictor's server)"
              for part in ("transformer", "explainer") if part in spec]
    model = predictor.get("model")
    if not isinstance(model, dict):
        return [predictor] if isinstance(predictor.get("containers"), list) else []
    runtime = _serving_runtime(model, docs)
    container = _runtime_container(model, runtime, name, notes)
    pod = {key: value for key, value in predictor.items() if key not in ("model", "containers")}
    pod["volumes"] = list(((runtime or {}).get("spec") or {}).get("volumes") or []) + list(pod.get("volumes") or [])
    pod["containers"] = [container] + [c for c in predictor.get("containers") or [] if isinstance(c, dict)]
    return [pod]


def _serving_runtime(model: dict, docs: list[dict]) -> dict | None:
    """The ServingRuntime of the same file the model runs in: the one it names, else one supporting its format."""
    wanted = model.get("runtime")
    fmt = str((model.get("modelFormat") or {}).get("name") or "")
    for doc in docs:
        if doc.get("kind") not in ("ServingRuntime", "ClusterServingRuntime"):
            continue
        spec = doc.get("spec") or {}
        formats = [str(f.get("name")) for f in spec.get("supportedModelFormats") or [] if isinstance(f, dict)]
        if (wanted and (doc.get("metadata") or {}).get("name") == wanted) or (not wanted and fmt in formats):
            return doc
    return None


def _runtime_container(model: dict, runtime: dict | None, name: str, notes: list[str]) -> dict:
    """The container KServe runs for the model: the runtime's container with the model's fields over it."""
    fmt = str((model.get("modelFormat") or {}).get("name") or "")
    base: dict = {}
    if runtime is not None:
        containers = (runtime.get("spec") or {}).get("containers") or []
        base = copy.deepcopy(containers[0]) if containers and isinstance(containers[0], dict) else {}
    container = {**base, **{k: v for k, v in model.items() if k not in ("modelFormat", "runtime", "storageUri",
                                                                         "protocolVersion")}}
    container["env"] = list(base.get("env") or []) + list(model.get("env") or [])
    args = [str(a).replace("{{.Name}}", name) for a in list(base.get("args") or []) + list(model.get("args") or [])]
    container.setdefault("name", "kserve-container")
    image = container.get("image")
    if fmt == "huggingface" or (isinstance(image, str) and "huggingfaceserver" in image):
        container["command"], container["args"] = _huggingface_server(args, model, notes)
        container["image"] = None  # KServe's own server, not an image of vLLM's server: never a base image
        where = f"{image}, named by the ServingRuntime" if image else "named by the cluster's ServingRuntime"
        notes.append(f"InferenceService {name}: modelFormat huggingface runs KServe's huggingface runtime ({where}); "
                     "stackctl runs vLLM's own server with the same engine arguments, from its default base image")
    else:
        container["args"] = args
        if not image:
            notes.append(f"InferenceService {name}: modelFormat {fmt or '(none)'} names no image in this file (the "
                         "cluster's ServingRuntime has it): its arguments read as the vLLM server's")
    uri = str(model.get("storageUri") or "")
    if uri.startswith("hf://") and container.get("command", [None])[:2] == ["vllm", "serve"] and \
            container["command"][2] == KSERVE_MODEL_DIR:
        container["command"][2] = uri[len("hf://"):]  # vLLM downloads a Hugging Face id itself
        notes.append(f"InferenceService {name}: storageUri {uri} became model.path {uri[len('hf://'):]} (KServe "
                     f"downloads it to {KSERVE_MODEL_DIR}; vLLM downloads a Hugging Face id itself)")
    elif uri:
        notes.append(f"InferenceService {name}: storageUri {uri} is downloaded by KServe to {KSERVE_MODEL_DIR}; "
                     "stackctl mounts host paths only: set model.path to where the model is")
    container.setdefault(NOTES, []).extend(notes)
    return container


def _huggingface_server(args: list[str], model: dict, notes: list[str]) -> tuple[list[str], list[str]]:
    """huggingfaceserver's arguments as the `vllm serve` command it amounts to."""
    out: list[str] = []
    model_id = model_dir = None
    dropped = []
    i = 0
    while i < len(args):
        word = args[i]
        flag, eq, value = word.partition("=")
        takes_value = not eq and i + 1 < len(args) and not args[i + 1].startswith("--")
        if not eq and takes_value and flag in ("--model_id", "--model_dir", *_KSERVE_RENAMED, *_KSERVE_OWN):
            value, i = args[i + 1], i + 1
        if flag == "--model_id":
            model_id = value
        elif flag == "--model_dir":
            model_dir = value
        elif flag in _KSERVE_RENAMED:
            renamed = _KSERVE_RENAMED[flag]
            if renamed in out:  # the model's own value replaces the runtime's ({{.Name}})
                del out[out.index(renamed):out.index(renamed) + 2]
            out += [renamed, value]
        elif flag in _KSERVE_OWN:
            dropped.append(word if eq or not value else f"{flag} {value}")
        else:
            out.append(word)
        i += 1
    if dropped:
        notes.append(f"KServe's huggingface runtime options with no vLLM equivalent, not carried: {', '.join(dropped)}")
    served = model_id or model_dir or KSERVE_MODEL_DIR
    if model_id or model_dir:
        notes.append(f"KServe's {'--model_id' if model_id else '--model_dir'} {served} is the model vLLM serves "
                     "(model.path)")
    return ["vllm", "serve", served], out


# -- llm-d -----------------------------------------------------------------------------------------------------------

def _model_service(pod: dict, doc: dict) -> dict:
    """A ModelService role (decode / prefill: containers with a modelCommand) as the pod the chart renders."""
    spec = doc.get("spec")
    root: dict = spec if doc.get("kind") == "ModelService" and isinstance(spec, dict) else doc
    artifacts = root.get("modelArtifacts") or {}
    pod = dict(pod)
    containers = []
    for container in pod.get("containers") or []:
        if isinstance(container, dict) and container.get("modelCommand") in ("vllmServe", "imageDefault"):
            container = _model_command(container, pod, artifacts, root)
        containers.append(container)
    pod["containers"] = containers
    return pod


def _model_command(container: dict, pod: dict, artifacts: dict, root: dict) -> dict:
    container = dict(container)
    command = container.pop("modelCommand")
    name = str(artifacts.get("name") or "")
    uri = _helm(str(artifacts.get("uri") or ""), name, unquote=True)
    protocol, _, rest = uri.partition("://")
    model = rest if protocol == "hf" else f"{artifacts.get('mountPath') or '/model-cache'}/{rest.split('/', 1)[-1]}"
    parallel = pod.get("parallelism") or {}
    routing = root.get("routing") or {}
    port = str(routing.get("servicePort") or 8000) if (routing.get("proxy") or {}).get("enabled") is False \
        else str((routing.get("proxy") or {}).get("targetPort") or 8200)
    args = ["--model", model] if command == "imageDefault" else [model]
    args += ["--port", port]
    for key, flag in (("tensor", "--tensor-parallel-size"), ("data", "--data-parallel-size")):
        if int(parallel.get(key) or 1) > 1:
            args += [flag, str(parallel[key])]
    args += ["--served-model-name", name] if name else []
    args += [_helm(str(a), name) for a in container.get("args") or []]
    container["command"] = ["vllm", "serve"] if command == "vllmServe" else []
    container["args"] = args
    notes = container.setdefault(NOTES, [])
    notes.append(f"llm-d ModelService container {container.get('name')}: modelCommand {command} rendered as the "
                 f"chart does (model from modelArtifacts.uri {uri or '(none)'})")
    replicas = pod.get("replicas")
    if replicas is not None:
        notes.append(f"llm-d ModelService: replicas {replicas} (and the routing sidecar, the inference pool) are "
                     "the cluster's; the recipe is one server")
    if protocol not in ("hf", ""):
        notes.append(f"llm-d ModelService: modelArtifacts.uri {uri} is mounted by the chart; set model.path to "
                     "where the model is on the host")
    return container


def kustomize_patch_args(container: dict, known_flags: dict) -> list[str] | None:
    """The `vllm serve` arguments of a container that names no image and no command but vLLM's flags (a kustomize
    patch over a base that sets both); None for any other container."""
    args = [str(a) for a in container.get("args") or []]
    if container.get("image") or container.get("command") or not args:
        return None
    if not any(a.split("=", 1)[0] in known_flags for a in args if a.startswith("--")):
        return None
    return args


def kustomize_patch_script(container: dict) -> bool:
    """Whether a container that names no image runs a shell script (`command: [/bin/bash, -c]`, the script in args)
    that starts vLLM: a kustomize patch over a base that sets the image, as llm-d's AMD guides write it."""
    command = [str(word) for word in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    shell = len(command) == 2 and posixpath.basename(command[0]) in ("bash", "sh") and command[1] in ("-c", "-lc")
    return not container.get("image") and shell and len(args) == 1 and bool(re.search(r"\bvllm\b", args[0]))


def _helm(text: str, name: str, unquote: bool = False) -> str:
    """The one Helm reference the chart's examples put in values (`{{ .Values.modelArtifacts.name }}`); with UNQUOTE
    (the uri) the quotes around it too."""
    text = re.sub(r"\{\{\s*\.Values\.modelArtifacts\.name\s*\}\}", name, text)
    return text.replace('"', "") if unquote else text


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."
