"""A METADATA's header fields as importlib.metadata reads them (what vLLM's plugin loader and
importlib.metadata.version() read): patchkit reads them by hand (email costs `run`'s start-up), and
one reader serves the tree's vLLM version and a launch's distributions. Held here to importlib's own
answer on hostile texts: line breaks str.splitlines knows and email does not, \\r and \\r\\n, folded
lines, envelope lines, lines that end the header block."""

from __future__ import annotations

import importlib.metadata
import io
from pathlib import Path

import pytest
from helpers import examples, write_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.distinfo.entry_points import distribution_headers
from patchkit.tree.target import Target
from patchkit.tree.version import detect, metadata_headers

HOSTILE = {
    "form-feed": "Name: vllm\nSummary: a\x0cVersion: 9.9.9\nVersion: 0.16.0\n",
    "next-line": "Name: vllm\nSummary: a\x85Version: 9.9.9\nVersion: 0.16.0\n",
    "line-separator": "Name: vllm\nSummary: a\u2028Version: 9.9.9\u2029\x1c\x1d\x1e\x0b\nVersion: 0.16.0\n",
    "crlf": "Name: vllm\r\nSummary: a\r\n  folded\r\nVersion: 0.16.0\r\n\r\nVersion: 9.9.9\r\n",
    "lone-cr": "Name: vllm\nSummary: a\rVersion: 9.9.9\nVersion: 0.16.0\n",
    "folded": "Name: vllm\nSummary: a long\n  folded summary: Version: 9.9\n\tand a tab\nVersion:  0.16.0 \n",
    "folded-version": "Name: vllm\nVersion: 0.16.0\n  .post1\n",
    "blank-fold": "Name: vllm\nVersion: 0.16.0\n \n\t\nSummary: after\n",
    "no-colon": "Name: vllm\nnot a header\nVersion: 9.9.9\n",
    "space-in-name": "Name: vllm\nVersion : 9.9.9\nVersion: 0.16.0\n",
    "non-ascii-name": "Name: vllm\nV\u00e9rsion: 9.9.9\nVersion: 0.16.0\n",
    "envelope": "From someone\nName: vllm\nFrom the middle\n folded after it\nVersion: 0.16.0\nFrom the body\n",
    "no-name": "Name: vllm\n:Version: 9.9.9\n continued\nVersion: 0.16.0\n",
    "first-folded": " Version: 9.9.9\nName: vllm\nVersion: 0.16.0",
    "case": "name: vllm\nVERSION: 0.16.0\nversion: 9.9.9\n",
    "description": "Name: vllm\nVersion: 0.16.0\n\nVersion: 9.9.9\n",
}


def importlib_reads(text: str) -> list[tuple[str, str]]:
    """importlib.metadata's header fields of METADATA holding `text` (PathDistribution's read: pathlib's
    universal newlines), without the Description it adds from the body."""

    class Read(importlib.metadata.Distribution):
        def read_text(self, filename):
            data = text.encode() if filename == "METADATA" else None
            return None if data is None else io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()

        def locate_file(self, path):
            return Path(path)

    metadata = Read().metadata
    fields = list(metadata.items())
    return fields[:-1] if metadata.get_payload() else fields


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_the_headers_are_importlibs_on_hostile_metadata(tmp_path, text):
    info = tmp_path / "vllm-0.16.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(text.encode())
    read = importlib.metadata.PathDistribution(info).metadata
    expected = list(read.items())[: -1 if read.get_payload() else None]
    assert importlib_reads(text) == expected
    assert distribution_headers([str(tmp_path)], "vllm") == expected
    assert metadata_headers(text) == expected


@pytest.mark.parametrize("name", ["form-feed", "next-line", "line-separator", "lone-cr", "no-colon", "case"])
def test_the_trees_version_is_the_one_importlib_reads(tmp_path, name):
    """Where importlib finds no Version in METADATA, vllm/_version.py says which release it is."""
    tree = write_tree(tmp_path / "site", files={"vllm/_version.py": "__version__ = '0.15.1'\n"})
    (tree / "vllm-0.16.0.dist-info" / "METADATA").write_bytes(HOSTILE[name].encode())
    said = importlib.metadata.PathDistribution(tree / "vllm-0.16.0.dist-info").metadata.get("Version")
    found = detect(Target(tree, "--target"))
    assert (str(found.version), found.source) == (
        (said, "vllm-0.16.0.dist-info/METADATA") if said else ("0.15.1", "vllm/_version.py")
    )


LINES = st.lists(
    st.sampled_from(["Name: vllm", "Version: 1", "From x", " fold", "\t", ":x", "no colon", "V\u00e9: 2", ""]),
    max_size=8,
)
BREAKS = st.sampled_from(["\n", "\r\n", "\r", "\x0c", "\x85", "\u2028", "\x1c", "\x0b"])


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(LINES.map(" ".join), BREAKS), max_size=8))
def test_any_text_of_those_lines_and_breaks_reads_as_importlib_reads_it(pieces):
    text = "".join(line + end for line, end in pieces)
    assert metadata_headers(text) == importlib_reads(text)
