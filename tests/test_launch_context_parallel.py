"""review40a D2: speculative decoding with context parallelism (-dcp/-pcp) and a KV-cache interleave size
above 1. vLLM's check_attention_cp_compatibility asserts, as it sets up the KV cache after the loads, that
every attention layer's backend (the target's and the drafter's) declares
supports_mtp_with_cp_non_trivial_interleave_size; no CUDA backend of 0.13-0.26 does (0.30's flashmla_sparse
does). preflight said ok for EAGLE-3 and MTP alike; the context-parallel finding now fails it."""

from __future__ import annotations

import json

import pytest
from helpers import lay_out_release, run_cli_in_process
from launch_fixtures import DEEPSEEK_V3, DRAFTER, applied_finding, write_model

from patchkit.launch.context_parallel import KINDS

CP_UTILS = "vllm/v1/worker/cp_utils.py"
BACKENDS = "vllm/v1/attention/backends"
# the assert as 0.13-0.34 have it (abridged)
CP_CHECK = """
def check_attention_cp_compatibility(vllm_config):
    interleave_size = vllm_config.parallel_config.cp_kv_cache_interleave_size
    for layer in layers.values():
        if vllm_config.speculative_config is not None and interleave_size > 1:
            assert layer.impl.supports_mtp_with_cp_non_trivial_interleave_size
"""
PLAIN_IMPL = "class Impl:\n    can_return_lse_for_decode: bool = True\n"
TAKING_IMPL = "class Impl:\n    supports_mtp_with_cp_non_trivial_interleave_size: bool = True\n"
MLA = {**DEEPSEEK_V3, "kv_lora_rank": 512}
EAGLE3 = '{"method":"eagle3","model":"DRAFTER","num_speculative_tokens":3}'
MTP = '{"method":"mtp","num_speculative_tokens":1}'
NGRAM = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
STOCK = {
    CP_UTILS: CP_CHECK,
    **{f"{BACKENDS}/{name}.py": PLAIN_IMPL for name in ("flash_attn", "flashinfer", "mla/flashmla", "mla/cutlass_mla")},
}


def context_parallel(tmp_path, files: dict[str, str | None], speculative: str | None, *options: str) -> dict | None:
    """The context-parallel finding (None: none) of preflight on a 0.16.0 stand-in tree applied, with
    `files` written into it (None: left out), of a DeepSeek-V3 (MLA) launch with `options`."""
    target, drafter = write_model(tmp_path / "tgt", MLA), write_model(tmp_path / "dr", DRAFTER)
    command = ["vllm", "serve", str(target), *options]
    if speculative is not None:
        command += ["--speculative-config", speculative.replace("DRAFTER", str(drafter))]
    return applied_finding(tmp_path, files, command, "context-parallel")


@pytest.mark.parametrize(
    ("speculative", "options", "given", "kinds"),
    [
        (EAGLE3, ("-tp", "8", "-dcp", "8", "--cp-kv-cache-interleave-size", "16"), "--cp-kv-cache", "MLA or non-MLA"),
        (MTP, ("-tp", "8", "-dcp", "8", "--dcp-kv-cache-interleave-size", "16"), "--dcp-kv-cache", "MLA"),
        (NGRAM, ("-tp", "8", "-dcp", "4", "--cp-kv-cache-interleave-size", "4"), "--cp-kv-cache", "MLA"),
    ],
)
def test_speculative_decoding_with_an_interleaved_cp_kv_cache_no_backend_takes_fails(
    tmp_path, speculative, options, given, kinds
):
    found = context_parallel(tmp_path, STOCK, speculative, *options)
    assert found is not None and found["result"] == "fail", found
    assert found["message"].startswith(given), found
    assert f"no {kinds} backend here does: it fails after the load" in found["message"], found
    assert found["fix"].startswith(f"drop {given}"), found


@pytest.mark.parametrize(
    ("files", "speculative", "options"),
    [
        (STOCK, EAGLE3, ("-tp", "8", "-dcp", "8")),  # interleave 1
        (STOCK, None, ("-tp", "8", "-dcp", "8", "--cp-kv-cache-interleave-size", "16")),  # no speculative decoding
        (STOCK, EAGLE3, ("-tp", "8", "--cp-kv-cache-interleave-size", "16")),  # no context parallelism
        ({**STOCK, CP_UTILS: "def check_attention_cp_compatibility(c):\n    pass\n"}, MTP,
         ("-tp", "8", "-dcp", "8", "--cp-kv-cache-interleave-size", "16")),  # a tree without the assert
    ],
)  # fmt: skip
def test_a_launch_that_never_reaches_the_assert_has_no_finding(tmp_path, files, speculative, options):
    assert context_parallel(tmp_path, files, speculative, *options) is None


def test_a_backend_that_declares_the_support_leaves_it_to_the_gpu(tmp_path):
    files = {**STOCK, f"{BACKENDS}/mla/flashmla_sparse.py": TAKING_IMPL}
    found = context_parallel(tmp_path, files, MTP, "-tp", "8", "-dcp", "8", "--cp-kv-cache-interleave-size", "16")
    assert found is not None and found["result"] == "cannot judge", found
    assert "only flashmla_sparse do" in found["message"], found
    # an EAGLE-3 drafter's non-MLA layers still have no such backend: a failure
    found = context_parallel(
        tmp_path / "e", files, EAGLE3, "-tp", "8", "-dcp", "8", "--cp-kv-cache-interleave-size", "16"
    )
    assert found is not None and found["result"] == "fail" and "no non-MLA backend" in found["message"], found


def test_a_tree_without_the_backend_files_cannot_judge(tmp_path):
    found = context_parallel(
        tmp_path, {CP_UTILS: CP_CHECK}, EAGLE3, "-tp", "8", "-dcp", "8", "--cp-kv-cache-interleave-size", "16"
    )
    assert found is not None and found["result"] == "cannot judge", found
    assert "the tree has no MLA attention backend files" in found["message"], found


@pytest.mark.release
@pytest.mark.parametrize(("release", "fails"), [("0.13.0", True), ("0.16.0", True), ("0.30.0", True)])
def test_the_real_files_of_a_release_decide_it(tmp_path, release, fails):
    """The release's own cp_utils.py and CUDA backends (fetched with patchkit's fetcher): no backend of
    0.13-0.26 declares the support; 0.30's flashmla_sparse does, which serves no EAGLE-3 drafter's layers."""
    paths = [CP_UTILS, *(f"{BACKENDS}/{name}.py" for kind in KINDS.values() for name in kind)]
    site = lay_out_release(release, sorted(paths), tmp_path / "site")
    target, drafter = write_model(tmp_path / "tgt", MLA), write_model(tmp_path / "dr", DRAFTER)
    command = ["vllm", "serve", str(target), "-tp", "8", "-dcp", "8", "--cp-kv-cache-interleave-size", "16"]
    command += ["--speculative-config", EAGLE3.replace("DRAFTER", str(drafter))]
    done = run_cli_in_process("preflight", "--target", site, "--no-import", "--format", "json", "--", *command)
    found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "context-parallel"]
    assert [f["result"] for f in found] == (["fail"] if fails else []), done.stdout
