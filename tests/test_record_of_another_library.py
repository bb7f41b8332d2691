"""A record of a set the library at hand does not have (applied from another library, or planted in
.patchkit/state.json): status and verify name it, a dry run of revert names its files and set, and
revert refuses to write back an original only that record vouches for (vLLM's RECORD lists other
bytes there) unless --force, which keeps a copy of what it replaces."""

from __future__ import annotations

import hashlib
import json
import shutil

from helpers import record_rows, run_cli, run_cli_read_only, run_cli_writing
from launch_fixtures import write_eagle3_setup

PLANTED = b"print('planted by a record nobody wrote')\n"
FILE = "vllm/__init__.py"


def _planted(tmp_path):
    """A stock tree (vLLM's RECORD true) whose record holds set `ghost` of a library that is gone,
    naming PLANTED as the original of FILE."""
    tree, library = write_eagle3_setup(tmp_path)
    info = tree / "vllm-0.16.0.dist-info"
    (info / "RECORD").write_text(record_rows(tree, info.name))
    digest = hashlib.sha256(PLANTED).hexdigest()
    (tree / ".patchkit/objects").mkdir(parents=True)
    (tree / ".patchkit/objects" / digest).write_bytes(PLANTED)
    current = hashlib.sha256((tree / FILE).read_bytes()).hexdigest()
    entry = {
        "set": "ghost",
        "library": str(tmp_path / "gone-library"),
        "patches": [],
        "release": "0.16.0",
        "vllm_version": "0.16.0",
        "applied_at": "2026-11-30T00:00:00+00:00",
        "files": {FILE: {"before": digest, "after": current, "mode": 0o644}},
    }
    (tree / ".patchkit/state.json").write_text(json.dumps({"format": 1, "entries": [entry]}))
    return tree, library


def test_status_and_verify_name_a_recorded_set_the_library_lacks(tmp_path):
    tree, library = _planted(tmp_path)
    for verb in ("status", "verify"):
        done = run_cli(verb, "--target", tree, "--patches", library)
        said = " ".join((done.stdout + done.stderr).split())
        assert "the record also holds set ghost (vllm/__init__.py)" in said, said
    document = json.loads(
        run_cli_read_only("status", "--target", tree, "--patches", library, "--format", "json").stdout
    )
    assert any("set ghost" in note for note in document["store_notes"]), document


def test_revert_refuses_an_original_only_the_record_vouches_for_and_its_dry_run_names_it(tmp_path):
    tree, library = _planted(tmp_path)
    before = (tree / FILE).read_bytes()
    for dry in (("--dry-run",), ()):
        done = run_cli_writing("revert", "--target", tree, "--patches", library, *dry)
        said = " ".join(done.stderr.split())
        assert done.returncode == 1 and f"vouches for what revert would put back at {FILE}" in said, said
        assert "the record of set ghost" in said and "--force" in said, said
        assert (tree / FILE).read_bytes() == before
    forced = run_cli_writing("revert", "--target", tree, "--patches", library, "--force")
    assert forced.returncode == 0 and (tree / FILE).read_bytes() == PLANTED, forced.stdout + forced.stderr
    assert "saved under" in forced.stderr, forced.stderr


def test_a_set_applied_from_another_library_is_named_and_its_dry_run_revert_names_files_and_set(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    other = tmp_path / "other-library"
    shutil.copytree(library, other)
    (other / "eagle3").rename(other / "eagle4")
    manifest = other / "eagle4" / "set.toml"
    manifest.write_text(manifest.read_text().replace('name = "eagle3"', 'name = "eagle4"'))
    done = run_cli_read_only("status", "--target", tree, "--patches", other)
    said = " ".join(done.stdout.split())
    assert "the record also holds set eagle3" in said and f"--patches {library} --set eagle3` judges it" in said, said
    dry = run_cli_writing("revert", "--target", tree, "--patches", library, "--dry-run")
    said = " ".join(dry.stdout.split())
    assert dry.returncode == 0 and "would restore 4 file(s): vllm/config/speculative.py" in said, said
    assert "and 1 more (the record of set eagle3)" in said, said
