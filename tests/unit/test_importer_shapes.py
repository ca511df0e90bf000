"""`stackctl init --from-command` on the shapes real launches come in: `docker run` / `podman run` (image
entrypoints, set-up containers, docker exec, docker pull, aliases, --env-file), compose services and Kubernetes
manifests read as YAML, NVIDIA launches translated to ROCm, ATOM in its documented forms, and values only the old
launch's run time knew. The corpus (test_corpus.py) runs the real ones; these pin each behaviour down."""

from __future__ import annotations

import pytest
from helpers import run_cli

from stackctl import importer
from stackctl.errors import StackctlError
from stackctl.importer import atom_server
from stackctl.importer.container import is_cuda_image, repository, runs_server
from stackctl.importer.manifest import looks_like_manifest
from stackctl.importer.yaml_input import MAX_YAML_NODES, load_yaml_documents
from stackctl.recipe.loader import load_recipe_text
from stackctl.rules.ruleset import run_rules
from stackctl.bundle.render import render_files
from stackctl.unresolved import home_reference, runtime_reference
from stackctl.bundle.stackspec import StackSpec

LMCACHE = "'{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'"


def imported(text: str, lmcache_yaml: str | None = None, tmp_path=None, name: str = "launch.sh"):
    """(recipe, text) of an import; with tmp_path, through a file (as `init --from-command FILE` reads it)."""
    if tmp_path is not None:
        path = tmp_path / name
        path.write_text(text)
        out = importer.import_launch(path, None, "t")
    else:
        out = importer.import_launch_text(text, lmcache_yaml, "t")
    return load_recipe_text(out), out


def flat(text: str) -> str:
    """The recipe text with its comments' line breaks undone (notes wrap at 112 columns)."""
    return text.replace("\n#   ", " ").replace("\n# ", " ")


def errors(recipe) -> set[str]:
    return {f.rule_id for f in run_rules(recipe) if f.severity == "error"}


# -- values only the run time knew ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value,reference", [
    ("$MODEL", "$MODEL"), ("${arr[$i]}", "${arr[$i]}"), ("/m/$(hostname)/x", "$(hostname)"), ("$((8000 + i))",
                                                                                               "$((8000 + i))"),
    ("`id -u`", "`id -u`"), ("$1", "$1"), ("~/models", "~"), ("<your model file path>", "<your model file path>"),
    ("/path/to/nvme", "/path/to/nvme"), ("your_hugging_face_token", "your_hugging_face_token"),
    ("$(HF_TOKEN)", "$(HF_TOKEN)"),
])
def test_run_time_references_are_found(value, reference):
    assert runtime_reference(value) == reference


@pytest.mark.parametrize("value", ["/models/llama", "meta-llama/Llama-3.1-8B", "0.9", "s3://bucket.host:9000", "",
                                   '{"a": [1, 2]}', "cost 5$", None, 8000])
def test_plain_values_are_not_run_time_references(value):
    assert runtime_reference(value) is None


def test_home_is_spelled_out():
    assert home_reference("~/m") == "$HOME/m" and home_reference("~") == "$HOME" and home_reference("/m") == "/m"


def test_loop_values_are_left_out_and_nothing_renders_literally():
    script = ("BASE=8000\nfor i in 0 1; do\n  PORT=$((BASE + i))\n  CUDA_VISIBLE_DEVICES=$i vllm serve /m --port $PORT "
              "--max-num-seqs ${SEQS[$i]} --seed 1 &\ndone\n")
    recipe, text = imported(script)
    assert recipe.serve.port == 8000 and recipe.serve.max_num_seqs is None
    assert recipe.serve.extra_args == ["--seed", "1"] and "HIP_VISIBLE_DEVICES" not in recipe.serve.env
    assert "--port $((BASE + i))" in flat(text) and "${SEQS[$i]}" in flat(text)  # arithmetic is not evaluated
    assert errors(recipe) == set()
    rendered = b"".join(render_files(StackSpec(recipe)).values()).decode()
    assert "$((" not in rendered and "SEQS" not in rendered


