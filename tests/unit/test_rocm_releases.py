"""ROCm releases as records (stackctl/knowledge/rocm.py): a release is a row, the probes and host readers find the
HIP runtime in every layout the rows name."""

from __future__ import annotations

import importlib.util
import shutil

import pytest
from helpers import FIXTURES, REPO

from stackctl.errors import StackctlError
from stackctl.host.facts import discover
from stackctl.host.rocm_install import read_rocm_install
from stackctl.knowledge.rocm import ROCM_LIBRARY_GLOBS, ROCM_RELEASE_RECORDS, rocm_release
from stackctl.rules.ruleset import run_rules

SYSFS = FIXTURES / "sysfs"


@pytest.mark.parametrize("version, series, runtime, root", [
    ("6.4.1", "6", "libamdhip64.so.6", "/opt/rocm-6.4.1"),
    ("7.0", "7.0-7.2", "libamdhip64.so.7", "/opt/rocm-7.0"),
    ("7.2.4", "7.0-7.2", "libamdhip64.so.7", "/opt/rocm-7.2.4"),
    ("7.14", "therock-7", "libamdhip64.so.7", "/opt/rocm/core-7.14"),
    ("10.0", "core-sdk-10", "libamdhip64.so.7", "/opt/rocm/core-10.0"),
])
def test_a_version_finds_its_release_row(version, series, runtime, root):
    release = rocm_release(version)
    assert (release.name, release.hip_runtime, release.install_root(version)) == (series, runtime, root)


def test_gfx950_needs_rocm_7_and_therock_names_its_wheel_index():
    assert not rocm_release("6.4").supports("gfx950") and rocm_release("6.4").supports("gfx942")
    assert all(rocm_release(v).supports("gfx950") for v in ("7.0", "7.1", "7.2", "7.14", "10.0"))
    assert rocm_release("7.14").wheel_index("gfx950") == "gfx950-dcgpu"
    assert rocm_release("10.0").wheel_index("gfx942") == "gfx94X-dcgpu"
    assert rocm_release("7.0").wheel_index("gfx942") is None
    assert {r.packages for r in ROCM_RELEASE_RECORDS if r.builder == "therock"} == {"amdrocm-"}


@pytest.mark.parametrize("version", ["5.7", "7.5", "11.0"])
def test_a_release_no_row_covers_is_refused_naming_the_known_ones(version):
    with pytest.raises(StackctlError, match=r"is not a release stackctl knows \(known: 6.0-6.4, 7.0-7.2, 7.12\+, "
                                            r"10.0\+\)"):
        rocm_release(version)


@pytest.mark.parametrize("text", ["seven", "7", ""])
def test_a_version_that_is_not_a_version_is_refused(text):
    with pytest.raises(StackctlError, match="is not MAJOR.MINOR"):
        rocm_release(text)


def test_the_host_reader_finds_rocm_in_both_layouts():
    classic = read_rocm_install(SYSFS / "mi300x-8gpu-2node")  # /opt/rocm -> /opt/rocm-6.4.1, .info/version
    assert (classic.version, classic.version_source, classic.hip_runtimes) == (
        "6.4.1", "/opt/rocm/.info/version", ["/opt/rocm/lib/libamdhip64.so.6"])
    therock = read_rocm_install(SYSFS / "mi355x-8gpu-2node")  # /opt/rocm/core-7.14, no .info file
    assert (therock.version, therock.version_source, therock.hip_runtimes) == (
        "7.14", "/opt/rocm/core-7.14", ["/opt/rocm/core-7.14/lib/libamdhip64.so.7"])
    assert read_rocm_install(SYSFS / "cpu-only-1node").to_dict() == {"version": None, "version_source": None,
                                                                     "hip_runtimes": []}


