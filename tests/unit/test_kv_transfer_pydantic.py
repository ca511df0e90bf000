"""stackctl's --kv-transfer-config reader says it judges values the way vLLM's pydantic model does (lax mode, JSON
input). Checked against the real pydantic: for every kind of field stackctl knows, a matrix of JSON values is
validated by pydantic and by stackctl, and both must accept and reject the same ones."""

from __future__ import annotations

import json
from typing import Literal, Optional

import pydantic  # the validator vLLM's config classes use (the test extra installs it)
import pytest

from stackctl.knowledge.kv_transfer import FIELDS, kv_transfer_problems

TYPES = {"str?": Optional[str], "str": str, "int": int, "int?": Optional[int], "float": float, "bool": bool,
         "dict": dict}
VALUES = [None, True, False, 0, 1, 2, -3, 2.0, 2.5, "2", " 7 ", "-4", "2.0", "2.00", "-0.0", "1_000", "1_000.0", "_1", "2.0_0", "2.", "2.5", "1e3", "0x10", "x", "", "true", "off",
          "yes", "T", "kv_both", "recompute", "fail", "kv_producer", [], {}, {"a": 1}]


def pydantic_type(kind):
    if isinstance(kind, tuple):
        words = tuple(k for k in kind if k is not None)
        return Optional[Literal[words]] if None in kind else Literal[words]
    return TYPES[kind]


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_each_field_accepts_what_pydantic_accepts(field):
    adapter = pydantic.TypeAdapter(pydantic_type(FIELDS[field]))
    disagreements = []
    for value in VALUES:
        text = json.dumps(value)
        try:
            adapter.validate_json(text)
            pydantic_ok = True
        except pydantic.ValidationError:
            pydantic_ok = False
        stackctl_ok = kv_transfer_problems(json.dumps({field: value})) == []
        if pydantic_ok != stackctl_ok:
            disagreements.append(f"{text}: pydantic {'accepts' if pydantic_ok else 'rejects'}")
    assert disagreements == [], f"{field} ({FIELDS[field]})"