def test_a_written_default_is_kept_over_a_value_only_the_run_time_knows():
    recipe, text = imported('MODEL="meta-llama/X"\nif [ -n "$2" ]; then\n  MODEL=$2\nfi\nvllm serve $MODEL\n')
    assert recipe.model.path == "meta-llama/X" and "MODEL is also set to $2" in flat(text)


def test_a_placeholder_model_is_kept_with_a_todo_and_refused_until_replaced():
    recipe, text = imported("model_path=<your model file path>\nvllm serve $model_path --max-model-len 4096\n")
    assert recipe.model.path == "<your model file path>" and recipe.model.max_model_len == 4096
    assert "TODO: <your model file path>" in flat(text)
    assert errors(recipe) == {"unresolved-value"}
    with pytest.raises(StackctlError, match="unresolved-value"):
        render_files(StackSpec(recipe))


def test_secrets_taken_from_host_variables_become_references():
    script = ('export HF_TOKEN\nexport TOKEN_SOURCE="${MY_HF_TOKEN}"\n'
              'docker run -e HUGGING_FACE_HUB_TOKEN=$MY_HF_TOKEN -e API_KEY -e http_proxy=$http_proxy '
              "vllm/vllm-openai:v0.21.0 m\n")
    recipe, text = imported(script)
    assert recipe.serve.secret_env == {"HUGGING_FACE_HUB_TOKEN": "MY_HF_TOKEN", "API_KEY": "API_KEY"}
    assert "http_proxy=$http_proxy" in flat(text) and "http_proxy" not in recipe.serve.env
    recipe, _ = imported("export HF_TOKEN\nvllm serve m\n")
    assert recipe.serve.secret_env == {"HF_TOKEN": "HF_TOKEN"}  # passed through from the user's shell


# -- docker run / podman run -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("image,server,cuda,repo", [
    ("vllm/vllm-openai:latest", True, True, "vllm/vllm-openai"),
    ("docker.io/vllm/vllm-openai-rocm:v0.21.0", True, False, "vllm/vllm-openai-rocm"),
    ("registry.local:5000/lmcache/vllm-openai:v0.4.5", True, True, "lmcache/vllm-openai"),
    ("rocm/vllm:rocm6.3.1_instinct_vllm0.8.3_20250410", False, False, "rocm/vllm"),
    ("nvcr.io/nvidia/tritonserver:24.01", False, True, "nvidia/tritonserver"),
    ("library/ubuntu@sha256:abc", False, False, "ubuntu"),
])
def test_images_are_known_by_their_repository(image, server, cuda, repo):
    assert (runs_server(image), is_cuda_image(image), repository(image)) == (server, cuda, repo)


def test_the_vllm_image_entrypoint_takes_the_model_first():
    recipe, text = imported("docker run --rm --gpus all --ipc=host -p 8000:8000 -v /data/hf:/root/.cache/huggingface "
                            "vllm/vllm-openai:v0.21.0 Qwen/Qwen3-8B --max-model-len 8192 --tensor-parallel-size 2\n")
    assert (recipe.model.path, recipe.model.max_model_len, recipe.model.tensor_parallel) == ("Qwen/Qwen3-8B", 8192, 2)
    assert recipe.versions.vllm == "0.21.0" and recipe.stack.base_image is None  # a CUDA build is not kept
    assert recipe.stack.platform == "rocm" and "translated from an NVIDIA launch" in flat(text)
    assert "--ipc=host" in flat(text) and "/data/hf:/root/.cache/huggingface" in flat(text)


