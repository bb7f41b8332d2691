"""Issue 21: the work a start-up path does after its imports grows with what it reads, not with
the pairs of it. A library's ranges are bounded once each (their overlaps compared as bounds),
and the tree's RECORD is parsed once a run however many sets ask for their files of it."""

from __future__ import annotations

import itertools
import random
from datetime import date
from pathlib import Path

import click
import pytest
from helpers import MODEL, MODEL_PY, SPEC, SPEC_PY, cli_runner, make_patch, patched_spec, pip_install, write_library
from packaging.specifiers import SpecifierSet

from patchkit._target import guard as target_guard
from patchkit.base import usercache
from patchkit.base.enums import SelectionKind
from patchkit.base.errors import BadInput
from patchkit.base.options import Options
from patchkit.distinfo import installed_record
from patchkit.distinfo import record as record_mod
from patchkit.engine import guard as guard_mod
from patchkit.engine import operations, transaction
from patchkit.engine import resolve as resolve_mod
from patchkit.series import library


def _set_of(tmp_path, ranges: list[str], upstream: str | None = None):
    lines = ['name = "ranges"']
    if upstream:
        lines.append(f'upstream = "{upstream}"')
    for i, versions in enumerate(ranges):
        (tmp_path / f"r{i}").mkdir()
        (tmp_path / f"r{i}" / "series").write_text("")
        lines += ["[[releases]]", f'versions = "{versions}"', f'dir = "r{i}"']
    (tmp_path / "set.toml").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_a_sets_ranges_are_bounded_once_each_not_once_per_pair(tmp_path, monkeypatch):
    ranges = [f"==0.{minor}.0" for minor in range(11, 41)]  # 30 entries: 435 pairs
    bounded = []
    real = library._bounds
    monkeypatch.setattr(library, "_bounds", lambda op, text: bounded.append(text) or real(op, text))
    loaded = library.load_set(_set_of(tmp_path, ranges, upstream=">=0.41.0"))
    assert len(loaded.releases) == 30
    assert len(bounded) == 31  # each entry's one specifier, and upstream's


def test_a_sets_ranges_are_met_once_each_not_once_per_pair_when_none_is_shared(tmp_path, monkeypatch):
    ranges = [f">=0.{minor}.0,<0.{minor + 1}.0" for minor in range(11, 41)]  # 30 entries: 435 pairs
    met = []
    real = library._meet
    monkeypatch.setattr(library, "_meet", lambda first, second: met.append(1) or real(first, second))
    loaded = library.load_set(_set_of(tmp_path, ranges, upstream=">=0.41.0"))
    assert len(loaded.releases) == 30
    # each entry's two specifiers and upstream's one, each entry against upstream, 29 in the sweep
    assert len(met) == 61 + 30 + 29


def test_the_sweep_finds_a_shared_version_where_the_pairs_do(monkeypatch):
    chosen = random.Random(21)
    texts = [">=0.16.0", ">0.16.0", "<0.17.0", "<=0.17.0", "==0.16.*", "~=0.16.1", "==0.17.0", ">=0.18.0", "<0.16.0"]
    for _ in range(400):
        spans = []
        for _ in range(chosen.randint(2, 5)):
            spans.append(library._span(SpecifierSet(",".join(chosen.sample(texts, chosen.randint(1, 2))))))
        spans = [span for span in spans if not library._empty(span)]
        paired = any(not library._empty(library._meet(a, b)) for a, b in itertools.combinations(spans, 2))
        assert library._any_shared(spans) == paired, spans


@pytest.mark.parametrize(
    ("ranges", "upstream", "said"),
    [
        ([">=0.16.0,<0.18.0", "==0.17.1"], None, "entries 1 and 2 cover the same release"),
        ([">=0.16.0,<0.17.0", ">=0.17.0,<0.18.0", "~=0.17.2"], None, "entries 2 and 3 cover the same release"),
        ([">0.17.0,<=0.17.0"], None, "entry 1 `versions` '>0.17.0,<=0.17.0' holds no version"),
        (["==0.16.*"], ">=0.16.1", "`upstream` '>=0.16.1' overlaps [[releases]] entry 1"),
    ],
)
def test_shared_or_empty_ranges_are_still_refused(tmp_path, ranges, upstream, said):
    with pytest.raises(BadInput) as refused:
        library.load_set(_set_of(tmp_path, ranges, upstream))
    assert said in refused.value.message


