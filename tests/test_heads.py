"""patchkit.base.heads finds the lines a path begins (by bisection) exactly as a scan of every line
for every path finds them: paths holding spaces and quotes, paths that begin other paths."""

from __future__ import annotations

from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.base.heads import Heads, naming

PATH = st.text(alphabet="ab /'", min_size=1, max_size=6)


@settings(max_examples=examples(300), deadline=None)
@given(lines=st.lists(st.text(alphabet="ab /'", max_size=12), max_size=12), paths=st.lists(PATH, max_size=8))
def test_heads_finds_what_each_path_scan_found(lines, paths):
    heads = Heads(lines)
    for path in paths:
        assert heads.any_starts(f"{path} ", f"{path!r} ") == any(
            line.startswith((f"{path} ", f"{path!r} ")) for line in lines
        )
        assert sorted(heads.starting(path)) == sorted({line for line in lines if line.startswith(path)})
    assert naming(lines, paths) == {line for line in lines if any(line.startswith(f"{p} ") for p in paths)}
    first = heads.first_named(paths)
    for line in lines:
        assert first.get(line) == next((p for p in paths if line.startswith(f"{p} ")), None)
