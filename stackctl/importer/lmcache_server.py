"""Where a launch starts LMCache's own server (LMCache's multiprocess mode, cache.offload = "lmcache-mp"): the
command, and the container it runs in when that is not vLLM's.

The forms, from LMCache 0.5.6's own docs and examples:
- `lmcache server FLAGS` (the console script; docs/source/cli/server.rst), also as `python -m lmcache.cli.main
  server`, or by path (`/opt/venv/bin/lmcache server`, docs/source/mp/deployment.rst:18-23);
- `python -m lmcache.v1.multiprocess.server FLAGS`: the same server without its HTTP frontend, reading the same
  flags (lmcache/v1/multiprocess/server.py:535-549 parses them with the `lmcache server` config parsers);
  examples/multi_process/lmcache-daemonset.yaml runs it as a DaemonSet;
- in a container of its own: `docker run ... lmcache/standalone IMAGE lmcache server ...` beside vLLM's container
  (deployment.rst:18-36), a second container of vLLM's pod (a sidecar), or a DaemonSet on the node.
stackctl runs the server in the stack's own container, beside vLLM, from the stack's image: the other container's
image and options are named in a note, never copied.

Older releases named the L1 size `--cpu-buffer-size` (GB; LMCache 0.3.11 docs/source/kv_cache/multiprocess_mode.rst:
"start the LMCache server with a 100 GB CPU buffer: --cpu-buffer-size 100"); 0.5.6 has only --l1-size-gb
(lmcache/v1/distributed/config.py:805), which the older name is read as, with a note.
"""

from __future__ import annotations

import posixpath

from stackctl.importer.container import DockerRun, read_docker_run

# Modules that run the server: (module, the word after it that names the server command, or None).
_MODULES = {"lmcache.cli.main": "server", "lmcache.v1.multiprocess.server": None}
# Flags of older releases -> the flag 0.5.6 reads for the same setting.
RENAMED_FLAGS = {"--cpu-buffer-size": "--l1-size-gb"}
_NO_HTTP_MODULE = "lmcache.v1.multiprocess.server"


def server_args_at(argv: list[str]) -> int | None:
    """Where the server's flags start in a command, when it starts LMCache's own server."""
    for i, word in enumerate(argv):
        if posixpath.basename(word) == "lmcache" and argv[i + 1:i + 2] == ["server"]:
            return i + 2
        if word == "-m" and i + 1 < len(argv) and argv[i + 1] in _MODULES:
            after = _MODULES[argv[i + 1]]
            if after is None:
                return i + 2
            if argv[i + 2:i + 3] == [after]:
                return i + 3
    return None


def form_notes(argv: list[str], start: int) -> list[str]:
    """Notes on how the command starts the server, when it differs from the `lmcache server` stackctl writes."""
    if _NO_HTTP_MODULE in argv[:start]:
        return [f"the LMCache server is started as `python -m {_NO_HTTP_MODULE}` (no HTTP frontend); stackctl "
                "starts `lmcache server`, the same server and flags with its HTTP frontend (doctor reads its /status)"]
    return []


def container_note(prefix: list[str], where: str = "") -> str | None:
    """A note for the container the server runs in, when the command is `docker run ... IMAGE` (or podman) before
    the server's own words: its image and options are not carried over."""
    for i, word in enumerate(prefix):
        if posixpath.basename(word) in ("docker", "podman") and prefix[i + 1:i + 2] == ["run"]:
            run = read_docker_run(prefix[i + 2:], {}, None)
            return None if run is None else run_note(run, where or "a container of its own")
    return None


def run_note(run: DockerRun, where: str) -> str:
    """What the LMCache server's own container had that stackctl does not copy."""
    parts = [run.image]
    if run.decided:
        parts.append("options " + ", ".join(run.decided))
    environment = sorted(run.env) + run.passthrough
    if environment:
        parts.append("environment " + ", ".join(environment))
    if run.volumes:
        parts.append("mounts " + ", ".join(f"{host}:{path}" for host, path in run.volumes))
    return (f"the LMCache server runs in {where} ({'; '.join(parts)}): stackctl starts it in the stack's container, "
            "beside vLLM, from the stack's image; its container settings are not copied")