@pytest.mark.parametrize(
    ("ranges", "upstream"),
    [
        ([">=0.16.0,<0.17.0", ">=0.17.0,<0.18.0", "==0.18.*"], ">=0.19.0"),
        ([">=0.16.0,<0.17.0", ">0.17.0", "==0.17.0"], None),  # where one excludes what the other holds
        (["<0.16.0", ">=0.16.0,<0.17.0", "~=0.17.0"], None),
    ],
)
def test_ranges_that_share_no_release_are_taken(tmp_path, ranges, upstream):
    assert len(library.load_set(_set_of(tmp_path, ranges, upstream)).releases) == len(ranges)


def test_the_trees_record_is_parsed_once_for_every_set_that_asks(tmp_path, monkeypatch):
    dist = tmp_path / "vllm-0.16.0.dist-info"
    dist.mkdir()
    rows = [f"vllm/m{i}.py,sha256=h{i},{i}" for i in range(50)] + ["vllm/md5.py,md5=x,1", "vllm/bare.py,,"]
    rows.append(f"{tmp_path.name}.txt,,")  # bytes of this test's own: no earlier run's parse is kept for them
    (dist / "RECORD").write_text("\n".join(rows) + "\n")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n")
    parsed = []
    real = record_mod.parse_record
    monkeypatch.setattr(record_mod, "parse_record", lambda *a, **k: parsed.append(a) or real(*a, **k))
    first, _ = installed_record(tmp_path, "0.16.0", {"vllm/m1.py", "vllm/md5.py"})
    second, _ = installed_record(tmp_path, "0.16.0", {"vllm/m2.py", "vllm/bare.py", "vllm/gone.py"})
    assert len(parsed) == 1
    assert first is not None and second is not None
    assert (first.hashes, first.untrusted) == ({"vllm/m1.py": "sha256=h1"}, {"vllm/md5.py": "md5"})
    assert (second.hashes, second.untrusted) == ({"vllm/m2.py": "sha256=h2"}, {"vllm/bare.py": ""})


