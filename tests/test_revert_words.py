"""What revert and status say of a vLLM installed from a patched wheel (`patchkit wheel`), and of a
record a hotfix or a planted `after` no longer matches: true words, and the command that follows.
A patched wheel's RECORD lists its patched files, so it proves no file stock."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

from helpers import run_cli_judged

from patchkit.base.errors import Drift, drift_refused

from helpers import (  # isort: skip
    MODEL,
    MODEL_PY,
    OFFLINE,
    SPEC,
    SPEC_PY,
    STOCK_FILES,
    install,
    make_patch,
    record_rows,
    patched_spec,
    run_cli,
    run_cli_writing,
    snapshot,
    stock_files_fetched,
    write_library,
    write_tree,
    write_wheel,
)

VERSION = "0.16.0"
MODEL_FIXED = MODEL_PY + "\nMAX_DRAFT = 4  # the other set's change\n"


def two_set_library(tmp: Path) -> Path:
    """Set `demo` patches spec.py, set `other` patches model.py."""
    clean = write_tree(tmp / "clean", VERSION)
    library = write_library(tmp / "lib", {VERSION: [make_patch(tmp, clean, {SPEC: patched_spec()})]})
    return write_library(library, {VERSION: [make_patch(tmp, clean, {MODEL: MODEL_FIXED})]}, name="other")


def wheel_install(tmp: Path, library: Path, *label: str) -> Path:
    """`patchkit wheel --set demo` (with `label`: e.g. --local-label corp1), installed: its site."""
    stock_wheel = write_wheel(tmp / "in")  # published: the cache holds its release
    stock_files_fetched({p: d for p, d in STOCK_FILES.items() if p.startswith("vllm/")})
    built = run_cli("wheel", stock_wheel, "--out", tmp / "out", "--patches", library, "--set", "demo", *label)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "out").iterdir()
    return install(wheel, tmp / "prefix")


def test_revert_of_another_set_on_a_patched_wheel_never_calls_the_tree_stock(tmp_path):
    """`revert --set other` on a tree installed from a wheel of `demo` (no apply): spec.py is the
    wheel's patched file, so "the tree is stock (its files are as vLLM's RECORD lists them)" was
    false. It says the install is a patched wheel's, and the revert that undoes it."""
    library = two_set_library(tmp_path)
    for n, label in enumerate(((), ("--local-label", "corp1"))):
        site = wheel_install(tmp_path / f"w{n}", library, *label)
        done = run_cli_writing("revert", "--target", site, "--patches", library, "--set", "other", env=OFFLINE)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "stock (" not in done.stdout and "is stock" not in done.stdout, done.stdout
        assert "patched wheel" in done.stdout, done.stdout
        assert f"`patchkit revert --target {site} --patches {library}`" in done.stdout, done.stdout
        assert patched_spec() == (site / SPEC).read_text()


