"""Malformed input from a patch or a library, refused cleanly or shown harmlessly (issue 10, defects 3, 12)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from helpers import (
    SPEC_PY,
    assert_clean_failure,
    make_patch,
    patched_spec,
    run_cli,
    run_cli_judged,
    run_cli_writing,
    snapshot,
    write_library,
    write_tree,
)


def test_a_corrupt_hunk_header_after_a_good_file_is_refused_and_nothing_is_written(tmp_path):
    tree = write_tree(tmp_path / "site")
    model = (tree / "vllm/models/model.py").read_text()
    raw = make_patch(
        tmp_path, tree, {"vllm/config/spec.py": patched_spec(), "vllm/models/model.py": model + "\nLATE = 1\n"}
    )
    lines = raw.split(b"\n")
    second = [i for i, line in enumerate(lines) if line.startswith(b"@@ -")][1]
    lines[second] = lines[second].replace(b" @@", b" @", 1)  # "@@ -a,b +c,d @": git calls it corrupt
    (tmp_path / "bad.patch").write_bytes(b"\n".join(lines))
    before = snapshot(tree)
    done = run_cli_writing("apply", "--target", tree, "--patch", tmp_path / "bad.patch")
    assert_clean_failure(done, 2)
    assert f"bad.patch: malformed diff: line {second + 1}: corrupt hunk header" in done.stderr + done.stdout
    assert snapshot(tree) == before
    assert (tree / "vllm/config/spec.py").read_text() == SPEC_PY


def test_git_quoted_paths_are_unquoted_as_git_apply_does(tmp_path):
    files = {"vllm/ñandú.py": "A = 1\n", 'vllm/models/say "hi".py': "B = 2\n", "vllm/plain.py": "C = 3\n"}
    tree = write_tree(tmp_path / "site", files=files)
    edits = {"vllm/ñandú.py": "A = 10\n", 'vllm/models/say "hi".py': "B = 20\n", "vllm/plain.py": "C = 30\n"}
    raw = make_patch(tmp_path, tree, edits)
    assert b'"b/vllm/\\303\\261and\\303\\272.py"' in raw and b'"b/vllm/models/say \\"hi\\".py"' in raw
    (tmp_path / "quoted.patch").write_bytes(raw)
    by_git = tmp_path / "by-git"
    shutil.copytree(tree, by_git)
    subprocess.run(["git", "apply", str(tmp_path / "quoted.patch")], cwd=by_git, check=True)
    done = run_cli_writing("apply", "--target", tree, "--patch", tmp_path / "quoted.patch")
    assert done.returncode == 0, done.stdout + done.stderr
    assert snapshot(tree) == snapshot(by_git)
    assert (tree / "vllm/ñandú.py").read_text() == "A = 10\n"


def test_a_quoted_path_that_leaves_the_tree_is_refused(tmp_path):
    tree = write_tree(tmp_path / "site")
    raw = b'--- "a/vllm/\\056\\056/x.py"\n+++ "b/vllm/\\056\\056/x.py"\n@@ -1 +1 @@\n-a\n+b\n'
    (tmp_path / "up.patch").write_bytes(raw)
    done = run_cli_writing("apply", "--target", tree, "--patch", tmp_path / "up.patch")
    assert_clean_failure(done, 2)
    assert "unsafe path 'vllm/../x.py'" in done.stderr + done.stdout


HOSTILE = "bump \x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m\x08\x7f"


def test_control_characters_from_a_library_are_shown_escaped_and_kept_exact_in_json(tmp_path):
    tree = write_tree(tmp_path / "site")
    patch = make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()}, header=f"Description: {HOSTILE}\n")
    library = write_library(tmp_path / "lib", {"0.16.0": [patch]})
    manifest = library / "demo/set.toml"
    manifest.write_text(manifest.read_text().replace('"test set"', '"set \\u001b[5mblinking\\rcover"'))
    for args in (["list"], ["status", "-v", "--target", tree]):
        done = run_cli_judged(*args, "--patches", library)
        shown = done.stdout + done.stderr
        assert done.returncode == 0, shown
        assert not any(c in shown for c in "\x1b\x07\r\x08\x7f"), shown
        assert "bump \\x1b]0;owned\\x07\\x1b[2J" in shown and "[0m\\x08\\x7f" in shown
    assert "set \\x1b[5mblinking\\x0dcover" in run_cli("list", "--patches", library).stdout
    as_json = json.loads(run_cli("list", "--patches", library, "--format", "json").stdout)
    assert as_json["sets"][0]["description"] == "set \x1b[5mblinking\rcover"
    assert as_json["sets"][0]["releases"][0]["patches"][0]["description"] == HOSTILE


def test_a_control_character_in_a_file_name_is_shown_escaped_in_the_plan_and_in_errors(tmp_path):
    tree = write_tree(tmp_path / "site", files={"vllm/\x1b[1mbold.py": "A = 1\n"})
    raw = make_patch(tmp_path, tree, {"vllm/\x1b[1mbold.py": "A = 2\n"})
    (tmp_path / "p.patch").write_bytes(raw)
    done = run_cli_writing("apply", "--dry-run", "--target", tree, "--patch", tmp_path / "p.patch")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vllm/\\x1b[1mbold.py" in done.stdout and "\x1b" not in done.stdout + done.stderr
    (tree / "vllm/\x1b[1mbold.py").write_text("A = 3\n")
    done = run_cli_writing("apply", "--target", tree, "--patch", tmp_path / "p.patch")
    assert done.returncode == 1 and "vllm/\\x1b[1mbold.py" in done.stderr, done.stdout + done.stderr
    assert "\x1b" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("manifest", "named"),
    [
        ("", "no name and no releases"),
        ("# only a comment\n", "no name and no releases"),
        ('description = "no name"\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n', "no name"),
        ('name = "lonely"\nsupported = ">=0.11"\n', "no releases"),
        ('name = "x"\nreleases = "0.16.0"\n', "`releases` must be an array"),
        ('name = ["x"]\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n', "`name` must be a string"),
        ('name = "x"\n[[releases]]\nversions = 16\ndir = "0.16.0"\n', "entry 1 needs `versions` and `dir`"),
        ('name = "x"\nreleases = [1]\n', "entry 1 needs `versions` and `dir`"),
        ('name = "x"\n[[releases]]\nversions = "==0.16.0"\ndir = "../../elsewhere"\n', "contains '..'"),
        ('name = "x"\nroots = "vllm"\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n', "`roots` must be"),
        ('name = "x"\nsupported = 11\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n', "`supported` must"),
        # a misspelt field would drop what it declares (a behaviour test, a range) unsaid
        (
            'name = "x"\nbehavior = "b.py"\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n',
            "no field `behavior` (did you mean `behaviour`?)",
        ),
        ('name = "x"\nupstrem = ">=0.17"\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n', "`upstream`?"),
        ('name = "x"\nowner = "me"\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n', "(it takes name,"),
        ('name = "x"\nupstream_fix = "pending"\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n', "a table"),
        (
            'name = "x"\n[upstream_fix]\nstat = "pending"\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n',
            "[upstream_fix] has no key 'stat'",
        ),
        (
            'name = "x"\n[upstream_fix]\npull_request = 1\n[[releases]]\nversions = "==0.16.0"\ndir = "0.16.0"\n',
            "[upstream_fix] `pull_request` must be a string",
        ),
        # files fetched for the behaviour test: paths in the release, and a test to read them
        (
            'name = "x"\nbehaviour_reads = ["vllm/parser/utils.py"]\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`behaviour_reads` names files for a behaviour test: give `behaviour` too",
        ),
        (
            'name = "x"\nbehaviour = "b.py"\nbehaviour_reads = ["../up.py"]\n[[releases]]\nversions = "==0.16.0"\n'
            'dir = "a"\n',
            "`behaviour_reads` entry '../up.py' contains '..' (give paths like vllm/parser/utils.py)",
        ),
        (
            'name = "x"\nbehaviour = "b.py"\nbehaviour_reads = [1]\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`behaviour_reads` entry 1 is not a string",
        ),
        (
            'name = "x"\nbehaviour_reads = "vllm/a.py"\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`behaviour_reads` must be an array",
        ),
        # gates (gate29): files of the set's roots a commit writes last (apply) or first (revert)
        (
            'name = "x"\ngates = "vllm/config/speculative.py"\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`gates` must be an array",
        ),
        (
            'name = "x"\ngates = ["vllm/../up.py"]\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`gates` entry 'vllm/../up.py' contains '..' (give paths like vllm/config/speculative.py)",
        ),
        (
            'name = "x"\ngates = [1]\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`gates` entry 1 is not a string",
        ),
        (
            'name = "x"\ngates = ["setup.py"]\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`gates` entry 'setup.py' is outside the set's roots (vllm)",
        ),
        (
            'name = "x"\ngates = ["vllm/a.py", "vllm/a.py"]\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`gates` names 'vllm/a.py' twice",
        ),
        (
            'name = "x"\ngate = []\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "no field `gate` (did you mean `gates`?)",
        ),
        # the behaviour test is a script the set ships, as `dir` and `behaviour_reads` are inside it
        (
            'name = "x"\nbehaviour = "/bin/true"\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`behaviour` '/bin/true' is absolute",
        ),
        (
            'name = "x"\nbehaviour = "../../x.py"\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`behaviour` '../../x.py' contains '..'",
        ),
        (
            'name = "x"\nlaunch = "/tmp/l.py"\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n',
            "`launch` '/tmp/l.py' is absolute",
        ),
        ('name = "x"\nbehaviour = ""\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n', "`behaviour` '' is empty"),
        # ranges whose series would never be taken: empty, shared by two entries, or upstream's
        (
            'name = "x"\n[[releases]]\nversions = ">=0.16.0,<0.16.0"\ndir = "a"\n',
            "[[releases]] entry 1 `versions` '>=0.16.0,<0.16.0' holds no version",
        ),
        (
            'name = "x"\n[[releases]]\nversions = "==0.15.0"\ndir = "a"\n[[releases]]\nversions = "~=0.15.0"\ndir = "b"\n',
            "[[releases]] entries 1 and 2 cover the same release ('==0.15.0', '~=0.15.0')",
        ),
        (
            'name = "x"\nupstream = ">=0.17.0"\n[[releases]]\nversions = "==0.16.0"\ndir = "a"\n'
            '[[releases]]\nversions = ">0.16.0,<0.18"\ndir = "b"\n',
            "`upstream` '>=0.17.0' overlaps [[releases]] entry 2 ('>0.16.0,<0.18'): upstream wins there",
        ),
    ],
)
def test_a_set_toml_without_a_name_or_releases_or_with_wrong_types_is_refused(tmp_path, manifest, named):
    library = tmp_path / "lib"
    (library / "broken").mkdir(parents=True)
    (library / "broken" / "set.toml").write_text(manifest)
    for args in (["list"], ["status", "--target", write_tree(tmp_path / "site")]):
        done = run_cli_judged(*args, "--patches", library)
        assert_clean_failure(done, 2)
        assert f"manifest {library / 'broken' / 'set.toml'}: " in done.stderr and named in done.stderr, done.stderr


def _library(tmp_path):
    tree = write_tree(tmp_path / "site")
    patch = make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})
    return write_library(
        tmp_path / "lib",
        {"0.15.0": [patch], "0.16.0": [patch]},
        versions={"0.15.0": ">=0.15.0,<0.16.0"},
        upstream=">=0.17.0",
    )


def test_ranges_that_only_meet_at_an_excluded_bound_are_accepted(tmp_path):
    done = run_cli("list", "--patches", _library(tmp_path))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("value", "said"), [('"0.16.0"', "is a directory"), ('"."', "is not a normalized")])
def test_a_behaviour_test_that_names_a_directory_says_so(tmp_path, value, said):
    library = _library(tmp_path)
    manifest = library / "demo" / "set.toml"
    manifest.write_text(f"behaviour = {value}\n" + manifest.read_text())
    done = run_cli("list", "--patches", library)
    assert_clean_failure(done, 2)
    assert said in done.stderr and "does not exist" not in done.stderr, done.stderr


def test_an_unknown_key_in_library_toml_is_refused_with_the_key_named(tmp_path):
    library = _library(tmp_path)
    (library / "library.toml").write_text('oder = ["demo"]\n')
    done = run_cli("list", "--patches", library)
    assert_clean_failure(done, 2)
    assert f"library manifest {library / 'library.toml'}: no key `oder` (did you mean `order`?)" in done.stderr
