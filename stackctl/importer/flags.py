"""vLLM server flags -> recipe keys: the inverse of stackspec.serve_args, with vLLM's reading of a flag and its value
(flag spelling, human-readable integers, JSON and dotted config forms). Flags without a recipe field go to
serve.extra_args verbatim; secrets on the command line are never copied."""

from __future__ import annotations

import json
import posixpath
import re

from stackctl.bundle import keys
from stackctl.errors import StackctlError
from stackctl.importer.draft import CONTROL, Draft, drop_nulls, fits
from stackctl.importer.flag_values import (
    INVALID,
    convert,
    flag_name,
    has_control,
    merge_dict_flags,
    one_line,
)
from stackctl.importer.launch import Launch
from stackctl.importer.offload_config import beyond_engine
from stackctl.knowledge.kinds import engine_selected_by, engine_with_connector
from stackctl.recipe import model
from stackctl.unresolved import home_reference, runtime_reference

# flag -> (section, key, converter): the inverse of stackspec.serve_args.
VALUE_FLAGS = {
    "--host": ("serve", "host", str),
    "--port": ("serve", "port", int),
    "--tensor-parallel-size": ("model", "tensor_parallel", int),
    "-tp": ("model", "tensor_parallel", int),
    "--dtype": ("model", "dtype", str),
    "--kv-cache-dtype": ("model", "kv_cache_dtype", str),
    "--max-model-len": ("model", "max_model_len", "human_int"),
    "--gpu-memory-utilization": ("serve", "gpu_memory_utilization", float),
    "--max-num-batched-tokens": ("serve", "max_num_batched_tokens", "human_int"),
    "--max-num-seqs": ("serve", "max_num_seqs", int),
    "--block-size": ("serve", "block_size", int),
    "--prefix-caching-hash-algo": ("serve", "prefix_caching_hash_algo", str),
    "--reasoning-parser": ("model", "reasoning_parser", str),
}
BOOL_FLAGS = {
    "--trust-remote-code": ("model", "trust_remote_code"),
    "--enable-prefix-caching": ("serve", "prefix_caching"),
    "--async-scheduling": ("serve", "async_scheduling"),
    "--enforce-eager": ("serve", "enforce_eager"),
}
OFFLOADING_FLAGS = ("--kv-offloading-backend", "--kv-offloading-size")
_SECRET_FLAG = re.compile(r"^--([a-z0-9]+-)*(api-key|token|secret|password|credentials?|access-key)$")
_SECRET_FLAG_ENV = {"--api-key": "VLLM_API_KEY", "--hf-token": "HF_TOKEN"}


