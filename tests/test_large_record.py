"""A record naming thousands of files (a hostile state.json, each entry valid) costs status, verify
and the launch guard work linear in the files, not their product with the guard's problems; one
naming more than patchkit ever records is damaged, to the commands and to the guard. Counted, not timed: the guard's problems (and the guard's own paths) are
strings that count the comparisons made of them, and each test holds the count to a few per file.
bench/bench.py's `large-record` row measures the time at n and 4n files."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from helpers import (
    EAGLE_MODEL,
    MODEL,
    SPEC,
    make_patch,
    patched_spec,
    record_created,
    run_cli_judged,
    snapshot,
    write_library,
)

import patchkit._target.guard as target_guard
import patchkit.engine.inspection as inspection
import patchkit.engine.operations as operations
import patchkit.store.state as state_module
from patchkit.cli.ui.plan import offsets_note
from patchkit.store.state import MAX_RECORDED_FILES

FILES = 9_000  # under the most a record may name (store.state.MAX_RECORDED_FILES)
CREATED = "vllm/zz/made_{}.py"  # a created file the record names, absent from the tree


class TooMany(AssertionError):
    """More comparisons than a linear look-up makes: the work is the product of two lists."""


class Counted(str):
    """A string counting the comparisons made of it (==, startswith) on a shared budget."""

    left: ClassVar[list[int]] = [0]

    def __eq__(self, other: object) -> bool:
        spend()
        return str.__eq__(self, other)

    __hash__ = str.__hash__

    def startswith(self, *args, **kwargs) -> bool:
        spend()
        return str.startswith(self, *args, **kwargs)


def spend() -> None:
    """One comparison, off the budget."""
    Counted.left[0] -= 1
    if Counted.left[0] < 0:
        raise TooMany("more comparisons than a few per recorded file")


@pytest.fixture
def budget():
    """A budget of comparisons, a few per recorded file; spent by Counted strings."""
    Counted.left[0] = 8 * FILES
    yield Counted.left
    Counted.left[0] = 0


def record_many(tree: Path, count: int = FILES) -> None:
    """The applied tree's record, with `count` created files more in its first entry (none on disk)."""
    record_created(tree, [CREATED.format(i) for i in range(count)])


@pytest.fixture
def applied(run, tree, open_library) -> Path:
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    record_many(tree)
    return tree


def test_status_of_a_record_of_many_files_compares_each_problem_a_few_times(
    run, applied, open_library, budget, monkeypatch
):
    real = inspection.launch_verdict

    def counted(root, state):
        verdict = real(root, state)
        verdict.problems = [Counted(problem) for problem in verdict.problems]
        return verdict

    monkeypatch.setattr(inspection, "launch_verdict", counted)
    for command in ("status", "verify"):
        done = run(command, "--target", applied, "--patches", open_library, "--format", "json")
        assert done.exit_code == 1, done.output
        assert CREATED.format(FILES - 1) in done.output  # the guard's refusal, said
    assert budget[0] >= 0


def test_the_guard_judges_a_record_of_many_files_comparing_each_path_a_few_times(applied, budget, monkeypatch):
    real = target_guard._differing

    def counted(site, files):
        return [(Counted(rel), actual, Counted(problem)) for rel, actual, problem in real(site, files)]

    monkeypatch.setattr(target_guard, "_differing", counted)
    verdict = target_guard.judge(str(applied))
    assert len(verdict.problems) == FILES
    assert verdict.problems[0] == CREATED.format(0) + " is gone, as before patchkit created it"
    assert CREATED.format(FILES - 1) in verdict.stock_again
    assert budget[0] >= 0


def test_the_guards_problems_are_each_said_once_in_the_order_found(applied, monkeypatch):
    real = target_guard._differing

    def twice(site, files):  # each refusal found twice, as two readers of one file would
        found = real(site, files)
        return [*found, *found]

    monkeypatch.setattr(target_guard, "_differing", twice)
    problems = target_guard.judge(str(applied)).problems
    assert problems == [
        CREATED.format(i) + " is gone, as before patchkit created it"
        for i in sorted(range(FILES), key=lambda i: CREATED.format(i))
    ]


