"""Opt-in (`make test-vllm`): patchkit's lax reading of a --speculative-config value (patchkit/launch/lax.py)
agrees with the pydantic of the installed vLLM on every value tried, for int and bool fields."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from patchkit.launch.lax import lax_bool, lax_int

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

WORDS = ["true", "True", "YES", "y", "on", "t", "1", "0", "off", "No", "n", "f", "false", "", "2", "-1", "+3"]
SPACED = [" true", "true ", " 1", "1 ", "\t3\n", "3\u00a0", "- 1"]
NUMBERS = ["1.0", "1.00", "1.", ".0", "1_000", "1__0", "_1", "1_", "0x10", "1e2", "2.5", "01", "9" * 30]
VALUES = [*WORDS, *SPACED, *NUMBERS, 0, 1, 2, -1, 0.0, 1.0, 2.0, 1.5, -0.0, 1e20, True, False, None, [], {}]

ASKED = """
import json, sys
from pydantic import TypeAdapter
said = []
for value in json.loads(sys.argv[1]):
    row = []
    for kind in (bool, int):
        try:
            row.append(TypeAdapter(kind).validate_python(value))
        except Exception:
            row.append(None)
    said.append(row)
print(json.dumps(said))
"""


def test_lax_values_agree_with_vllms_pydantic():
    done = subprocess.run(
        [VLLM_PYTHON, "-c", ASKED, json.dumps(VALUES)], capture_output=True, text=True, check=True, timeout=120
    )
    theirs = json.loads(done.stdout)
    ours = [[lax_bool(value), _refused_as_none(lax_int(value), value)] for value in VALUES]
    assert ours == theirs, [(v, o, t) for v, o, t in zip(VALUES, ours, theirs, strict=True) if o != t]


def _refused_as_none(read: int | bool | None, value: object) -> int | None:
    if isinstance(value, bool):
        return int(value)
    return None if read is False or read is None else int(read)
