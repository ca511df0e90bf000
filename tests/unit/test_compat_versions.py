"""compat.parse_version orders versions the way packaging does, whichever path parsed them: plain releases by their
numbers (packaging is not imported for them), anything else through packaging's Version."""

from __future__ import annotations

import subprocess
import sys

from packaging.version import Version

from stackctl.knowledge.compat import parse_version

VERSIONS = ["0.4.1", "0.5", "0.5.0", "v0.5.6", "0.5.6+rocm", "0.10.1rc1", "0.10.1", "0.10.2", "0.10.10",
            "1.0.post1", "1.0.dev3", "0!2.0", "2.0.0.0", "0.19.0", "0.33.0"]


def test_order_and_equality_match_packaging():
    for a in VERSIONS:
        for b in VERSIONS:
            mine, theirs = (parse_version(a), parse_version(b)), (Version(a.lstrip("v")), Version(b.lstrip("v")))
            assert (mine[0] < mine[1], mine[0] == mine[1]) == (theirs[0] < theirs[1], theirs[0] == theirs[1]), (a, b)
            if mine[0] == mine[1]:
                assert hash(mine[0]) == hash(mine[1]), (a, b)


def test_what_is_not_a_version_is_none():
    assert parse_version(None) is None and parse_version("") is None and parse_version("main") is None


def test_plain_releases_leave_packaging_unimported():
    code = ("import sys; from stackctl.knowledge.compat import parse_version as p; "
            "assert p('0.32.0') > p('0.5.6'); print('packaging.version' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