def test_podman_with_an_entrypoint_override_and_an_env_file(tmp_path):
    (tmp_path / "vllm.env").write_text("# comment\nexport VLLM_LOGGING_LEVEL=DEBUG\nHF_TOKEN='hf_0123456789abcdefghijklm'\n")
    script = ("podman run --device /dev/kfd --device /dev/dri --env-file vllm.env --entrypoint /usr/local/bin/vllm "
              "--shm-size 32G --cpuset-cpus 0-15 --cpuset-mems 0 rocm/vllm-dev:nightly serve /models/m\n")
    recipe, text = imported(script, tmp_path=tmp_path)
    assert recipe.model.path == "/models/m" and recipe.stack.base_image == "rocm/vllm-dev:nightly"
    assert recipe.serve.env["VLLM_LOGGING_LEVEL"] == "DEBUG" and recipe.serve.secret_env == {"HF_TOKEN": "HF_TOKEN"}
    assert (recipe.host.shm_size, recipe.host.isolcpus, recipe.host.numa) == ("32g", "0-15", 0)
    assert "hf_0123456789" not in text and "--entrypoint /usr/local/bin/vllm" in flat(text)
    _, text = imported("docker run --env-file missing.env vllm/vllm-openai-rocm:latest m\n", tmp_path=tmp_path)
    assert "env file missing.env could not be read here" in flat(text)


def test_a_set_up_container_then_the_server_typed_inside_it():
    script = ("docker pull rocm/vllm:latest\ndocker run -it --device=/dev/kfd -e HIP_VISIBLE_DEVICES=0,1 "
              "-v /data:/data --name dev rocm/vllm:latest /bin/bash\nvllm serve /data/m -tp 2\n")
    recipe, text = imported(script)
    assert recipe.stack.base_image == "rocm/vllm:latest" and recipe.serve.env["HIP_VISIBLE_DEVICES"] == "0,1"
    assert recipe.model.path == "/data/m" and "runs inside the container started first" in flat(text)


def test_a_service_container_started_beside_the_server_is_not_where_it_runs():
    recipe, text = imported("docker run -d --name redis -p 6379:6379 redis:7\nvllm serve /m\n")
    assert recipe.stack.base_image is None and recipe.model.path == "/m"
    assert "a container of redis:7 that runs no vLLM server (-d -p 6379:6379)" in flat(text)


def test_docker_exec_into_a_container_started_with_sleep():
    script = ("docker run -d --name atomesh --device /dev/kfd rocm/atom-dev:vllm-v0.17.0-nightly_20260315 sleep "
              "infinity\ndocker exec -e VLLM_RPC_TIMEOUT=1 atomesh vllm serve /m --port 8010\n")
    recipe, _ = imported(script)
    assert (recipe.stack.engine, recipe.versions.vllm, recipe.serve.port) == ("atom-vllm", "0.17.0", 8010)
    assert recipe.stack.base_image == "rocm/atom-dev:vllm-v0.17.0-nightly_20260315"
    assert recipe.serve.env == {"VLLM_RPC_TIMEOUT": "1"}


def test_an_alias_of_docker_run_and_a_workdir_relative_model():
    script = ('alias drun="docker run -d --device=/dev/kfd -v /home/me:/ws -w /ws"\n'
              "drun rocm/vllm:rocm6.3.1_mi300_ubuntu22.04_py3.12_vllm_0.6.6 vllm serve models/m -tp 2\n")
    recipe, text = imported(script)
    assert recipe.model.path == "/home/me/models/m" and recipe.versions.vllm == "0.6.6"
    assert "host path of the container's /ws/models/m" in flat(text)


def test_the_script_pulled_image_and_its_own_server_command():
    recipe, text = imported("docker pull rocm/atom-dev:vllm-latest\nvllm serve m\n")
    assert (recipe.stack.engine, recipe.stack.base_image) == ("atom-vllm", "rocm/atom-dev:vllm-latest")
    assert "the server runs in the image the script pulls" in flat(text)


# -- compose and Kubernetes ------------------------------------------------------------------------------------------

