"""Serving engines (`stack.engine`) as records: what each engine is and what the bundle, rules, doctor and importer
treat differently for it, said once.

Callers ask the record (`serving_engine_of(recipe).atom_plugin`) instead of comparing the name; a new engine is one
record here (see docs/ARCHITECTURE.md, "Adding a tier kind or a platform", its serving-engine list). Plain data: no
imports above the base layer (the recipe model imports this for the schema's allowed values).
"""

from __future__ import annotations

from stackctl.knowledge.kinds import _lookup, _Record

# ATOM registers neither its platform nor its models when this is "1" (any case); see rule atom-plugin-disabled.
ATOM_DISABLE_ENV = "ATOM_DISABLE_VLLM_PLUGIN"


class ServingEngine(_Record):
    """One serving engine: the program a stack's server runs the model with."""

    _fields = ("name", "summary", "atom_plugin", "needs_cuda_graphs", "gpu_env", "image_prefix")
    _defaults = {"atom_plugin": False, "needs_cuda_graphs": False, "gpu_env": {}, "image_prefix": ""}

    name: str
    summary: str  # what it is, for the recipe reference (stack.engine's help)
    # It runs AMD's ATOM vLLM platform plugin: doctor proves the plugin is registered (image.atom-plugin) and active
    # (server.atom-activated); the rules atom-vllm-pin and atom-plugin-disabled apply; the bundle never renders
    # ATOM_DISABLE_VLLM_PLUGIN for it; the importer notes ATOM's development-fork switch.
    atom_plugin: bool
    # Graph capture is what keeps its throughput: cudagraph_mode NONE (or enforce_eager) is an error in the rule
    # atom-cuda-graphs, and in doctor's server.engine-config on a platform whose vLLM captures graphs.
    needs_cuda_graphs: bool
    # Variables the bundle sets for it on a platform with GPUs (a serve.env value wins); the importer drops a launch's
    # variable of the same value as one stackctl sets itself.
    gpu_env: dict
    # The image repository its own images come from ("": any image): the importer keeps a launch's image only when
    # it is one of those that serves through vLLM, else leaves stack.base_image to stackctl's default.
    image_prefix: str


SERVING_ENGINE_RECORDS: tuple[ServingEngine, ...] = (
    # Plain vLLM on ROCm runs in images that may carry ATOM: switching the plugin off keeps it plain.
    ServingEngine(name="vllm", summary="plain vLLM", gpu_env={ATOM_DISABLE_ENV: "1"}),
    ServingEngine(name="atom-vllm", summary="vLLM with AMD's ATOM platform plugin", atom_plugin=True,
                  needs_cuda_graphs=True, image_prefix="rocm/atom"),
)
SERVING_ENGINES_BY_NAME = {engine.name: engine for engine in SERVING_ENGINE_RECORDS}
SERVING_ENGINES: tuple[str, ...] = tuple(SERVING_ENGINES_BY_NAME)


# Servers stackctl does not run: (engine, the commands that start it, as launches write them). A launch of one is
# refused by name (the importer), not searched for a vLLM server it does not have.
OTHER_ENGINES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SGLang", ("sglang.launch_server", "sglang serve")),
    ("Text Generation Inference", ("text-generation-launcher",)),
    ("TensorRT-LLM", ("trtllm-serve",)),
    ("llama.cpp", ("llama-server",)),
    ("Ollama", ("ollama serve",)),
    ("LMDeploy", ("lmdeploy serve",)),
)


def serving_engine(name: str) -> ServingEngine:
    """The record of a serving engine; an unknown name is an error naming the known ones."""
    return _lookup(SERVING_ENGINES_BY_NAME, "serving engine", name)


def serving_engine_of(recipe) -> ServingEngine:
    """The record of a recipe's serving engine (stack.engine)."""
    return serving_engine(recipe.stack.engine)


def engine_help() -> str:
    """stack.engine's documentation, from the records' summaries."""
    return "Serving engine: " + ", or ".join(engine.summary for engine in SERVING_ENGINE_RECORDS) + "."


def disables_atom_plugin(env: dict) -> bool:
    """Whether an environment switches ATOM's vLLM plugin off (ATOM reads "1", any case, as true)."""
    return str(env.get(ATOM_DISABLE_ENV, "0")).strip().lower() == "1"
