"""What doctor checks read, gathered once and lazily: host facts, the image probe, the live server.

Image facts come from ONE container run of the stack's image: the image probe plus two fresh processes that hash
the same tokens with the image's own vLLM hashing code (all three in parallel). Anything that cannot be gathered raises Unavailable,
which makes the checks that need it skip with the reason.
"""

from __future__ import annotations

import json

from stackctl import layout
from stackctl.bundle import render as renderer
from stackctl.doctor.registry import Unavailable

PROBE = f"{layout.PROBES_DIR}/probe_image.py"
MARK = "----stackctl-probe-boundary----"


class DoctorContext:
    def __init__(self, spec, deep: bool = False, say=None, use_cache: bool = True, host_root=None,
                 files: dict[str, bytes] | None = None):
        """spec: the stack's StackSpec (bundle/stackspec.py), derived once by the caller; checks read what it
        derived there and the recipe's own keys as `recipe`. files: the bundle as the caller rendered it already
        (`up --gate`), so it is not rendered again."""
        self.spec = spec
        self.recipe = spec.recipe
        self.host_root = host_root  # a captured host tree to judge instead of this machine (doctor --host-root)
        self.deep = deep
        self.use_cache = use_cache
        self.say = say or (lambda message: None)
        self.engine_error = ""
        self._cache: dict = {} if files is None else {"files": files}

    # -- host -----------------------------------------------------------------------------------------------

    @property
    def host(self):
        if "host" not in self._cache:
            from stackctl.host import discover

            from pathlib import Path

            self._cache["host"] = discover(Path(self.host_root or "/"))
        return self._cache["host"]

    def use_host(self, facts) -> None:
        """Judge these host facts (already discovered by the caller) instead of discovering them again."""
        self._cache["host"] = facts

    def engine_or_none(self):
        if "engine" not in self._cache:
            from stackctl.engine import docker_adapter
            from stackctl.errors import StackctlError

            try:
                self._cache["engine"] = docker_adapter.reader()
            except StackctlError as exc:
                self.engine_error = str(exc)
                self._cache["engine"] = None
        return self._cache["engine"]

    def engine(self):
        engine = self.engine_or_none()
        if engine is None:
            raise Unavailable(f"no Docker engine: {self.engine_error}")
        return engine

    # -- image ----------------------------------------------------------------------------------------------

    def bundle_files(self) -> dict[str, bytes]:
        """The stack's bundle as render writes it, rendered once per doctor run (the image tag and the parsers'
        lmcache.yaml both come from it)."""
        if "files" not in self._cache:
            self._cache["files"] = renderer.render_files(self.spec, guard=False)
        return self._cache["files"]

    @property
    def image_tag(self) -> str:
        if "tag" not in self._cache:
            self._cache["tag"] = renderer.image_tag(self.spec, self.bundle_files())
        return self._cache["tag"]

    def hash_algo(self) -> str:
        """The hash that keys the cache the stack shares across processes: LMCache's (Python's builtin hash, its
        default pre_caching_hash_algorithm) when LMCache is on, else vLLM's prefix-caching hash."""
        if self.spec.lmcache_in_server:
            return str(self.recipe.cache.extra.get("pre_caching_hash_algorithm", "builtin"))
        return self.recipe.serve.prefix_caching_hash_algo or "sha256"

    def image(self):
        """The stack's image as the engine has it (its id keys what doctor keeps about it)."""
        if "image_object" not in self._cache:
            from stackctl.engine import docker_adapter

            image = docker_adapter.find_image(self.engine(), self.image_tag)
            if image is None:
                raise Unavailable(f"image {self.image_tag} not built (run `stackctl build {self.recipe.source}`)")
            self._cache["image_object"] = image
        return self._cache["image_object"]

    def kept(self, folder: str, key_parts: list, compute) -> dict:
        """compute()'s result for the stack's image, kept in the state dir under `folder` for these inputs (the
        image id is part of every key); --fresh computes it again."""
        from stackctl.doctor.image_cache import cache_file, cached

        path = cache_file(self.recipe.stack.name, folder, [self.image().id] + key_parts)
        return cached(path, compute, self.use_cache)

    def image_facts(self) -> dict:
        """{"probe": {...}, "hash_runs": [{...}, {...}]} from one run of the stack's image, kept per image,
        environment and hash algorithm."""
        if "image" not in self._cache:
            algo = self.hash_algo()
            environment = dict(self.spec.environment)
            self._cache["image"] = self.kept("image-facts", [environment, algo],
                                             lambda: self._gather_facts(environment, algo))
        return self._cache["image"]

    def _gather_facts(self, environment: dict, algo: str) -> dict:
        # Three fresh interpreters at once: the probe, and two hash probes (each its own str-hash secret and
        # random bytes, as two server processes have; a fork would share them).
        hash_probe = f"python {PROBE} --hash-probe --hash-algo {algo}"
        script = (f"python {PROBE} > /tmp/probe.json 2>/dev/null & "
                  f"{hash_probe} > /tmp/h1.json 2>/dev/null & {hash_probe} > /tmp/h2.json 2>/dev/null; wait; "
                  f"cat /tmp/probe.json; echo {MARK}; cat /tmp/h1.json; echo {MARK}; cat /tmp/h2.json")
        from stackctl.engine import docker_adapter

        output = docker_adapter.output_of(self.engine(), self.image_tag, ["-c", script], entrypoint="/bin/bash",
                                          network_mode="host", environment=environment)
        parts = output.split(MARK)
        try:
            return {"probe": json.loads(parts[0]), "hash_runs": [json.loads(p) for p in parts[1:3]]}
        except (ValueError, IndexError) as exc:
            raise Unavailable(f"image probe output unreadable: {exc}: {output[:300]!r}") from None

    def probe(self) -> dict:
        return self.image_facts()["probe"]

    # -- server ---------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        from stackctl.httpclient import client_host

        # The address the server listens on; a wildcard bind (0.0.0.0) answers on loopback.
        return f"http://{client_host(self.recipe.serve.host)}:{self.recipe.serve.port}"

    def container(self):
        if "container" not in self._cache:
            from stackctl.engine import docker_adapter

            container = docker_adapter.find_container(self.engine(), self.spec.container_name)
            if container is None or container.status != "running":
                raise Unavailable(f"stack not running (run `stackctl up {self.recipe.source}`)")
            self._cache["container"] = container
        return self._cache["container"]

    def server_started(self) -> float | None:
        """When the stack's running container started (seconds since the epoch); None when it does not run here."""
        from stackctl.engine import docker_adapter

        try:
            return docker_adapter.container_state(self.container()).started_epoch
        except Unavailable:
            return None

    def server_log(self) -> str:
        """The server's log since the container started, ANSI colour codes removed."""
        if "log" not in self._cache:
            import re

            from stackctl.engine import docker_adapter

            text = docker_adapter.logs_text(self.container())
            self._cache["log"] = re.sub(r"\x1b\[[0-9;]*m", "", text)
        return self._cache["log"]

    def fresh_log(self) -> str:
        """The server's log as it is now (not cached: checks that send requests read what those added)."""
        self._cache.pop("log", None)
        return self.server_log()

    @staticmethod
    def log_mark() -> float:
        """Now, as a point in the server's log: log_since(mark) is what the server wrote after it."""
        import time

        return time.time()

    def log_since(self, mark: float) -> str:
        """The server's log written since `mark` (log_mark()), colour codes removed. The engine filters by the
        lines' own timestamps, so a request's lines are read without the whole log of a long-running server."""
        import re

        from stackctl.engine import docker_adapter

        return re.sub(r"\x1b\[[0-9;]*m", "", docker_adapter.logs_text(self.container(), since=mark))

    def healthy(self) -> bool:
        from stackctl.httpclient import get_status

        self.container()
        return get_status(f"{self.base_url}/health", timeout=5.0) == 200

    def require_healthy(self) -> None:
        if not self.healthy():
            raise Unavailable(f"server at {self.base_url} is not healthy")
        self._cache["healthy"] = True

    def metrics(self) -> str:
        """The server's /metrics, once /health has said 200 in this doctor run (asked here the first time)."""
        from stackctl.httpclient import get_text

        if not self._cache.get("healthy"):
            self.require_healthy()
        try:
            return get_text(f"{self.base_url}/metrics")
        except OSError as exc:  # it answered /health a moment ago: a server that went away since
            raise Unavailable(f"server at {self.base_url} stopped answering /metrics: {exc}") from None

    def remember(self, key: str, compute):
        """Cache a computed value for checks that share it (e.g. the hit test result)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]