COMPOSE = """# Source: test
services:
  web:
    image: nginx:1
  vllm:
    image: ${IMAGE:-vllm/vllm-openai:v0.21.0}
    container_name: llm
    runtime: nvidia
    environment:
      - HF_TOKEN=${HF_TOKEN}
      - CUDA_VISIBLE_DEVICES=0,1
      - VLLM_LOGGING_LEVEL
      - PRICE=$$5
    env_file: missing.env
    volumes:
      - /srv/models:/models
      - type: bind
        source: /nvme
        target: /cache
    shm_size: 16gb
    cpuset: "0-7"
    entrypoint: ["vllm", "serve"]
    command: /models/llama --tensor-parallel-size 2 --port ${PORT:-8001}
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              device_ids: ['0', '1']
              capabilities: [gpu]
"""


def test_a_compose_service_is_read_as_yaml(tmp_path):
    recipe, text = imported(COMPOSE, tmp_path=tmp_path, name="compose.yaml")
    assert (recipe.model.path, recipe.model.tensor_parallel, recipe.serve.port) == ("/srv/models/llama", 2, 8001)
    assert recipe.stack.name == "t" and recipe.host.isolcpus == "0-7" and recipe.host.shm_size == "16g"
    assert recipe.serve.secret_env == {"HF_TOKEN": "HF_TOKEN", "VLLM_LOGGING_LEVEL": "VLLM_LOGGING_LEVEL"}
    # compose's `$$` is a literal `$`; the importer cannot tell `$5` from a shell parameter and leaves it with a note
    assert recipe.serve.env == {"HIP_VISIBLE_DEVICES": "0,1"} and "PRICE=$5" in flat(text)
    assert recipe.stack.base_image is None and recipe.versions.vllm == "0.21.0"
    assert "compose service web (nginx:1) is not part of the recipe" in flat(text)
    assert "compose device reservation driver: nvidia" in flat(text)


K8S = """# Source: test
apiVersion: v1
kind: ConfigMap
metadata: {name: lmcache}
data:
  lmcache.yaml: |
    chunk_size: 512
    local_cpu: true
    max_local_cpu_size: 20
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {VLLM_LOGGING_LEVEL: INFO, MODEL: /models/m}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: vllm}
spec:
  template:
    spec:
      hostIPC: true
      volumes:
        - {name: cfg, configMap: {name: lmcache}}
        - {name: models, hostPath: {path: /srv/models}}
        - {name: kfd, hostPath: {path: /dev/kfd}}
        - {name: shm, emptyDir: {medium: Memory, sizeLimit: 16Gi}}
        - {name: cache, persistentVolumeClaim: {claimName: c}}
      containers:
        - name: server
          image: rocm/vllm:v0.27.1
          command: ["vllm", "serve"]
          args: ["$(MODEL)", "--max-model-len", "$(LEN)", "--kv-transfer-config", %s, "--port", "$$(NOT)"]
          envFrom:
            - configMapRef: {name: settings}
            - secretRef: {name: creds}
          env:
            - {name: PYTHONHASHSEED, value: "0"}
            - {name: LMCACHE_CONFIG_FILE, value: /etc/lmcache/lmcache.yaml}
            - name: HF_TOKEN
              valueFrom: {secretKeyRef: {name: hf, key: token}}
            - name: POD_IP
              valueFrom: {fieldRef: {fieldPath: status.podIP}}
            - name: LEVEL
              valueFrom: {configMapKeyRef: {name: settings, key: VLLM_LOGGING_LEVEL}}
          resources:
            limits: {amd.com/gpu: 1}
          volumeMounts:
            - {name: cfg, mountPath: /etc/lmcache}
            - {name: models, mountPath: /models}
            - {name: kfd, mountPath: /dev/kfd}
            - {name: shm, mountPath: /dev/shm}
            - {name: cache, mountPath: /cache}
""" % LMCACHE


