"""The launch guard judges a patched wheel's patchkit.json by the shape patchkit's commands hold it
to (patchkit.distinfo.provenance.read_provenance, and installed_wheel.find's path rule): a record
status refuses as damaged (exit 2) is refused at a launch, and one status reads the guard reads. It
read only the record's files before, and let vLLM launch where status refused the record. The guard
cannot import patchkit, so its rules are its own copy; this holds the two to one verdict on records of
both schemas mutated at every place, with values of every JSON kind."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import examples, json_values, mutated, places_in
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit._target.guard import _file_damage, provenance_damage
from patchkit.base.errors import BadInput
from patchkit.distinfo.provenance import read_provenance
from patchkit.store.state import checked_path

DIGEST = "ab" * 32
ONE_SET = {
    "schema_version": 1,
    "patchkit": "0.1.0",
    "vllm_version": "0.16.0",
    "label": "patchkit.demo",
    "set": "demo",
    "patches": [{"name": "0001-a.patch", "sha256": DIGEST}, {"name": "0002-b.patch", "sha256": "cd" * 32}],
    "files": {
        "vllm/config/spec.py": {"stock_sha256": DIGEST, "patched_sha256": "cd" * 32},
        "vllm/new.py": {"stock_sha256": None, "patched_sha256": DIGEST},
    },
}
SEVERAL_SETS = {
    "schema_version": 2,
    "patchkit": "0.1.0",
    "vllm_version": "0.16.0",
    "label": "patchkit.eagle3.tools",
    "sets": [
        {"set": "eagle3", "patches": [{"name": "0001-a.patch", "sha256": DIGEST}]},
        {"set": "tools", "patches": [{"name": "0001-a.patch", "sha256": "cd" * 32}]},
    ],
    "files": {"vllm/config/spec.py": {"stock_sha256": DIGEST, "patched_sha256": None}},
}
EDGE_VALUES = [
    None,
    True,
    False,
    0,
    1,
    2,
    1.0,
    2.0,
    -1,
    "",
    "x",
    "demo",
    ".",
    "..",
    "a/b",
    "a\\b",
    "C:x",
    "x\x00",
    "x" * 201,
    DIGEST,
    DIGEST.upper(),
    "ab" * 31,
    "0.16.0",
    "vllm/x.py",
    "../x.py",
    "vllm//x.py",
    "sitecustomize/x.py",
    "x.py",
    "vllm/__pycache__/x.pyc",
    [],
    {},
    [{"name": "0001-a.patch", "sha256": DIGEST}],
    [{"name": "0001-a.patch", "sha256": DIGEST}] * 2,
    {"stock_sha256": None, "patched_sha256": None},
    {"set": "x", "patches": []},
]
JSON = json_values(EDGE_VALUES)


VALID = [ONE_SET, SEVERAL_SETS]
PLACES = [(which, place) for which, record in enumerate(VALID) for place in places_in(record)]


def _mutated(which: int, place: tuple, value: object, as_key: bool, drop: bool) -> object:
    return mutated(VALID[which], place, value, as_key=as_key, drop=drop)


def _commands_refuse(record: object, where: Path) -> bool:
    """read_provenance's verdict, then find()'s path rule on each file it names."""
    (where / "patchkit.json").write_text(json.dumps(record))
    try:
        found = read_provenance(where)
        for path in found.files:
            checked_path(path, where / "patchkit.json", guard=False)
    except BadInput:
        return True
    return False


def _guard_refuses(record: object) -> bool:
    if provenance_damage(record) is not None:
        return True
    assert isinstance(record, dict)
    return any(_file_damage(path, {"before": None, "after": None}) is not None for path in record["files"])


def test_the_valid_records_are_read_by_both(tmp_path):
    for record in VALID:
        assert not _commands_refuse(record, tmp_path) and not _guard_refuses(record)


@settings(max_examples=examples(600), deadline=None)
@given(st.sampled_from(PLACES), JSON, st.booleans(), st.booleans())
def test_the_guard_refuses_exactly_the_records_status_calls_damaged(tmp_path_factory, where, value, as_key, drop):
    record = _mutated(*where, value, as_key, drop)
    directory = tmp_path_factory.mktemp("info")
    assert _guard_refuses(record) == _commands_refuse(record, directory), (record, provenance_damage(record))


def test_each_edge_value_at_each_place_gets_one_verdict(tmp_path):
    for which, place in PLACES:
        for value in EDGE_VALUES:
            for as_key in (False, True):
                record = _mutated(which, place, value, as_key, False)
                assert _guard_refuses(record) == _commands_refuse(record, tmp_path), (place, value, as_key)
