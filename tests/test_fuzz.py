"""Fuzzing: mutated patches (bytes, line counts, headers) either apply correctly or fail cleanly;
never a crash, never a half-written tree. `git apply` on a copy is the oracle for "correctly"."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import MODEL_PY, SPEC_PY, examples, hunk_header_mutation, lay_out_release, make_patch, snapshot, write_tree
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


@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_small_patches_apply_correctly_or_fail_cleanly(run, small_case, tmp_path_factory, data):
    pristine, raw = small_case
    work = tmp_path_factory.mktemp("f")
    check_one(run, fresh_copy(pristine, work), data.draw(mutations(raw)), work)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
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
@settings(max_examples=examples(1000), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_real_eagle3_patches_apply_correctly_or_fail_cleanly(run, real_case, tmp_path_factory, data):
    pristine, patches = real_case
    raw = data.draw(st.sampled_from(patches))
    work = tmp_path_factory.mktemp("f")
    check_one(run, fresh_copy(pristine, work), data.draw(mutations(raw)), work)


@pytest.fixture(scope="module")
def real_case(tmp_path_factory):
    from patchkit.releases.files import files_for

    tree = tmp_path_factory.mktemp("fuzz-real") / "site"
    lay_out_release("0.16.0", files_for("0.16.0"), tree)
    series = Path(__file__).resolve().parent.parent / "patches" / "eagle3" / "0.16.0"
    return tree, [p.read_bytes() for p in sorted(series.glob("*.patch"))]


# --- the launch-command reader --------------------------------------------------------------------
# Every command line, config file and model config a launch may name gives exit 0, 1, 2 or 4 (never
# 70), within 2 s and 200 MB: preflight in this process, on a small 0.16.0 tree.

LAUNCH_EXITS = {0, 1, 2, 4}


@pytest.fixture(scope="module")
def launch_case(tmp_path_factory):
    from launch_fixtures import DEEPSEEK_V3, DRAFTER, write_eagle3_setup, write_model

    work = tmp_path_factory.mktemp("fuzz-launch")
    tree, library = write_eagle3_setup(work, "0.16.0")
    write_model(work / "target", DEEPSEEK_V3)
    write_model(work / "drafter", DRAFTER)
    (work / "fifo.yaml").parent.mkdir(exist_ok=True)
    os.mkfifo(work / "fifo.yaml")
    (work / "zero.yaml").symlink_to("/dev/zero")
    return work, tree, library


def _deep(draw) -> str:
    depth = draw(st.sampled_from([10, 70, 900, 3000]))
    opening, closing = draw(st.sampled_from([("[", "]"), ('{"a": ', "}")]))
    return opening * depth + "1" + closing * depth


@st.composite
def launch_token(draw, work: Path) -> list[str]:
    from serve_lines import piece

    kind = draw(
        st.sampled_from(["piece", "piece", "text", "bytes", "deep", "digits", "config", "file", "model", "repeated"])
    )
    if kind == "piece":
        return draw(piece())
    if kind == "repeated":  # argparse's option loop is quadratic: 10,000 options took 9 s
        return draw(piece()) * draw(st.sampled_from([500, 1100, 5000, 20_000]))
    if kind == "text":
        return [draw(st.text(max_size=12))]
    if kind == "bytes":
        return [os.fsdecode(draw(st.binary(min_size=1, max_size=12)).replace(b"\0", b"_"))]
    if kind == "deep" and draw(st.booleans()):  # the depth in a dotted key's own keys
        name = draw(st.sampled_from(["--speculative-config", "--hf-overrides"]))
        return [name + ".k" * draw(st.sampled_from([10, 70, 900, 3000])), draw(st.sampled_from(["1", _deep(draw)]))]
    if kind == "deep":
        return [
            draw(st.sampled_from(["--speculative-config", "--hf-overrides", "--hf-overrides.a", "--sc"])),
            _deep(draw),
        ]
    if kind == "digits":
        return ["--speculative-config", '{"num_speculative_tokens": ' + "9" * draw(st.integers(4000, 9000)) + "}"]
    if kind == "config":
        return ["--config", str(work / draw(st.sampled_from(["fifo.yaml", "zero.yaml", "missing.yaml", "c.yml"])))]
    if kind == "file":  # a config file of fuzzed YAML (written before the run)
        return ["--config", "@yaml"]
    return [str(work / draw(st.sampled_from(["target", "drafter", "fifo.yaml", "zero.yaml", "nowhere"])))]


@st.composite
def fuzzed_yaml(draw) -> bytes:
    choice = draw(st.sampled_from(["text", "bomb", "deep", "digits", "bytes"]))
    if choice == "bomb":
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
        return ("model: org/m\nhf-overrides:\n" + "\n".join("  " + line for line in lines) + "\n").encode()
    if choice == "deep":
        depth = draw(st.sampled_from([50, 900, 6000]))
        return ("model: org/m\nx: " + "[" * depth + "]" * depth + "\n").encode()
    if choice == "digits":
        return ("model: org/m\nseed: " + "7" * draw(st.integers(4000, 8000)) + "\n").encode()
    if choice == "bytes":
        return draw(st.binary(max_size=200))
    return draw(st.text(max_size=200)).encode("utf-8", "surrogateescape")


@settings(max_examples=examples(120), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_launch_command_is_read_or_refused_cleanly_in_bounded_time_and_memory(launch_case, data):
    import resource
    import time

    from patchkit.cli.main import run_in_process

    work, tree, library = launch_case
    program = data.draw(st.sampled_from([["vllm", "serve"], ["python3", "-m", "vllm.entrypoints.openai.api_server"]]))
    tokens = [t for part in data.draw(st.lists(launch_token(work), max_size=8)) for t in part]
    if "@yaml" in tokens:
        config = work / "fuzzed.yaml"
        config.write_bytes(data.draw(fuzzed_yaml()))
        tokens = [str(config) if t == "@yaml" else t for t in tokens]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started, spent = time.monotonic(), time.process_time()
    args = ["preflight", "--target", str(tree), "--patches", str(library), "--no-import", "--", *program, *tokens]
    code, _, err = run_in_process(args)
    elapsed, cpu = time.monotonic() - started, time.process_time() - spent
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert code in LAUNCH_EXITS, (tokens, code, err)
    # the work bounded by the CPU it took (the machine's load does not inflate it); a wait on a
    # fifo or a lock takes none, and the wall clock's generous bound catches that
    assert cpu < 2.0 and elapsed < 20.0, (tokens, cpu, elapsed)
    assert grown_mb < 200, (tokens, grown_mb)