def test_a_kubernetes_workload_with_its_config_maps_and_secrets(tmp_path):
    recipe, text = imported(K8S, tmp_path=tmp_path, name="vllm.yaml")
    assert recipe.model.path == "/srv/models/m" and recipe.stack.platform == "rocm"
    assert recipe.cache.enabled and recipe.cache.chunk_size == 512 and recipe.cache.hash_seed == 0
    assert [(t.kind, t.size_gb) for t in recipe.cache.tiers] == [("cpu", 20.0)]  # the ConfigMap file, followed
    assert recipe.serve.env["VLLM_LOGGING_LEVEL"] == "INFO" and recipe.serve.env["LEVEL"] == "INFO"
    assert recipe.serve.secret_env == {"HF_TOKEN": "HF_TOKEN"} and recipe.host.shm_size == "16g"
    notes = flat(text)
    assert "HF_TOKEN came from the cluster's Secret hf key token" in notes
    assert "envFrom Secret creds" in notes and "POD_IP=$(fieldRef" in notes
    assert "--max-model-len $(LEN)" in notes and "persistentVolumeClaim" in notes
    assert recipe.serve.extra_args == []  # `$$(NOT)` is Kubernetes' escape: the literal $(NOT), a run-time text
    assert errors(recipe) == set()


def test_manifests_are_told_from_scripts_and_a_manifest_without_a_server_is_refused(tmp_path):
    assert looks_like_manifest("services:\n  a: {image: x}\n") and looks_like_manifest("apiVersion: v1\nkind: Pod\n")
    assert not looks_like_manifest("export A=1\nvllm serve m\n")
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - {name: a, image: redis}\n")
    with pytest.raises(StackctlError, match="no container runs a vLLM server"):
        importer.import_launch(tmp_path / "pod.yaml")


def test_yaml_alias_bombs_are_refused_across_documents():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(6))
    with pytest.raises(StackctlError, match=f"more than {MAX_YAML_NODES:,} values"):
        load_yaml_documents("kind: x\n---\n" + bomb, "m.yaml")
    with pytest.raises(StackctlError, match="not valid YAML"):
        load_yaml_documents("a: [\n", "m.yaml")
    assert load_yaml_documents("a: 1\n---\n---\nb: 2\n", "m.yaml") == [{"a": 1}, {"b": 2}]


# -- NVIDIA and ATOM -------------------------------------------------------------------------------------------------

def test_an_nvidia_launch_is_translated_with_a_note_for_each_change():
    script = ("docker run --gpus '\"device=2,3\"' -e NVIDIA_DRIVER_CAPABILITIES=all -e TORCH_CUDA_ARCH_LIST=9.0 "
              "-e VLLM_ATTENTION_BACKEND=FLASHINFER -e CUDA_DEVICE_ORDER=PCI_BUS_ID nvcr.io/nvidia/vllm:25.01 "
              "vllm serve m -tp 2\n")
    recipe, text = imported(script)
    assert recipe.host.gpus == [2, 3] and recipe.serve.env == {"HIP_VISIBLE_DEVICES": "2,3"}
    notes = flat(text)
    for word in ("NVIDIA_DRIVER_CAPABILITIES", "TORCH_CUDA_ARCH_LIST", "FLASHINFER", "CUDA_DEVICE_ORDER",
                 "a CUDA build"):
        assert word in notes, word
    recipe, _ = imported("NVIDIA_VISIBLE_DEVICES=1 vllm serve m\n")
    assert recipe.serve.env == {"HIP_VISIBLE_DEVICES": "1"} and recipe.host.gpus == [1]


def test_gds_settings_are_named_and_kept_for_validate():
    script = f"LMCACHE_GDS_PATH=/mnt/gds LMCACHE_GDS_BUFFER_SIZE=1024 PYTHONHASHSEED=0 vllm serve m --kv-transfer-config {LMCACHE}\n"
    recipe, text = imported(script, "extra_config: {use_cufile: true}\n")
    assert "LMCache GDS settings" in flat(text)
    assert "gds-cufile-on-rocm" in errors(recipe)


