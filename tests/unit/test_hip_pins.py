"""The HIP images' package pins (scripts/hip_pins.py): the file is read whole, each image is held to its own pins and
those of the images under it, drift is named per package, and the tests' toolchain facts come from the pinned
package names. The check against real images runs in tests/integration/test_hip_kernels.py."""

from __future__ import annotations

import re

import pytest
from helpers import REPO, hip_pins

PINS = hip_pins()
DOCKERFILES = {"toolchain": REPO / "scripts" / "hip-toolchain.Dockerfile",
               "test-torch": REPO / "tests" / "hip" / "Dockerfile",
               "kernels": REPO / "tests" / "hip" / "kernels" / "Dockerfile"}
TOOLCHAIN_PACKAGE = re.compile(r"-\d+$|hip|rocm|torch|spirv|pocl|opencl|numpy")


def _write(tmp_path, text: str):
    path = tmp_path / "pins"
    path.write_text(text)
    return str(path)


def test_the_shipped_pins_give_the_toolchain_facts_the_tests_read():
    pins = PINS.read_pins()
    assert set(pins) == {"toolchain", "test-torch", "kernels"} and all(pins.values())
    facts = PINS.facts(pins)
    assert facts["LLVM_MAJOR"].isdigit() and f"clang-{facts['LLVM_MAJOR']}" in pins["toolchain"]
    major = facts["HIP_SONAME"].rsplit(".", 1)[1]
    assert facts["HIP_SONAME"] == f"libamdhip64.so.{major}" and f"libamdhip64-{major}" in pins["toolchain"]


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_every_toolchain_package_a_dockerfile_installs_is_pinned_for_its_image(image):
    """A package added to an image's install line without a pin would drift unseen."""
    text = DOCKERFILES[image].read_text()
    install = re.search(r"apt-get install -y --no-install-recommends(.*?)(?:&&|$)", text.replace("\\\n", " "), re.S)
    named = {word for word in install.group(1).split() if TOOLCHAIN_PACKAGE.search(word)}
    assert named and named <= set(PINS.read_pins()[image]), named - set(PINS.read_pins()[image])


def test_an_image_is_held_to_its_own_pins_and_those_under_it(tmp_path):
    pins = PINS.read_pins(_write(tmp_path, "toolchain clang-30 1:30.1-1\ntest-torch python3-torch 3.0-1 # note\n"
                                           "kernels pocl-opencl-icd 9.0-1\n"))
    assert PINS.held(pins, "toolchain") == {"clang-30": "1:30.1-1"}
    assert PINS.held(pins, "kernels") == {"clang-30": "1:30.1-1", "python3-torch": "3.0-1", "pocl-opencl-icd": "9.0-1"}


def test_drift_names_each_package_with_both_versions():
    wanted = {"clang-21": "1:21.1.8-14", "hipcc": "7.0.2+dfsg-3", "llvm-21": "1:21.1.8-14"}
    installed = {"clang-21": "1:21.1.8-15", "hipcc": "7.0.2+dfsg-3"}
    assert PINS.drift(wanted, installed) == ["clang-21: pinned 1:21.1.8-14, installed 1:21.1.8-15",
                                             "llvm-21: pinned 1:21.1.8-14, installed nothing"]
    assert PINS.drift(wanted, dict(wanted)) == []


@pytest.mark.parametrize("text, message", [
    ("toolchain clang-21\n", "expected `IMAGE PACKAGE VERSION`"),
    ("rocm clang-21 1:21\n", "IMAGE one of toolchain, test-torch, kernels"),
])
def test_a_malformed_pin_line_is_named_with_its_line(tmp_path, text, message):
    path = _write(tmp_path, "# header\n" + text)
    with pytest.raises(PINS.PinError, match=re.escape(f"{path}:2: ")) as caught:
        PINS.read_pins(path)
    assert message in str(caught.value)


@pytest.mark.parametrize("toolchain, missing", [("hipcc 7\n", "clang-N"), ("clang-21 1\nclang-22 1\n", "clang-N"),
                                                ("clang-21 1\n", "libamdhip64-N")])
def test_facts_need_exactly_one_compiler_and_one_runtime_package(tmp_path, toolchain, missing):
    text = "".join(f"toolchain {line}" for line in toolchain.splitlines(keepends=True))
    with pytest.raises(PINS.PinError, match=missing):
        PINS.facts(PINS.read_pins(_write(tmp_path, text)))


def test_refresh_rewrites_only_that_images_versions_in_place(tmp_path, monkeypatch):
    path = _write(tmp_path, "# keep me\ntoolchain clang-21 1:21.1.8-14  # installed by X\n"
                            "kernels clang-21 1:21.1.8-14\ntoolchain hipcc 7.0.2\n")
    monkeypatch.setattr(PINS, "installed_versions", lambda tag, packages: {"clang-21": "1:21.1.9-1", "hipcc": "7.0.2"})
    assert PINS.refresh("some/tag", "toolchain", path) == ["clang-21: 1:21.1.8-14 -> 1:21.1.9-1"]
    # the version column keeps its width, so the comments beside it stay aligned
    assert open(path).read() == ("# keep me\ntoolchain clang-21 1:21.1.9-1   # installed by X\n"
                                 "kernels clang-21 1:21.1.8-14\ntoolchain hipcc 7.0.2\n")
    monkeypatch.setattr(PINS, "installed_versions", lambda tag, packages: {"hipcc": "7.0.2"})
    with pytest.raises(PINS.PinError, match="has none of clang-21"):
        PINS.refresh("some/tag", "toolchain", path)