def _probe():
    spec = importlib.util.spec_from_file_location("probe_image", REPO / "probes" / "probe_image.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_image_probe_finds_the_hip_runtime_in_both_layouts():
    probe = _probe()
    assert probe.ROCM_LIBRARY_GLOBS[:3] == ROCM_LIBRARY_GLOBS
    assert probe.rocm_runtime_facts(str(SYSFS / "mi300x-8gpu-2node")) == {
        "hip_runtimes": ["/opt/rocm/lib/libamdhip64.so.6"], "version": "6.4.1-120"}
    assert probe.rocm_runtime_facts(str(SYSFS / "mi355x-8gpu-2node")) == {
        "hip_runtimes": ["/opt/rocm/core-7.14/lib/libamdhip64.so.7"], "version": None}


def test_host_rocm_release_warns_when_the_runtime_is_not_the_releases(tmp_path):
    """A 7.0 install whose library folder holds only a .so.6 runtime: the release ships .so.7."""
    from stackctl.doctor.all_checks import load_all
    from stackctl.doctor.host_recipe import host_recipe

    tree = tmp_path / "host"
    shutil.copytree(SYSFS / "mi355x-8gpu-2node", tree, symlinks=True)
    shutil.rmtree(tree / "opt")
    (tree / "opt" / "rocm-7.0.2" / "lib").mkdir(parents=True)
    (tree / "opt" / "rocm-7.0.2" / "lib" / "libamdhip64.so.6").write_text("")
    facts = discover(tree)

    class Context:
        recipe, host = host_recipe(facts), facts

    result = load_all()["host.rocm-release"].run(Context())
    assert result.status == "warn" and "ROCm 7.0.2 ships libamdhip64.so.7" in result.message


def _recipe(versions: str, platform: str = "rocm"):
    from stackctl.recipe.loader import load_recipe_text

    return load_recipe_text(f'[stack]\nname = "r"\nplatform = "{platform}"\n[versions]\n{versions}\n'
                            '[model]\npath = "/models/m"\n')


def test_the_platform_names_the_release_that_decides_rocm_path():
    from stackctl.knowledge.rocm import release_of, rocm_path

    assert rocm_path(_recipe('rocm = "7.14"')) == "/opt/rocm/core-7.14"
    assert rocm_path(_recipe('rocm = "6.4.1"')) == "/opt/rocm"
    assert rocm_path(_recipe('rocm = "7.5"')) == "/opt/rocm"  # unknown: validate says so (rocm-gpu-arch)
    assert release_of(_recipe('gpu_arch = ["gfx942"]')) is None  # the base image decides
    assert release_of(_recipe('rocm = "7.0"', platform="cpu")) is None  # no GPU runtime on cpu
    with pytest.raises(StackctlError, match="ROCm 7.5 is not a release"):
        release_of(_recipe('rocm = "7.5"'))


def test_an_unknown_release_is_a_finding_at_versions_rocm():
    from stackctl.rules.ruleset import run_rules

    findings = [f for f in run_rules(_recipe('rocm = "7.5"')) if f.rule_id == "rocm-gpu-arch"]
    assert [(f.key, f.severity) for f in findings] == [("versions.rocm", "error")]


@pytest.mark.parametrize("image, version", [
    ("rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210", "7.0.0"), ("rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12", "6.4.1"),
    ("rocm/dev-ubuntu-24.04:7.0", "7.0"), ("rocm/dev-ubuntu-22.04:6.4.1-complete", "6.4.1"),
    ("rocm/vllm:latest", None), ("rocm/atom-dev:vllm-latest", None), ("vllm/vllm-openai:v0.9.0", None),
    ("myrepo/rocm:rocm7.0", None), (None, None), ("rocm/vllm", None),
])
def test_the_rocm_release_an_amd_image_tag_names(image, version):
    from stackctl.knowledge.rocm import rocm_version_in_image

    assert rocm_version_in_image(image) == version


def test_an_imported_launch_takes_its_rocm_release_from_amds_image_tag():
    from stackctl import importer
    from stackctl.recipe.loader import load_recipe_text

    text = importer.import_launch_text("docker run --device /dev/kfd --device /dev/dri "
                                       "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210 vllm serve /models/m\n", None, "t")
    recipe = load_recipe_text(text)
    assert (recipe.versions.rocm, recipe.versions.vllm) == ("7.0.0", "0.11.2")


def _engine_recipe(versions: str, engine: str, base_image: str | None = None):
    from stackctl.recipe.loader import load_recipe_text

    image = f'base_image = "{base_image}"\n' if base_image else ""
    return load_recipe_text(f'[stack]\nname = "r"\nplatform = "rocm"\nengine = "{engine}"\n{image}[versions]\n'
                            f'{versions}\n[model]\npath = "/models/m"\n')


@pytest.mark.parametrize("rocm, engine, image", [
    ("6.2", "vllm", "rocm/vllm:rocm6.2_mi300_ubuntu20.04_py3.9_vllm_0.6.4"),
    ("6.3.1", "vllm", "rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521"),
    ("6.4", "vllm", "rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909"),
    ("7.0.2", "vllm", "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210"),
    ("7.2", "atom-vllm", "rocm/atom-dev:vllm-latest"),
])
def test_the_rocm_release_picks_the_base_image_amd_publishes_for_it(rocm, engine, image):
    from stackctl.bundle.stackspec import base_image
    from stackctl.knowledge.rocm import rocm_version_in_image

    recipe = _engine_recipe(f'rocm = "{rocm}"', engine)
    assert base_image(recipe) == image
    carried = rocm_version_in_image(image)  # a tag that names its ROCm names the recipe's release
    assert carried is None or carried.split(".")[:2] == rocm.split(".")[:2]
    assert not [f for f in run_rules(recipe) if f.rule_id.startswith("rocm-")]


def test_without_a_release_or_with_an_explicit_image_the_release_decides_nothing():
    from stackctl.bundle.stackspec import base_image
    from stackctl.knowledge import compat

    defaults = compat.table()["defaults"]
    assert base_image(_engine_recipe('gpu_arch = ["gfx942"]', "vllm")) == defaults["rocm_vllm_base_image"]
    assert base_image(_engine_recipe('gpu_arch = ["gfx942"]', "atom-vllm")) == defaults["rocm_atom_base_image"]
    assert base_image(_engine_recipe('rocm = "6.4"', "vllm", "my/own:image")) == "my/own:image"
    # an unknown release is rocm-gpu-arch's finding; the image falls back to the platform's default
    assert base_image(_engine_recipe('rocm = "7.5"', "vllm")) == defaults["rocm_vllm_base_image"]


@pytest.mark.parametrize("rocm, engine, published", [
    ("7.1", "vllm", "6.2, 6.3, 6.4, 7.0"), ("6.1", "vllm", "6.2, 6.3, 6.4, 7.0"), ("7.14", "vllm", "6.2, 6.3, 6.4, 7.0"),
    ("10.0", "vllm", "6.2, 6.3, 6.4, 7.0"), ("7.0", "atom-vllm", "7.2"), ("6.4", "atom-vllm", "7.2"),
])
def test_a_release_without_a_published_image_asks_for_stack_base_image(rocm, engine, published):
    recipe = _engine_recipe(f'rocm = "{rocm}"\ngpu_arch = ["gfx942"]', engine)
    findings = [f for f in run_rules(recipe) if f.rule_id == "rocm-release-base-image"]
    assert [(f.key, f.severity) for f in findings] == [("versions.rocm", "error")]
    assert findings[0].message == (f"AMD publishes no {engine} base image for ROCm {rocm} (it does for ROCm "
                                   f"{published}) and stack.base_image is unset")
    assert "set stack.base_image" in findings[0].fix
    # naming the image by hand settles it
    with_image = _engine_recipe(f'rocm = "{rocm}"\ngpu_arch = ["gfx942"]', engine, "my/own:image")
    assert not [f for f in run_rules(with_image) if f.rule_id == "rocm-release-base-image"]


def test_the_error_names_file_line_key_and_fix():
    from stackctl.recipe.loader import load_recipe

    path = FIXTURES / "rules" / "rocm-release-base-image" / "fail.toml"
    (finding,) = [f for f in run_rules(load_recipe(path)) if f.rule_id == "rocm-release-base-image"]
    line = finding.format()
    assert line.startswith(f"{path}:5:") and "versions.rocm" in line and "(fix: set stack.base_image" in line
    assert "\n" not in line


@pytest.mark.parametrize("image, rocm, hits", [
    ("rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909", "7.0", 1), ("rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909", "6.4", 0),
    ("rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210", "7.0.2", 0), ("rocm/atom-dev:vllm-latest", "6.4", 0),
])
def test_an_explicit_image_of_another_release_is_a_finding(image, rocm, hits):
    recipe = _engine_recipe(f'rocm = "{rocm}"\ngpu_arch = ["gfx942"]', "vllm", image)
    findings = [f for f in run_rules(recipe) if f.rule_id == "rocm-base-image-release"]
    assert [(f.key, f.severity) for f in findings] == [("stack.base_image", "warning")] * hits


def test_therock_previews_from_7_12_install_like_its_later_releases():
    for version in ("7.12", "7.13.0"):
        release = rocm_release(version)
        assert (release.name, release.packages) == ("therock-7", "amdrocm-")
        assert release.install_root(version) == f"/opt/rocm/core-{'.'.join(version.split('.')[:2])}"
    with pytest.raises(StackctlError, match="ROCm 7.11 is not a release"):
        rocm_release("7.11")


@pytest.mark.parametrize("tag, default", [
    ("rocm7.0.0_${SUFFIX}", "default (rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210)"),
    ("rocm7.1.0_${SUFFIX}", "default (none AMD publishes for ROCm 7.1.0: set stack.base_image)"),
])
def test_an_import_names_the_base_image_its_rocm_release_gets(tag, default):
    from stackctl import importer

    text = importer.import_launch_text(f"docker run --device /dev/kfd --device /dev/dri rocm/vllm:{tag} vllm serve "
                                       "/models/m\n", None, "t")
    notes = " ".join(line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#"))
    assert f"stack.base_image left to stackctl's {default}" in notes