def test_atoms_own_server_flags_become_vllms():
    args, notes = atom_server.to_vllm([
        "--model", "m", "--server-port", "8001", "--port", "8006", "--kv_cache_dtype", "bf16", "-tp", "8",
        "--level", "3", "--cudagraph-mode", "AF_PIECEWISE", "--cudagraph-capture-sizes", "[1,2,4]",
        "--method", "mtp", "--num-speculative-tokens", "3", "--online_quant_config", '{"global_quant_config": "x"}',
        "--enable-dp-attention", "--torch-profiler-dir", "/t", "--trust-remote-code", "extra"])
    assert args[:8] == ["--model", "m", "--port", "8001", "--kv-cache-dtype", "bfloat16", "-tp", "8"]
    assert args[args.index("--compilation-config") + 1] == '{"mode": 3, "cudagraph_capture_sizes": [1, 2, 4]}'
    assert args[args.index("--speculative-config") + 1] == '{"method": "mtp", "num_speculative_tokens": 3}'
    assert args[args.index("--additional-config") + 1] == '{"online_quant_config": {"global_quant_config": "x"}}'
    assert "--trust-remote-code" in args and "extra" in args
    text = " ".join(notes)
    assert "--port 8006 is its engine's internal port" in text and "AF_PIECEWISE" in text
    assert "--enable-dp-attention; --torch-profiler-dir /t" in text


def test_init_from_command_reads_a_manifest_through_the_cli(tmp_path):
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(K8S)
    out = tmp_path / "r.toml"
    result = run_cli("init", "--from-command", str(manifest), "--name", "k8s", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert run_cli("validate", str(out)).returncode == 0
    assert run_cli("render", str(out), "-o", str(tmp_path / "bundle")).returncode == 0
    assert "PYTHONHASHSEED=0" in (tmp_path / "bundle" / "stack.env").read_text()


# -- no self-contradiction -------------------------------------------------------------------------------------------

OWN_KEY_RULES = {"secret-in-recipe", "cache-extra-shadows-key", "extra-args-shadow-flag", "host-path-unsafe"}


@pytest.mark.parametrize("script", [
    f"PYTHONHASHSEED=0 vllm serve /m --kv-transfer-config {LMCACHE}\n",
    "vllm serve ../m --gpu-memory-utilization 1.5 --kv-cache-dtype fp8_ds_mla --max-model-len auto\n",
    "vllm serve ./m --enable-prefix-caching=false --trust-remote-code=True --tool-call-parser hermes --port\n",
])
@pytest.mark.parametrize("lmcache_yaml", [
    None, "chunk_size: 0\n", "chunk_size: abc\n", "remote_url: s3://\n", "remote_url: fs://\n",
    "remote_storage_plugins: [fs]\n", "local_disk: file:///etc\nmax_local_disk_size: 5\n",
    "extra_config: {s3_region: us, remote_storage_plugin.fs.base_path: /x}\n", "local_disk: /nvme\nmax_local_disk_size: 0\n",
    "local_disk: /nvme\nmax_local_disk_size: $SIZE\n", "local_cpu: false\nmax_local_cpu_size: 2\n",
])
def test_init_never_writes_a_recipe_its_own_key_rules_refuse(script, lmcache_yaml):
    recipe, text = imported(script, lmcache_yaml)
    assert not {f.rule_id for f in run_rules(recipe)} & OWN_KEY_RULES, text


def test_what_the_own_key_rules_would_refuse_is_named_in_a_note():
    recipe, text = imported(f"PYTHONHASHSEED=0 vllm serve ./m --gpu-memory-utilization 1.5 --kv-transfer-config {LMCACHE}\n",
                            "chunk_size: 0\nremote_url: fs://\nextra_config: {s3_region: eu}\n")
    notes = flat(text)
    assert recipe.model.path == "$PWD/m" and "--gpu-memory-utilization 1.5: not a value" in notes
    assert "extra_config.s3_region" in notes and "chunk_size" in notes
    assert recipe.cache.tiers and all(t.path != "/" for t in recipe.cache.tiers)
