"""ATOM's own OpenAI server (`python -m atom.entrypoints.openai_server ...`) as `vllm serve` with the ATOM plugin,
which is how stackctl runs ATOM (stack.engine = "atom-vllm").

The flags are ATOM's (ROCm/ATOM atom/model_engine/arg_utils.py EngineArgs.add_cli_args and
atom/entrypoints/openai/api_server.py; every long flag also in its snake_case spelling). Most are vLLM's own flags
under the same name; the others are translated where vLLM has the same setting, else dropped with a note:
- `--server-port` is the HTTP port (vLLM's `--port`); ATOM's `--port` is its engine's internal port;
- `--kv_cache_dtype bf16` is vLLM's `bfloat16`;
- `--level`, `--cudagraph-mode`, `--cudagraph-capture-sizes` are compilation_config keys in vLLM (mode,
  cudagraph_mode, cudagraph_capture_sizes);
- `--online_quant_config JSON` goes through `--additional-config '{"online_quant_config": JSON}'` in plugin mode
  (ATOM docs/vllm_plugin_backend_guide.md, "Online quantization");
- `--method` / `--num-speculative-tokens` / `--draft-model` are vLLM's `--speculative-config` keys.
"""

from __future__ import annotations

import json

# ATOM flags vLLM has under the same name (vLLM 0.27.1 vllm/engine/arg_utils.py; ATOM's image pins 0.27.1).
SAME_FLAGS = {
    "--model", "--served-model-name", "--trust-remote-code", "--tensor-parallel-size", "-tp",
    "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp", "--decode-context-parallel-size", "-dcp",
    "--prefill-context-parallel-size", "-pcp", "--enforce-eager", "--enable-prefix-caching",
    "--no-enable-prefix-caching", "--kv-cache-dtype", "--block-size", "--max-model-len", "--enable-expert-parallel",
    "--max-num-batched-tokens", "--max-num-seqs", "--gpu-memory-utilization", "--kv-transfer-config",
    "--hf-overrides", "--host", "--enable-chunked-prefill", "--long-prefill-token-threshold", "--all2all-backend",
    "--enable-eplb", "--eplb-config", "--chat-template", "--enable-auto-tool-choice", "--tool-call-parser",
    "--reasoning-parser",
}
_BOOLEAN = {"--trust-remote-code", "--enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching",
            "--enable-expert-parallel", "--enable-chunked-prefill", "--enable-eplb", "--enable-auto-tool-choice",
            "--enable-dp-attention", "--dp-load-balance", "--enable-tbo", "--fake-eplb", "--mark-trace",
            "--enable-rapidserve", "--disagg-constrained", "--disable-uvicorn-access-log", "--eplb-enable"}
_COMPILATION = {"--level": "mode", "--cudagraph-mode": "cudagraph_mode",
                "--cudagraph-capture-sizes": "cudagraph_capture_sizes"}
_SPECULATIVE = {"--method": "method", "--num-speculative-tokens": "num_speculative_tokens",
                "--draft-model": "model"}


def to_vllm(args: list[str]) -> tuple[list[str], list[str]]:
    """(vLLM arguments, notes) for ATOM server arguments."""
    out: list[str] = []
    notes: list[str] = []
    compilation: dict = {}
    speculative: dict = {}
    dropped: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        name, eq, inline = token.partition("=")
        flag = ("--" + name[2:].replace("_", "-")) if name.startswith("--") else name
        takes_value = flag not in _BOOLEAN and not eq and i + 1 < len(args) and not args[i + 1].startswith("--")
        value = inline if eq else (args[i + 1] if takes_value else None)
        step = 2 if takes_value else 1
        written = args[i:i + step]
        if not token.startswith("-"):
            out.append(token)
        elif flag == "--server-port" and value is not None:
            out += ["--port", value]
            notes.append(f"ATOM's --server-port {value} is vLLM's --port")
        elif flag == "--port":
            notes.append(f"ATOM's {' '.join(written)} is its engine's internal port, not the HTTP port: dropped")
        elif flag == "--kv-cache-dtype" and value is not None:
            out += ["--kv-cache-dtype", {"bf16": "bfloat16"}.get(value, value)]
            if value == "bf16":
                notes.append("ATOM's --kv_cache_dtype bf16 is vLLM's bfloat16")
        elif flag in _COMPILATION and value is not None:
            compilation[_COMPILATION[flag]] = _json_or(value)
            notes.append(f"ATOM's {flag} {value} is compilation_config.{_COMPILATION[flag]} in vLLM")
        elif flag in _SPECULATIVE and value is not None:
            speculative[_SPECULATIVE[flag]] = _json_or(value)
            notes.append(f"ATOM's {flag} {value} is speculative_config.{_SPECULATIVE[flag]} in vLLM")
        elif flag == "--online-quant-config" and value is not None:
            out += ["--additional-config", json.dumps({"online_quant_config": _json_or(value)})]
            notes.append("ATOM's --online_quant_config goes through vLLM's --additional-config in plugin mode")
        elif flag in SAME_FLAGS:
            out += [flag] + ([value] if value is not None else [])
        else:
            dropped.append(" ".join(written))
        i += step
    if compilation.get("cudagraph_mode") == "AF_PIECEWISE":
        notes.append("ATOM's --cudagraph-mode AF_PIECEWISE has no vLLM equivalent: dropped")
        del compilation["cudagraph_mode"]
    if compilation:
        out += ["--compilation-config", json.dumps(compilation)]
    if speculative:
        out += ["--speculative-config", json.dumps(speculative)]
    if dropped:
        notes.append(f"ATOM server flags vLLM has no equivalent for, not carried over: {'; '.join(dropped)}")
    notes.append("ATOM's own server (atom.entrypoints.openai_server) becomes `vllm serve` with the ATOM plugin: "
                 "its flags were translated to vLLM's")
    return out, notes


def _json_or(value: str):
    try:
        return json.loads(value)
    except ValueError:
        return value