SETS = 250  # under the most sets a record may hold


def record_many_sets(tree: Path, count: int = SETS) -> None:
    """The applied tree's record, with `count` sets more (copies of its first, other names), each
    recording one created file (none on disk)."""
    path = tree / ".patchkit" / "state.json"
    data = json.loads(path.read_text())
    first = data["entries"][0]
    for i in range(count):
        files = {CREATED.format(i): {"after": "ab" * 32, "before": None, "mode": 0o644}}
        data["entries"].append({**first, "set": f"other-{i}", "files": files})
    path.write_text(json.dumps(data))


def counting(monkeypatch, module, name: str) -> list[int]:
    """Each call of module.name counted."""
    calls, real = [0], getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_status_of_a_record_of_many_sets_reads_the_library_and_the_records_a_few_times(
    run, tree, open_library, monkeypatch
):
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    record_many_sets(tree)
    libraries = counting(monkeypatch, inspection, "load_library")
    records = counting(monkeypatch, operations, "listings")
    done = run("status", "--target", tree, "--patches", open_library, "--format", "json")
    assert done.exit_code == 1, done.output
    assert f"other-{SETS - 1}" in done.output  # its refused file's fix names it
    assert libraries[0] <= 10
    assert records[0] <= 10


def test_the_guard_reads_the_installed_version_once_for_a_record_of_many_sets(run, tree, open_library, monkeypatch):
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    record_many_sets(tree)
    read = counting(monkeypatch, target_guard, "installed_vllm_version")
    verdict = target_guard.judge(str(tree))
    assert len(verdict.problems) == SETS
    assert read[0] <= 2


class CountedInt(int):
    """An integer counting the equality tests made of it on Counted's budget."""

    def __eq__(self, other: object) -> bool:
        spend()
        return int.__eq__(self, other)

    __hash__ = int.__hash__


def test_the_offsets_of_a_file_of_many_hunks_are_told_apart_in_linear_work(budget):
    placements = [SimpleNamespace(offset=CountedInt(i + 1)) for i in range(FILES)]
    assert offsets_note(placements) == f"{FILES} of {FILES} at an offset (+1, +2, +3, \u2026)"
    assert budget[0] >= 0


def test_a_record_of_more_files_than_patchkit_records_is_damaged_to_the_commands_and_the_guard(
    run, applied, open_library
):
    record_many(applied, MAX_RECORDED_FILES)  # more than the most, with the set's own files
    done = run_cli_judged("status", "--target", applied, "--patches", open_library)
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert "is damaged (it records" in said and f"at most {MAX_RECORDED_FILES:,}" in said, said
    assert "move it aside" in said and "patchkit revert" in said, said
    assert "more than patchkit records" in " ".join(target_guard.find_problems(str(applied)))
    assert target_guard._MAX_RECORDED_FILES == MAX_RECORDED_FILES


def test_apply_never_writes_a_record_larger_than_patchkit_reads_back(tree, open_library, monkeypatch, run):
    stock = snapshot(tree)
    monkeypatch.setattr(state_module, "MAX_RECORDED_FILES", 1)  # the set's two files are more
    done = run("apply", "--target", tree, "--patches", open_library)
    assert done.exit_code == 2, done.output
    assert "would be larger than patchkit records: it records 2 files" in " ".join(done.output.split())
    assert snapshot(tree) == stock and not (tree / ".patchkit" / "state.json").exists()


def test_status_of_several_sets_runs_the_guards_check_once(run, tree, scratch, monkeypatch):
    spec = make_patch(scratch, tree, {SPEC: patched_spec()})
    model = make_patch(scratch, tree, {MODEL: EAGLE_MODEL})
    library = write_library(scratch / "lib", {"0.16.0": [spec]}, name="first")
    write_library(library, {"0.16.0": [model]}, name="second")
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    record_many(tree, 1000)  # the guard refuses it, and its check is the most of status's work
    judged = counting(monkeypatch, target_guard, "judge")
    done = run("status", "--target", tree, "--patches", library)
    assert done.exit_code == 1 and "set      first" in done.output and "set      second" in done.output, done.output
    assert judged[0] == 1