def test_a_set_the_tree_records_is_resolved_without_its_record(run, tmp_path, monkeypatch):
    """run's fast path resolves each applied set: the tree's record says it is patchkit's, so the
    RECORD is not read to ask whether upstream's stock files hold the change."""
    site, scratch = tmp_path / "site", tmp_path / "scratch"
    pip_install(site, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    scratch.mkdir()
    patch = make_patch(scratch, site, {SPEC: patched_spec()})
    library = write_library(tmp_path / "lib", {"0.16.0": [patch]}, versions={"0.16.0": ">=0.16.0"}, upstream=None)
    assert run("apply", "--target", site, "--patches", library, "--no-import").exit_code == 0
    asked = []
    real = resolve_mod.installed_record
    monkeypatch.setattr(resolve_mod, "installed_record", lambda *a, **k: asked.append(a) or real(*a, **k))
    resolved = resolve_mod.resolve(Options(target_dir=str(site), library=str(library)))
    assert resolved.selection.kind == SelectionKind.PATCH and resolved.selection.note is None
    assert asked == []


@pytest.mark.parametrize("step", [operations._Applying, operations._Reverting, transaction._Undoing])
def test_a_commands_steps_have_no_generated_eq_nor_repr(step):
    """Every dataclass method is compiled when its module loads (~0.1 ms each, 231 on a dry run):
    an apply's, a revert's and a rollback's working state is never compared nor printed."""
    assert "__eq__" not in vars(step) and "__repr__" not in vars(step)


def test_a_manifest_is_parsed_once_across_runs_and_a_changed_one_again(tmp_path, monkeypatch):
    """tomllib is pure Python (~0.4 ms a manifest, six a run): the parse of the same text is kept,
    sealed, in the verdicts cache; another text is another key. (Each load here a new process's: none kept.)"""
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(library, "_TOML", {})
    parsed = []
    real = library.tomllib.loads
    monkeypatch.setattr(library.tomllib, "loads", lambda text: parsed.append(text) or real(text))
    (tmp_path / "set").mkdir()
    directory = _set_of(tmp_path / "set", ["==0.16.0", ">=0.17.0,<0.18.0"], upstream=">=0.18.0")
    first = library.load_set(directory)
    library._TOML.clear()
    second = library.load_set(directory)
    assert first == second and len(parsed) == 1
    text = (directory / "set.toml").read_text().replace("==0.16.0", "==0.16.1")
    (directory / "set.toml").write_text(text)
    assert str(library.load_set(directory).releases[0].versions) == "==0.16.1"
    assert len(parsed) == 2


def test_a_toml_file_is_read_back_once_a_process_each_caller_its_own_copy_and_a_changed_one_again(
    tmp_path, monkeypatch
):
    """series.library keeps a TOML text's parse across the commands of a process (cli.percommand.KEPT): the
    library loaded again (each command in process, fleet's agent) is not read back from the verdicts cache."""
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(library, "_TOML", {})
    recalled = []
    recall = library.remembered.recall
    monkeypatch.setattr(library.remembered, "recall", lambda *args: recalled.append(args) or recall(*args))
    path = tmp_path / "m.toml"
    path.write_text("name = 'x'\n[t]\nv = [1, 2]\n[[r]]\nw = 2026-12-03\n")
    first = library.read_toml(path, "manifest")
    first["t"]["v"].append(3)
    first["r"][0]["w"] = None
    assert library.read_toml(path, "manifest") == {"name": "x", "t": {"v": [1, 2]}, "r": [{"w": date(2026, 12, 3)}]}
    assert len(recalled) == 1, "read back from the verdicts cache again"
    path.write_text("name = 'y'\n")
    assert library.read_toml(path, "manifest") == {"name": "y"} and len(recalled) == 2
    path.write_text("name = \n")
    with pytest.raises(BadInput, match="unreadable manifest"):
        library.read_toml(path, "manifest")


def test_a_manifest_json_cannot_hold_is_parsed_each_time(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "dated.toml"
    path.write_text("name = 'x'\nwhen = 2026-12-03\n")
    assert library.read_toml(path, "manifest") == library.read_toml(path, "manifest")
    assert str(library.read_toml(path, "manifest")["when"]) == "2026-12-03"


def test_the_runs_end_takes_the_format_click_read_and_parses_the_command_line_once(tmp_path, monkeypatch):
    parses = []
    real = click.Command.make_context

    def counted(self, info_name, args, parent=None, **extra):
        if info_name != "cli":  # the group's own context
            parses.append((info_name, extra.get("resilient_parsing", False)))
        return real(self, info_name, args, parent=parent, **extra)

    monkeypatch.setattr(click.Command, "make_context", counted)
    invoke = cli_runner()
    said = invoke("status", "--target", tmp_path)  # no vLLM there: an error, said as text
    assert said.exit_code != 0 and "error:" in said.output
    assert parses == [("status", False)]  # click's own parse; the run's end asks no second one
    parses.clear()
    said = invoke("status", "--format", "json", "--target", tmp_path)
    assert said.exit_code != 0 and '"command": "status"' in said.output  # the JSON document, as asked
    assert parses == [("status", False)]


def test_the_user_cache_directory_is_asked_of_platformdirs_once_while_its_environment_stays(tmp_path, monkeypatch):
    asked = []
    real = usercache.platformdirs.user_cache_dir
    monkeypatch.setattr(usercache.platformdirs, "user_cache_dir", lambda name: asked.append(name) or real(name))
    monkeypatch.delenv("PATCHKIT_CACHE_DIR", raising=False)
    monkeypatch.setattr(usercache, "_USER_CACHE", {}, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "one"))
    first = [usercache.cache_dir() for _ in range(5)]
    assert len(asked) == 1 and set(first) == {Path(real("patchkit"))}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "two"))  # another environment: asked again
    assert usercache.cache_dir() == Path(real("patchkit")) and usercache.cache_dir().parent == tmp_path / "two"
    assert len(asked) == 2
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "own"))
    assert usercache.cache_dir() == tmp_path / "own" and len(asked) == 2


@pytest.mark.parametrize(
    "word",
    [
        "NO_DIST_INFO",
        "NOT_BYTECODE",
        "PREFIXED",
        "SEVERAL",
        "SHADOWED",
        "STALE_BYTECODE",
        "SYMLINKED",
        "MORE_SYMLINKED",
    ],
)
def test_the_engines_words_for_the_guards_findings_are_the_guards_own(word):
    """engine.guard spells them so that a dry run need not import the guard (bench/README): the
    findings they match are the guard's."""
    assert getattr(guard_mod, word) == getattr(target_guard, word)