def test_a_patched_wheels_install_whose_provenance_is_lost_names_the_stock_release(tmp_path):
    """A `+patchkit.demo` install whose patchkit.json is gone: nothing reverts it, and the stock
    files come from the release's own wheel, not from the patched version it names."""
    site = wheel_install(tmp_path, two_set_library(tmp_path))
    (dist_info,) = site.glob("vllm-*.dist-info")
    (dist_info / "patchkit.json").unlink()
    done = run_cli_writing("revert", "--target", site, "--patches", tmp_path / "lib", "--set", "other", env=OFFLINE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is stock" not in done.stdout and f"vllm=={VERSION}`" in done.stdout, done.stdout


def applied_tree(tmp: Path, library: Path) -> Path:
    """A stock install (a RECORD true to its files) with set `demo` applied."""
    tmp.mkdir(exist_ok=True)
    site = write_tree(tmp / "site", VERSION)
    dist = f"vllm-{VERSION}.dist-info"
    (site / dist / "RECORD").write_text(record_rows(site, dist))
    done = run_cli_writing(
        "apply", "--target", site, "--patches", library, "--set", "demo", "--no-import", "--no-guard"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site


def test_a_dry_run_names_the_copies_the_revert_keeps(tmp_path):
    """`revert --dry-run --force` of an applied tree with a hotfix, and of a patched wheel's install
    with one: the dry run names the file the revert keeps a copy of and where (it said nothing), and
    the revert then keeps exactly that one there; --format json lists them."""
    library = two_set_library(tmp_path)
    for site in (applied_tree(tmp_path, library), wheel_install(tmp_path / "w", library)):
        with (site / SPEC).open("a") as spec:
            spec.write("# hotfix: keep the retry loop\n")
        common = ("revert", "--target", site, "--patches", library, "--force")
        done = run_cli_judged(*common, "--dry-run", env=OFFLINE)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"would keep a copy of {SPEC} under {site / '.patchkit' / 'saved'}/" in done.stdout, done.stdout
        said = json.loads(run_cli_judged(*common, "--dry-run", "--format", "json", env=OFFLINE).stdout)
        assert said["would_keep"] == [SPEC], said
        done = run_cli_judged(*common, env=OFFLINE)
        assert done.returncode == 0, done.stdout + done.stderr
        (kept,) = (site / ".patchkit" / "saved").iterdir()
        assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file()) == [SPEC]


def test_status_says_a_file_the_record_calls_patched_was_edited_since_apply(tmp_path):
    """A hotfix after apply, and the record's "after" then made to name it (by hand, or planted):
    status said nothing (the file matches its record). It says the file was edited since apply and
    that revert keeps a copy; a plain apply gets no such note."""
    library = two_set_library(tmp_path)
    site = applied_tree(tmp_path, library)
    common = ("status", "--target", site, "--patches", library, "--set", "demo")
    clean = run_cli_judged(*common)
    assert clean.returncode == 0 and "edited since apply" not in clean.stdout, clean.stdout
    with (site / SPEC).open("a") as spec:
        spec.write("# hotfix: keep the retry loop\n")
    record = json.loads((site / ".patchkit" / "state.json").read_text())
    record["entries"][0]["files"][SPEC]["after"] = hashlib.sha256((site / SPEC).read_bytes()).hexdigest()
    (site / ".patchkit" / "state.json").write_text(json.dumps(record))
    done = run_cli_judged(*common)
    assert f"{SPEC}: edited since apply" in done.stdout, done.stdout
    assert f"`patchkit revert --target {site} --patches {library} --set demo` keeps a copy of it" in done.stdout
    notes = json.loads(run_cli_judged(*common, "--format", "json").stdout)["store_notes"]
    assert any(note.startswith(f"{SPEC}: edited since apply") for note in notes), notes


def test_a_refusal_of_several_files_names_each(tmp_path):
    """revert's refusals of several files said the first "(and 1 more)" / "and N more": the others
    were named nowhere. Each is named, one a line: a patched wheel's files edited after the install,
    and originals only a (hand-changed) record vouches for."""
    clean = write_tree(tmp_path / "clean", VERSION)
    library = write_library(
        tmp_path / "lib", {VERSION: [make_patch(tmp_path, clean, {SPEC: patched_spec(), MODEL: MODEL_FIXED})]}
    )
    wheel_site = wheel_install(tmp_path / "w", library)
    site = applied_tree(tmp_path, library)
    record = json.loads((site / ".patchkit" / "state.json").read_text())
    for path in (SPEC, MODEL):
        with (wheel_site / path).open("a") as hotfix:
            hotfix.write("# hotfix: keep the retry loop\n")
        mine = b"# the team's own build of this module\n"
        (site / ".patchkit" / "objects" / hashlib.sha256(mine).hexdigest()).write_bytes(mine)
        record["entries"][0]["files"][path]["before"] = hashlib.sha256(mine).hexdigest()
    (site / ".patchkit" / "state.json").write_text(json.dumps(record))
    hotfixed = applied_tree(tmp_path / "h", library)  # edited since the apply
    unrecorded = applied_tree(tmp_path / "u", library)  # and with no record of the apply
    shutil.rmtree(unrecorded / ".patchkit")
    for tree, path in ((t, p) for t in (hotfixed, unrecorded) for p in (SPEC, MODEL)):
        with (tree / path).open("a") as hotfix:
            hotfix.write("# hotfix: keep the retry loop\n")
    said = []
    for where in (wheel_site, site, hotfixed, unrecorded):
        done = run_cli_writing("revert", "--target", where, "--patches", library, "--dry-run", env=OFFLINE)
        assert done.returncode == 1, done.stdout + done.stderr
        listed = [line.split()[0] for line in done.stderr.splitlines() if line.startswith("  ")]
        assert "2 files" in done.stderr and listed == [SPEC, MODEL], done.stderr
        assert "more" not in done.stderr, done.stderr
        said.append(next(line for line in done.stderr.splitlines() if line.startswith("error: ")).split(":")[1])
    assert len(set(said)) == 4, said  # four refusals of their own


def record_names(site: Path, path: str) -> None:
    """The install's record (patchkit.json and pip's RECORD) made to name `path`'s bytes as patched."""
    (dist_info,) = site.glob("vllm-*.dist-info")
    data = (site / path).read_bytes()
    provenance = json.loads((dist_info / "patchkit.json").read_text())
    provenance["files"][path]["patched_sha256"] = hashlib.sha256(data).hexdigest()
    (dist_info / "patchkit.json").write_text(json.dumps(provenance))
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rows = [
        f"{path},sha256={digest},{len(data)}" if row.startswith(f"{path},") else row
        for row in (dist_info / "RECORD").read_text().splitlines()
    ]
    (dist_info / "RECORD").write_text("\n".join(rows) + "\n")


def test_status_judges_a_patched_wheels_file_by_its_series_not_its_records_hash(tmp_path):
    """A patched wheel's install: its own files pass; an edit after the install is drift; a stock
    file is a patch not applied; a hotfix its record was made to name as patched (status said
    `applied`, nothing else) is said: edited since the install, and revert refuses it."""
    library = two_set_library(tmp_path)
    common = ("status", "--target", None, "--patches", library, "--set", "demo")
    site = wheel_install(tmp_path, library)
    status = lambda: run_cli_judged(*(site if a is None else a for a in common))  # noqa: E731
    done = status()
    assert done.returncode == 0 and "edited since" not in done.stdout, done.stdout
    with (site / SPEC).open("a") as spec:
        spec.write("# hotfix: keep the retry loop\n")
    done = status()
    assert done.returncode == 1 and f"{SPEC}: drifted: edited after the patched wheel installed it" in done.stdout
    record_names(site, SPEC)
    done = status()
    said = " ".join(done.stdout.split())
    assert f"{SPEC}: edited since the install" in said, said
    assert f"`patchkit revert --target {site} --patches {library}` refuses to replace it without --force" in said
    refused = run_cli_writing("revert", "--target", site, "--patches", library, env=OFFLINE)
    assert refused.returncode == 1 and f"{SPEC} is not what the wheel's patches make" in refused.stderr
    (site / SPEC).write_bytes(STOCK_FILES[SPEC])
    done = status()
    assert "not-applied" in done.stdout and "edited since" not in done.stdout, done.stdout  # not patched


def test_revert_of_a_local_label_wheel_with_a_set_applied_on_it_calls_the_files_stock(tmp_path):
    """A `--local-label corp1` wheel of demo, `apply` of the other set on it (the guard too), then
    revert: every file back to the release's, and said so; never "N not stock" by the corp1 RECORD,
    which lists the wheel's patched files."""
    library = two_set_library(tmp_path)
    site = wheel_install(tmp_path, library, "--local-label", "corp1")
    common = ("--target", site, "--patches", library)
    assert run_cli_writing("apply", *common, "--no-import").returncode == 0
    done = run_cli_writing("revert", *common, env=OFFLINE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not stock" not in done.stdout and "2 file(s) restored to stock" in done.stdout, done.stdout
    assert {p: d for p, d in snapshot(site).items() if p in STOCK_FILES} == {
        p: d for p, d in STOCK_FILES.items() if p.startswith("vllm/")
    }


def test_one_refusal_names_one_file_in_its_own_words_and_several_each_on_a_line():
    """The refusal plan, unrecorded revert and a patched wheel's revert share: one file is named in
    the caller's words (a path with braces kept as it is), several are counted and then listed one a
    line, with how each changed where the caller says it; the hint is singular or plural to match."""
    one = drift_refused({"a/{x}.py": "deleted"}, lambda path, how: f"{path} was {how}", "unused", restores="the file")
    assert isinstance(one, Drift) and one.message == "a/{x}.py was deleted"
    assert one.hint is not None and one.hint.endswith(" restores the file and keeps a copy of your edit")
    assert "revert --force" in one.hint
    several = drift_refused({"a.py": "edited", "b.py": ""}, lambda *_: "unused", "2 files changed", restores="the file")
    assert several.message == "2 files changed:\n  a.py (edited)\n  b.py"
    assert several.hint is not None and several.hint.endswith(" restores the files and keeps a copy of your edits")


def _vendor_site(tmp: Path, spec: bytes) -> Path:
    """A vLLM 0.16.0 site whose spec.py is `spec`, listed so in its own RECORD (a vendor's build
    of the release, as pip installs it)."""
    site = write_tree(
        tmp / "site", VERSION, {**{p: d for p, d in STOCK_FILES.items() if p.startswith("vllm/")}, SPEC: spec}
    )
    dist = f"vllm-{VERSION}.dist-info"
    (site / dist / "RECORD").write_text(record_rows(site, dist))
    return site


def test_revert_of_a_vendors_file_says_it_is_back_as_its_build_lists_it_not_the_release(tmp_path):
    """A build whose RECORD lists its own spec.py (the release's, plus a vendor's line): apply takes
    it as RECORD proves it; revert puts those bytes back, and where the fetch cache holds the
    published release, says they are not the release's rather than "restored to stock"."""
    write_wheel(tmp_path / "in")  # published: the cache holds the release's RECORD
    clean = write_tree(tmp_path / "clean", VERSION)
    library = write_library(tmp_path / "lib", {VERSION: [make_patch(tmp_path, clean, {SPEC: patched_spec()})]})
    vendor = SPEC_PY.encode() + b"VENDOR_BUILD = True\n"
    for name, spec, said in (
        ("vendor", vendor, "1 file(s) restored as before apply (1 as this build's RECORD lists, not the release's: "),
        ("stock", SPEC_PY.encode(), "1 file(s) restored to stock"),
    ):
        site = _vendor_site(tmp_path / name, spec)
        common = ("--target", site, "--patches", library, "--no-guard")
        applied = run_cli_writing("apply", *common, "--no-import")
        assert applied.returncode == 0, applied.stdout + applied.stderr
        done = run_cli_writing("revert", "--target", site, "--patches", library, env=OFFLINE)
        assert done.returncode == 0 and said in done.stdout, done.stdout + done.stderr
        assert (site / SPEC).read_bytes() == spec
