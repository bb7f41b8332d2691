"""The launch guard judges state.json's shape as patchkit's commands do (review 14 L2'): a record
`status`, `preflight` and `revert` refuse as damaged (exit 2) is refused at a launch, and one they
read is one the guard reads. The guard cannot import patchkit (it runs in vLLM's interpreter), so
its rules are its own copy of patchkit.store.state.parse_state's; this holds the two to one verdict
on records mutated at every place, with values of every JSON kind."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from helpers import examples, json_values, mutated, places_in
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit._target.guard import TreeChanged, _read_json, state_damage
from patchkit.base.errors import BadInput
from patchkit.store.state import parse_state

DIGEST = "ab" * 32
INFO = "patchkit_guard-0.1.0.dist-info"
VALID = {
    "format": 1,
    "entries": [
        {
            "set": "demo",
            "vllm_version": "0.16.0",
            "release": "0.16.0",
            "applied_at": "2026-01-01T00:00:00+00:00",
            "patches": [{"name": "0001.patch", "sha256": DIGEST, "path": "/lib/0001.patch"}],
            "library": "/lib",
            "held": True,
            "files": {"vllm/config/spec.py": {"before": DIGEST, "after": "cd" * 32, "mode": 0o644}},
        }
    ],
    "guard": {"patchkit_guard.py": DIGEST, f"{INFO}/RECORD": DIGEST},
    "guard_replaced": {"patchkit_guard.py": DIGEST},
    "chosen": ["demo"],
    "reverted": ["other"],
    "wheel": "0.16.0",
    "no_guard": False,
}

# values that are near the rules' edges (the right kind, the wrong length, a version, a path...)
EDGE_VALUES = [
    None,
    True,
    False,
    0,
    1,
    2,
    1.0,
    -1,
    0o777,
    0o1000,
    "",
    "x",
    "demo",
    DIGEST,
    DIGEST.upper(),
    "ab" * 31,
    "0.16.0",
    "v1.0rc1.post2.dev3+cu129",
    "1.0-1",
    "abc",
    "1..0",
    " 1.0 ",
    "1.0+",
    "/abs",
    "/ctl\x07",
    "vllm/x.py",
    "vllm/__pycache__/x.pyc",
    "sitecustomize/x.py",
    "../x.py",
    "vllm//x.py",
    "vllm/./x",
    "C:/x.py",
    "x.py",
    "1vllm/x.py",
    "patchkit_guard.py",
    f"{INFO}/METADATA",
    "patchkit_guard-abc.dist-info/RECORD",
    "patchkit_guard-0.2.dist-info/RECORD",
    "patchkit_guard-0.1.0+patchkit.dist-info/RECORD",
    "\u2028",
    "vllm/" + "d/" * 30 + "x.py",  # as deep as a recorded path may be
    "vllm/" + "d/" * 31 + "x.py",  # deeper
    "vllm/" + "n" * 256 + ".py",  # a name no file system holds
    "vllm/" + ("n" * 250 + "/") * 9 + "x.py",  # a path over 2,048 bytes
    "patchkit_guard-" + "1" * 250 + ".dist-info/RECORD",
    [],
    {},
    ["demo"],
    [1],
    ["x" * 201],
    ["demo"] * 257,
]
JSON = json_values(EDGE_VALUES, text_size=8)
PLACES = places_in(VALID)


def _mutated(place: tuple, value: object, as_key: bool, drop: bool) -> object:
    return mutated(VALID, place, value, as_key=as_key, drop=drop)


def _commands_refuse(record: object) -> bool:
    try:
        parse_state(json.dumps(record).encode(), Path("/t/.patchkit/state.json"))
    except BadInput:
        return True
    return False


def test_the_valid_record_is_read_by_both():
    assert not _commands_refuse(VALID) and state_damage(VALID) is None


@settings(max_examples=examples(1500), deadline=None)
@given(st.sampled_from(PLACES), JSON, st.booleans(), st.booleans())
def test_the_guard_refuses_exactly_the_records_the_commands_call_damaged(place, value, as_key, drop):
    record = _mutated(place, value, as_key, drop)
    assert (state_damage(record) is not None) == _commands_refuse(record), (record, state_damage(record))


def test_each_edge_value_at_each_place_gets_one_verdict():
    """Every edge value at every place, as a value and as a key: no sample left to chance."""
    for place in PLACES:
        for value in EDGE_VALUES:
            for as_key in (False, True):
                record = _mutated(place, value, as_key, False)
                assert (state_damage(record) is not None) == _commands_refuse(record), (place, value, as_key)


def test_a_patch_applys_record_naming_a_file_outside_vllm_is_damaged_to_both():
    """Review 17 H3: a planted --patch record naming another package's file (a --patch file changes
    only vllm/) made revert write the record's bytes there. Both call it damaged; under vllm/ both read it."""
    record = copy.deepcopy(VALID)
    entry = record["entries"][0]
    entry["set"] = "adhoc-0123456789ab"
    assert not _commands_refuse(record) and state_damage(record) is None
    entry["files"]["mypkg/notes.py"] = {"before": DIGEST, "after": DIGEST}
    assert _commands_refuse(record) and "mypkg/notes.py" in str(state_damage(record))


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("where", ["mode", "unread"])
def test_nan_and_infinity_are_malformed_json_to_both(tmp_path, constant, where):
    """json.loads takes NaN and Infinity by default; JSON has neither: a record holding one, where a
    number is read or in a field nothing reads, is refused by the commands and by the guard."""
    record = copy.deepcopy(VALID)
    if where == "mode":
        record["entries"][0]["files"]["vllm/config/spec.py"]["mode"] = "@"
    else:
        record["entries"][0]["took"] = "@"
    raw = json.dumps(record).replace('"@"', constant).encode()
    path = tmp_path / "state.json"
    path.write_bytes(raw)
    with pytest.raises(BadInput, match=f"not JSON: {constant} is no JSON number"):
        parse_state(raw, path)
    with pytest.raises(TreeChanged, match="is not JSON"):
        _read_json(str(path))
