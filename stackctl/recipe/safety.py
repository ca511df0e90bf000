"""What no bundle may hold, whatever rules were skipped or ignored: a host path that is unsafe to mount, and a value
only a shell at launch time would have expanded. The rules `host-path-unsafe` and `unresolved-value`
(rules/guard_rules.py) report them at their line; render (bundle/render.py) refuses them outright.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)

if TYPE_CHECKING:  # annotations only
    from collections.abc import Iterator

    from stackctl.recipe.model import Recipe

# Directories of the host's own system: a tier that writes there (or a mount of them) damages the host or exposes it.
SYSTEM_DIRS = ("/etc", "/proc", "/sys", "/dev", "/boot", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
               "/libx32", "/var/lib/docker", "/var/lib/containerd", "/var/run", "/run", "/var/log")
_PSEUDO_FS = ("/proc", "/sys", "/dev")  # never a place for files, not even to read


def host_path_problem(value: str, writable: bool) -> str | None:
    """Why `value` is not a safe host path, or None."""
    import posixpath

    if not value.startswith("/"):
        return "is not an absolute path (it would depend on the directory stackctl runs in)"
    if ".." in value.split("/"):
        return "climbs with `..` (write the directory it means)"
    if ":" in value:
        return "holds a `:`, which breaks Docker's HOST:CONTAINER:MODE mount syntax"
    normal = posixpath.normpath(value)
    if normal in ("/", "//"):
        return "is the root directory"
    inside = next((d for d in SYSTEM_DIRS if normal == d or normal.startswith(d + "/")), None)
    if inside and (writable or normal == inside or inside in _PSEUDO_FS):
        what = "is" if normal == inside else f"is inside {inside},"
        return f"{what} a system directory of the host"
    return None


def unresolved_values(recipe: Recipe) -> Iterator[tuple[tuple, str]]:
    """(key path, message) for every value that holds a run-time reference (importer/runtime.py's definition)."""
    from stackctl.unresolved import runtime_reference

    values: list[tuple[tuple, object]] = [(("model", key), getattr(recipe.model, key))
                                          for key in ("path", "served_name", "tool_call_parser", "reasoning_parser")]
    values.append((("stack", "base_image"), recipe.stack.base_image))
    values += [(("serve", "env", key), value) for key, value in recipe.serve.env.items()]
    values += [(("serve", "extra_args", index), value) for index, value in enumerate(recipe.serve.extra_args)]
    for index, tier in enumerate(recipe.cache.tiers):
        values += [(("cache", "tiers", index, key), getattr(tier, key)) for key in ("path", "url")]
    values += _strings_in(("cache", "extra"), recipe.cache.extra)
    values += _strings_in(("serve", "compilation_config"), recipe.serve.compilation_config)
    for path, value in values:
        reference = runtime_reference(value)
        if reference:
            yield (path, f"{value!r} holds {reference}, which only a shell at launch time would expand: stackctl "
                         "passes values as written, so the server would receive this text")


def _strings_in(path: tuple, value) -> list[tuple[tuple, object]]:
    """(key path, string) for every string nested in a table or array."""
    if isinstance(value, dict):
        return [item for key, inner in value.items() for item in _strings_in(path + (key,), inner)]
    if isinstance(value, list):
        return [item for index, inner in enumerate(value) for item in _strings_in(path + (index,), inner)]
    return [(path, value)]
