"""Fuzzing: mutated patches (bytes, line counts, headers) either apply correctly or fail cleanly;
never a crash, never a half-written tree. `git apply` on a copy is the oracle for "correctly"."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import MODEL_PY, SPEC_PY, hunk_header_mutation, make_patch, snapshot, write_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"


@st.composite
def mutations(draw, raw: bytes) -> bytes:
    lines = raw.split(b"\n")
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(
            st.sampled_from(
                ["flip", "insert", "delete", "counts", "drop-line", "dup-line", "header", "hunk-header", "truncate"]
            )
        )
        blob = b"\n".join(lines)
        if kind == "flip" and blob:
            at = draw(st.integers(0, len(blob) - 1))
            blob = blob[:at] + bytes([draw(st.integers(0, 255))]) + blob[at + 1 :]
        elif kind == "insert":
            at = draw(st.integers(0, len(blob)))
            blob = blob[:at] + draw(st.binary(min_size=1, max_size=8)) + blob[at:]
        elif kind == "delete" and blob:
            at = draw(st.integers(0, len(blob) - 1))
            blob = blob[:at] + blob[at + draw(st.integers(1, 16)) :]
        elif kind == "counts":
            headers = [i for i, line in enumerate(lines) if line.startswith(b"@@ ")]
            if headers:
                i = draw(st.sampled_from(headers))
                number = draw(st.integers(0, 60))
                lines[i] = re.sub(rb"\d+", str(number).encode(), lines[i], count=draw(st.integers(1, 4)))
                blob = b"\n".join(lines)
        elif kind in ("drop-line", "dup-line") and lines:
            i = draw(st.integers(0, len(lines) - 1))
            lines = lines[:i] + lines[i + 1 :] if kind == "drop-line" else lines[: i + 1] + lines[i:]
            blob = b"\n".join(lines)
        elif kind == "header":
            heads = [i for i, line in enumerate(lines) if line.startswith((b"---", b"+++", b"diff --git"))]
            if heads:
                i = draw(st.sampled_from(heads))
                lines[i] = draw(
                    st.sampled_from(
                        [
                            b"--- /dev/null",
                            b"+++ /dev/null",
                            b"--- a/vllm/other.py",
                            b"+++ b/../x.py",
                            b"diff --git a/x b/y",
                            b"",
                            b"+++ b/vllm/",
                        ]
                    )
                )
                blob = b"\n".join(lines)
        elif kind == "hunk-header":
            blob = draw(hunk_header_mutation(blob))
        elif kind == "truncate":
            blob = blob[: draw(st.integers(0, len(blob)))]
        lines = blob.split(b"\n")
    return b"\n".join(lines)


def git_apply_result(tree: Path, patch: Path, work: Path) -> dict[str, bytes] | None:
    """What git makes of the same patch on a copy, or None when it refuses."""
    copy = work / "git-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(tree, copy, ignore=shutil.ignore_patterns(".patchkit"))
    done = subprocess.run(["git", "apply", "--unsafe-paths", str(patch)], cwd=copy, capture_output=True)
    return snapshot(copy) if done.returncode == 0 else None


def fresh_copy(pristine: Path, work: Path) -> Path:
    """Every example starts from the stock tree, whatever the one before it did."""
    tree = work / "site"
    shutil.copytree(pristine, tree)
    return tree


def check_one(run, tree: Path, raw: bytes, work: Path) -> None:
    patch = work / "fuzzed.diff"
    patch.write_bytes(raw)
    stock = snapshot(tree)
    result = run("apply", "--target", tree, "--patch", patch)
    assert result.exit_code in (0, 1, 2), result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    if result.exit_code != 0:
        assert snapshot(tree) == stock
        return
    patched = snapshot(tree)
    expected = git_apply_result_from_stock(stock, tree, patch, work)
    if expected is not None and patched != stock:
        assert patched == expected
    reverted = run("revert", "--target", tree, "--patch", patch)
    assert reverted.exit_code == 0, reverted.output
    assert snapshot(tree) == stock


def git_apply_result_from_stock(stock: dict[str, bytes], tree: Path, patch: Path, work: Path):
    base = work / "git-base"
    shutil.rmtree(base, ignore_errors=True)
    for rel, data in stock.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(data)
    return git_apply_result(base, patch, work)


@pytest.fixture(scope="module")
def small_case(tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz-small")
    tree = write_tree(work / "site")
    raw = make_patch(
        work,
        tree,
        {
            SPEC: SPEC_PY.replace('"qwen",\n', '"qwen",\n    "deepseek",\n'),
            MODEL: MODEL_PY.replace("return x", "return x + 1"),
            "vllm/extra.py": "EXTRA = True\n",
        },
    )
    return tree, raw


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_small_patches_apply_correctly_or_fail_cleanly(run, small_case, tmp_path_factory, data):
    pristine, raw = small_case
    work = tmp_path_factory.mktemp("f")
    check_one(run, fresh_copy(pristine, work), data.draw(mutations(raw)), work)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_hunk_header_git_calls_corrupt_is_refused_and_only_such_a_one(run, small_case, tmp_path_factory, data):
    pristine, raw = small_case
    work = tmp_path_factory.mktemp("h")
    mutated = data.draw(hunk_header_mutation(raw))
    git_check = subprocess.run(["git", "apply", "--check", "-"], input=mutated, cwd=pristine, capture_output=True)
    tree = fresh_copy(pristine, work)
    check_one(run, tree, mutated, work)  # applies and reverts, or fails cleanly
    verdict = run("apply", "--target", tree, "--patch", work / "fuzzed.diff")
    assert (verdict.exit_code != 0) == (git_check.returncode != 0), (verdict.output, git_check.stderr)
    if b"corrupt patch" in git_check.stderr:
        assert verdict.exit_code == 2 and "malformed diff" in verdict.output, verdict.output


@pytest.mark.slow
@pytest.mark.release
@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_real_eagle3_patches_apply_correctly_or_fail_cleanly(run, real_case, tmp_path_factory, data):
    pristine, patches = real_case
    raw = data.draw(st.sampled_from(patches))
    work = tmp_path_factory.mktemp("f")
    check_one(run, fresh_copy(pristine, work), data.draw(mutations(raw)), work)


@pytest.fixture(scope="module")
def real_case(tmp_path_factory):
    from patchkit.fetch import release_tree
    from patchkit.release_files import files_for, lay_out

    tree = tmp_path_factory.mktemp("fuzz-real") / "site"
    lay_out(release_tree("0.16.0", files_for("0.16.0")), str(tree))
    series = Path(__file__).resolve().parent.parent / "patches" / "eagle3" / "0.16.0"
    return tree, [p.read_bytes() for p in sorted(series.glob("*.patch"))]
