"""A non-printable character above U+00FF in a message: U+2028 (a line break to many log viewers)
and U+202E (right-to-left override) are shown as \\u2028 and \\u202e, never as their low byte (\\x28
reads as "("); a surrogate-escaped byte as the byte it stands for. The guard's refusal escapes the
same way, the tree's path too, and names the tree as one shell word on one line that bash reads
back as that path."""

from __future__ import annotations

import os
import subprocess

import pytest

import patchkit._target.guard as target_guard
from patchkit.base.errors import escaped, few

CASES = [
    ("a\u2028b", "a\\u2028b"),
    ("a\u202eb", "a\\u202eb"),
    ("a\nb\x1b[1m", "a\\x0ab\\x1b[1m"),
    ("a\x85b", "a\\x85b"),  # C1: NEL
    ("x\udcfey", "x\\xfey"),  # an undecodable byte 0xfe, as os.fsdecode leaves it
    ("z\U000e0001", "z\\U000e0001"),  # LANGUAGE TAG: not printable, above the BMP
    ("é→ok", "é→ok"),  # printable: kept
]


@pytest.mark.parametrize(("raw", "shown"), CASES)
def test_escaped_and_the_guard_agree_on_each_character(raw, shown):
    assert escaped(raw) == shown
    assert few([raw]) == shown
    assert target_guard._few([raw]) == shown


def test_the_guards_refusal_escapes_the_trees_path_and_names_it_as_one_shell_word(tmp_path):
    site = str(tmp_path) + "/si\nte'\\\u2028\udcff"
    said = target_guard.refusal(site, ["vllm/zz/a\u2028b.py is gone"])
    assert "\n" not in said and "\u2028" not in said and "\udcff" not in said, said
    assert "left in " + str(tmp_path) + "/si\\x0ate'\\\\u2028\\xff: vllm/zz/a\\u2028b.py is gone" in said, said
    word = said[said.index("--target ") + len("--target ") : said.index("`: it names")]
    # bash reads the word back as the path's bytes
    done = subprocess.run(
        ["bash", "-c", "printf %s " + word],
        capture_output=True,
        env={**os.environ, "LC_ALL": "C.UTF-8"},
        check=True,
    )
    assert done.stdout == os.fsencode(site)
