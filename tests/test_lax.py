"""A --speculative-config value read as pydantic's lax mode reads it for vLLM's int and bool fields
(patchkit/launch/lax.py). The table is pydantic 2.14's answers (vLLM 0.16.0's); the same values are put
to the installed vLLM's own pydantic in tests/vllm_import/test_lax_real.py."""

from __future__ import annotations

import pytest

from patchkit.launch.lax import lax_bool, lax_int

# (value, pydantic's bool, pydantic's int); None: pydantic refuses it
LAX = [
    ("true", True, None), ("TRUE", True, None), ("Yes", True, None), ("on", True, None), ("t", True, None),
    ("1", True, 1), ("0", False, 0), ("off", False, None), ("no", False, None), ("F", False, None),
    (" true", None, None), ("true ", None, None), (" 1", None, 1), ("1.0", None, 1), ("", None, None),
    ("2", None, 2), (" +3 ", None, 3), ("-1", None, -1), ("1_000", None, 1000), ("1.00", None, 1),
    ("0x10", None, None), ("1e2", None, None), ("2.5", None, None), ("1.", None, None), ("_1", None, None),
    ("1__0", None, None), ("\t3\n", None, 3),
    (1, True, 1), (0, False, 0), (2, None, 2), (1.0, True, 1), (0.0, False, 0), (2.0, None, 2), (1.5, None, None),
    (1e20, None, None), (True, True, 1), (False, False, 0),
]  # fmt: skip


@pytest.mark.parametrize(("value", "as_bool", "as_int"), LAX, ids=repr)
def test_a_value_is_read_as_pydantic_reads_it(value, as_bool, as_int):
    assert lax_bool(value) is as_bool
    got = lax_int(value)
    assert (got if got is not False else None) == as_int and type(got) in (int, bool), got


@pytest.mark.parametrize("value", [None, [], {}, [1]])
def test_an_absent_or_other_value(value):
    assert lax_bool(value) is None
    assert lax_int(value) is (None if value is None else False)