class ServerFlags:
    """Reads the server's argv into the draft: known flags to recipe keys, the rest verbatim to extra_args."""

    def __init__(self, draft: Draft, launch: Launch):
        self.draft, self.launch, self.args = draft, launch, launch.args
        self.extra: list[str] = []
        self.compilation: list[tuple[list[str], str, object]] = []  # (tokens, dotted key or "", value)
        self.kv_transfer: list[tuple[list[str], str, object]] = []
        self.tool_choice: list[str] = []
        self.tool_parser: tuple[list[str], str] | None = None
        self.lmcache_overrides: dict = {}
        self.model_arg = ""
        # An offload engine other than LMCache in the server (importer/offload.py maps them): the
        # --kv-offloading-* flags as (tokens, value), and a --kv-transfer-config naming its connector.
        self.offloading: dict[str, tuple[list[str], str | None]] = {}
        self.offload_transfer: tuple[dict, list[str]] | None = None

    def read(self) -> None:
        args, i = self.args, 0
        if self.launch.kind == "vllm serve" and args and not args[0].startswith("-"):
            self.set_model(args[0], "")
            i = 1
        while i < len(args):
            i = self.read_one(i)
        self.finish()

    def value_at(self, i: int) -> tuple[str | None, int]:
        """The value of the flag at i (`--flag=value` or the next token) and the index after it."""
        token = self.args[i]
        if token.startswith("-") and "=" in token:
            return token.split("=", 1)[1], i + 1
        if i + 1 < len(self.args) and not self.args[i + 1].startswith("--"):
            return self.args[i + 1], i + 2
        return None, i + 1

    def read_one(self, i: int) -> int:
        token = self.args[i]
        name = flag_name(token)
        if not token.startswith("-"):
            self.extra.append(token)
            return i + 1
        full = abbreviated_flag(name)
        if full:
            self.draft.notes.append(f"{name} is argparse's abbreviation of {full} (vLLM accepts a unique prefix): read "
                                    f"as {full}")
            token = self.args[i] = full + token[len(token.split("=", 1)[0]):]
            name = full
        if name == "--model":
            value, after = self.value_at(i)
            if value is not None:
                self.set_model(value, "from --model")
            return after
        if name in VALUE_FLAGS:
            return self.read_value_flag(i, name)
        bare = name[5:] if name.startswith("--no-") else name[2:]
        if "--" + bare in BOOL_FLAGS:
            section, key = BOOL_FLAGS["--" + bare]
            if "=" in token:  # argparse refuses a value on a BooleanOptionalAction flag ("ignored explicit argument")
                self.draft.notes.append(f"{token}: vLLM takes no value after {name} (its parser stops); not imported: "
                                        f"set {section}.{key} yourself")
            else:
                self.draft.section(section).set(key, not name.startswith("--no-"))
            return i + 1
        if name == "--served-model-name":
            return self.read_served_names(i)
        if name in ("--compilation-config", "-cc") or name.startswith(("--compilation-config.", "-cc.")):
            return self.read_dict_flag(i, name, self.compilation)
        if name == "-O" or name.startswith("-O.") or token.startswith("-O") or name == "--optimization-level":
            return self.read_optimization(i, token)
        if name == "--kv-transfer-config" or name.startswith("--kv-transfer-config."):
            return self.read_dict_flag(i, name, self.kv_transfer)
        if name in OFFLOADING_FLAGS:
            value, after = self.value_at(i)
            self.offloading[name] = (self.args[i:after], value)
            return after
        if name == "--enable-auto-tool-choice":
            self.tool_choice = [token]
            return i + 1
        if name == "--tool-call-parser":
            value, after = self.value_at(i)
            if value is not None:
                self.tool_parser = (self.args[i:after], value)
            return after
        if _SECRET_FLAG.match(name):
            return self.read_secret_flag(i, name)
        self.extra.append(token)
        return i + 1

    def set_model(self, path: str, why: str) -> None:
        if CONTROL.search(path) or not path:
            raise StackctlError(f"model {path!r}: not a usable model path (fix: a directory or a Hugging Face id)")
        self.model_arg = path
        inside = path
        if self.launch.workdir and not path.startswith(("/", "$", "~", "<")) and \
                self.launch.host_path(posixpath.join(self.launch.workdir, path))[1]:
            inside = posixpath.join(self.launch.workdir, path)  # relative to the container's working directory
        host_path, mapped = self.launch.host_path(inside)
        host_path = home_reference(host_path)
        if host_path == "." or host_path.startswith(("./", "../")) or host_path == "..":
            host_path = "$PWD/" + host_path.removeprefix("./")  # relative to where the old launch ran
        self.draft.model.set("path", host_path, why or None)
        if mapped:
            self.draft.model.comment("path", f"host path of the container's {inside} (docker volume): stackctl "
                                             "mounts it at the same path")
        reference = runtime_reference(host_path)
        if reference:
            self.draft.model.comment("path", f"TODO: {reference} was known only when the old launch ran: write the "
                                             "model's directory or Hugging Face id here (until then `stackctl "
                                             "validate` reports unresolved-value and nothing renders)")

    def run_time_only(self, tokens: list[str], setting: str) -> bool:
        """Whether tokens hold a value only the old launch's run time knew; if so the setting is left to the user,
        with a note naming it."""
        reference = next((ref for ref in map(runtime_reference, tokens) if ref), None)
        if reference:
            self.draft.notes.append(f"{' '.join(tokens)}: {reference} was known only when the old launch ran; not "
                                    f"imported: {setting}")
        return reference is not None

    def read_value_flag(self, i: int, name: str) -> int:
        section, key, converter = VALUE_FLAGS[name]
        value, after = self.value_at(i)
        tokens = self.args[i:after]
        if self.run_time_only(tokens, f"set {section}.{key} yourself"):
            return after
        converted = convert(value, converter) if value is not None else None
        cls = model.SECTION_TYPES[section]
        if converted is None or not fits(cls, key, converted):
            # serve.extra_args would repeat a flag stackctl writes from the key (extra-args-shadow-flag): named here
            self.draft.notes.append(f"{' '.join(tokens)}: not a value {section}.{key} can hold; not imported: set "
                                    f"{section}.{key} yourself (vLLM would have to accept it too)")
            return after
        self.draft.section(section).set(key, converted)
        return after

    def read_served_names(self, i: int) -> int:
        token = self.args[i]
        names = [token.split("=", 1)[1]] if "=" in token else []
        after = i + 1
        if not names:
            while after < len(self.args) and not self.args[after].startswith("-"):
                names.append(self.args[after])
                after += 1
        if self.run_time_only(self.args[i:after], "set model.served_name yourself"):
            return after
        if names and fits(model.Model, "served_name", names[0]):
            self.draft.model.set("served_name", names[0])
            if len(names) > 1:
                self.draft.notes.append(f"--served-model-name aliases {', '.join(names[1:])} dropped: a recipe "
                                        "serves one name")
        else:
            self.extra += self.args[i:after]
        return after

    def read_dict_flag(self, i: int, name: str, store: list) -> int:
        value, after = self.value_at(i)
        tokens = self.args[i:after]
        dotted = name.split(".", 1)[1] if "." in name else ""
        if value is None:
            self.extra += tokens
            return after
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value if dotted else INVALID
        store.append((tokens, dotted, parsed))
        return after

    def read_optimization(self, i: int, token: str) -> int:
        """-O3 / -O 3 / --optimization-level 3 is vLLM's optimization level (no recipe field: kept verbatim);
        -O '{json}' and -O.key=value are the older spelling of --compilation-config."""
        if token.startswith("-O.") or (token == "-O" and i + 1 < len(self.args)
                                       and self.args[i + 1].lstrip().startswith("{")):
            return self.read_dict_flag(i, "-cc" + token[2:].split("=", 1)[0], self.compilation)
        attached = (token.startswith("-O") and token != "-O") or "=" in token
        after = min(i + 1 if attached else i + 2, len(self.args))
        self.extra += self.args[i:after]
        self.draft.serve.comment("extra_args", "-O / --optimization-level is kept as given; it also sets the "
                                               "default cudagraph_mode (O2/O3: FULL_AND_PIECEWISE)")
        return after

    def read_secret_flag(self, i: int, name: str) -> int:
        value, after = self.value_at(i)
        if value is None or value.startswith("-"):
            self.extra.append(self.args[i])
            return i + 1
        variable = _SECRET_FLAG_ENV.get(name)
        if variable:
            self.draft.add_secret_env({variable: variable})
            self.draft.notes.append(f"{name} carried a secret on the command line; not copied: vLLM reads "
                                    f"{variable} instead (serve.secret_env)")
        else:
            self.draft.notes.append(f"{name} carried a secret on the command line; not copied: pass it through "
                                    "serve.secret_env")
        return after

    def finish(self) -> None:
        self.finish_compilation()
        self.finish_offloading()
        self.finish_kv_transfer()
        if self.tool_choice and self.tool_parser and fits(model.Model, "tool_call_parser", self.tool_parser[1]):
            self.draft.model.set("tool_call_parser", self.tool_parser[1])
        elif self.tool_choice or self.tool_parser:  # model.tool_call_parser writes both flags: one alone has no key
            self.draft.notes.append(f"{' '.join(self.tool_choice + (self.tool_parser[0] if self.tool_parser else []))}"
                                    ": model.tool_call_parser stands for --enable-auto-tool-choice with "
                                    "--tool-call-parser together; not imported")
        extra = []
        for token in self.without_run_time_values(self.extra):
            line = one_line(token)
            joined = re.sub(r"\s*\n\s*", " ", token) if line is None else line
            if line is None and not CONTROL.search(joined):
                # Kept, defects and all (a backslash before a line break inside single quotes stays in the value):
                # vLLM gets what the launch gave it, and validate says what vLLM will make of it.
                self.draft.notes.append(f"a multi-line argument that is not valid JSON was joined into one line and "
                                        f"kept as written: {joined[:60]}...")
                extra.append(joined)
            elif line is None:
                self.draft.notes.append("a multi-line argument that is not JSON was dropped: add it to "
                                        "serve.extra_args by hand")
            else:
                extra.append(line)
        if extra:
            self.draft.serve.set("extra_args", extra, "flags stackctl has no field for, kept as given")

    def without_run_time_values(self, tokens: list[str]) -> list[str]:
        """tokens without the flags (and their values) that hold a value only the old launch's run time knew."""
        groups: list[list[str]] = []
        for token in tokens:
            if token.startswith("-") or not groups:
                groups.append([token])
            else:
                groups[-1].append(token)
        return [token for group in groups
                if not self.run_time_only(group, "add it to serve.extra_args with its value") for token in group]

    def finish_compilation(self) -> None:
        config = merge_dict_flags(self.compilation)
        if config is None:
            for tokens, _, _ in self.compilation:
                self.extra += tokens
            return
        if not self.compilation:
            return
        if has_control(config):
            for tokens, _, _ in self.compilation:
                self.extra += tokens
            return
        mode = config.pop("cudagraph_mode", None)
        if isinstance(mode, str) and mode.upper() in model.CUDAGRAPH_MODES:
            self.draft.serve.set("cudagraph_mode", mode.upper())
        elif mode is not None:
            config["cudagraph_mode"] = mode
        dropped = drop_nulls(config)
        if dropped:
            self.draft.notes.append(f"--compilation-config keys set to null (vLLM's default) were dropped: "
                                    f"{', '.join(dropped)}")
        if config:
            self.draft.serve.set("compilation_config", config)

    def finish_offloading(self) -> None:
        """--kv-offloading-* flags stay verbatim when they select no engine of stackctl's, or LMCache's own server
        while the launch starts none (importer/offload.py maps the others)."""
        if "--kv-offloading-size" not in self.offloading:
            return
        backend = self.offloading.get("--kv-offloading-backend", ([], "native"))[1] or "native"
        engine = engine_selected_by(backend, self.launch.env)
        if engine is not None and not (engine.lmcache_server and self.launch.lmcache_server is None):
            return
        if engine is not None:
            self.draft.notes.append("--kv-offloading-backend lmcache reaches an LMCache server the launch does not "
                                    "start: kept in serve.extra_args (for stackctl to start one in the stack, set "
                                    f"cache.offload = \"{engine.name}\" with a cpu tier, its L1 size)")
        for tokens, _ in self.offloading.values():
            self.extra += tokens
        self.offloading = {}

    def finish_kv_transfer(self) -> None:
        from stackctl.knowledge.kv_transfer import ATOM_LMCACHE_CONNECTORS

        config = merge_dict_flags(self.kv_transfer)
        tokens = [t for entry in self.kv_transfer for t in entry[0]]
        if config is not None and config.get("kv_connector") in ATOM_LMCACHE_CONNECTORS:
            self.draft.notes.append(f"--kv-transfer-config names ATOM's own LMCache offload connector "
                                    f"{config['kv_connector']!r} (ATOM's server); under vLLM with the ATOM plugin "
                                    "the same LMCache tiers come through LMCacheConnectorV1, which stackctl writes")
            config = {**{k: v for k, v in config.items() if k not in ("kv_connector", "kv_role")},
                      **keys.KV_CONNECTOR}
            tokens = []
        if isinstance(config, dict) and config.get("kv_connector") == keys.MULTI_CONNECTOR:
            config = self._multi_connector(config)
            if config is None:
                self.extra += tokens
                return
        if isinstance(config, dict):
            engine = engine_with_connector(str(config.get("kv_connector")))
            if engine is not None and engine.lmcache_server and self.launch.lmcache_server is None:
                self.draft.notes.append(f"vLLM's {engine.connector} reaches an LMCache server the launch does not "
                                        "start: kept in serve.extra_args (for stackctl to start one in the stack, set "
                                        f"cache.offload = \"{engine.name}\" with a cpu tier, its L1 size)")
                self.extra += tokens
                return
            if engine is not None and not engine.lmcache_in_server:
                beyond = beyond_engine(engine.name, config)
                if beyond:
                    self.draft.notes.append(f"--kv-transfer-config with vLLM's {engine.connector} holds what "
                                            f"cache.offload = \"{engine.name}\" does not write ({'; '.join(beyond)}): "
                                            "kept verbatim in serve.extra_args")
                    self.extra += tokens
                    return
                self.offload_transfer = (config, tokens)
                return
        if config is None or config.get("kv_connector") != keys.KV_CONNECTOR["kv_connector"]:
            if config and "LMCache" in json.dumps(config):
                self.draft.notes.append("--kv-transfer-config names LMCache in a form stackctl does not manage; "
                                        "kept in serve.extra_args")
            self.extra += tokens
            return
        self.draft.cache.set("enabled", True, "--kv-transfer-config with LMCacheConnectorV1")
        rest = dict(config)
        rest.pop("kv_connector")
        extra_config = rest.pop("kv_connector_extra_config", None) or {}
        if isinstance(extra_config, dict):
            for key, value in extra_config.items():
                if key.startswith("lmcache."):
                    self.lmcache_overrides[key[len("lmcache."):]] = value
                elif key == "use_layerwise" and value is True:
                    self.draft.cache.set("use_layerwise", True, "use_layerwise in kv_connector_extra_config")
        if not keys.kv_transfer_says_only_recipe_keys(config):
            self.extra += tokens
            self.draft.notes.append("--kv-transfer-config has settings beyond stackctl's connector config; kept in "
                                    "serve.extra_args, where it overrides the one stackctl writes")


    def _multi_connector(self, config: dict) -> dict | None:
        """The LMCacheConnectorV1 entry of a MultiConnector, with cache.multi_connector set to the list (that entry
        standing for the connector stackctl writes), when the recipe can say all of it; else None, with a note (the
        MultiConnector stays verbatim in serve.extra_args)."""
        ours = keys.KV_CONNECTOR["kv_connector"]
        extra = config.get("kv_connector_extra_config")
        entries = extra.get("connectors") if isinstance(extra, dict) else None
        if not isinstance(extra, dict) or not isinstance(entries, list) \
                or not all(isinstance(entry, dict) for entry in entries):
            return self._multi_kept("its connectors list is missing or not a list of objects")
        own = [entry for entry in entries if entry.get("kv_connector") == ours]
        if not own:
            return self._multi_kept(f"no {ours} entry (stackctl's cache is not among its connectors)")
        if len(own) > 1:
            return self._multi_kept(f"{len(own)} {ours} entries (stackctl writes one)")
        if not keys.kv_transfer_says_only_recipe_keys(own[0]):
            return self._multi_kept(f"its {ours} entry has settings beyond stackctl's connector config")
        if set(extra) != {"connectors"} or set(config) - {"kv_connector", "kv_role", "kv_connector_extra_config"} \
                or config.get("kv_role", "kv_both") != "kv_both":
            return self._multi_kept("settings of its own beside its connectors")
        listed = [{"kv_connector": ours} if entry is own[0] else entry for entry in entries]
        self.draft.cache.set("multi_connector", listed, "the launch's MultiConnector; the LMCacheConnectorV1 entry "
                                                        "stands for the one stackctl writes")
        return own[0]

    def _multi_kept(self, why: str) -> dict | None:
        self.draft.notes.append(f"--kv-transfer-config is a MultiConnector with {why}: kept verbatim in "
                                "serve.extra_args")
        return None


def abbreviated_flag(name: str) -> str | None:
    """The recipe flag a unique prefix stands for, as argparse reads it (`--tensor-parallel` is
    `--tensor-parallel-size`); None for a full flag name or a prefix of several flags. The flag names are the newest
    release's (stackctl/knowledge/facts/)."""
    from stackctl.knowledge import facts

    mapped = set(VALUE_FLAGS) | set(BOOL_FLAGS) | {"--model", "--served-model-name", "--compilation-config",
                                                    "--kv-transfer-config", "--tool-call-parser"}
    if not name.startswith("--") or name in mapped:
        return None
    known = facts.versions("vllm")
    flags = facts.load("vllm", known[-1]).get("flags") or {} if known else {}
    if name in flags:
        return None
    candidates = [flag for flag in flags if flag.startswith(name)]
    return candidates[0] if len(candidates) == 1 and candidates[0] in mapped else None
