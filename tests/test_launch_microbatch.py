"""review39 C8: an EAGLE-3 launch vLLM micro-batches (--enable-dbo, or --ubatch-size above 1, with more
than one -dp rank). vLLM runs the target's step in parts and joins the parts' outputs; an EAGLE-3
target returns (hidden states, [aux hidden states]), which 0.11-0.30's joins hand to torch.cat whole
(or its list whole): TypeError after the load (held to vLLM 0.16.0's own UBatchWrapper in
tests/vllm_import/test_microbatch_real.py). preflight said ok; the micro-batching finding now fails it,
as the tree's join, split rules and thresholds say."""

from __future__ import annotations

import pytest
from launch_fixtures import DEEPSEEK_V3, DRAFTER, applied_finding, serve, write_model

WRAPPER = "vllm/v1/worker/gpu_ubatch_wrapper.py"
V2_UTILS = "vllm/v1/worker/gpu/ubatch_utils.py"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
CORE = "vllm/v1/engine/core.py"
PARALLEL = "vllm/config/parallel.py"

# the V1 wrapper as 0.11-0.18 joins (abridged): torch.cat of the parts' outputs
WRAPPER_CAT = """
import torch

class UBatchWrapper:
    def _run_ubatches(self, ubatch_metadata, model):
        results = [(m.context.id, model(m)) for m in ubatch_metadata]
        sorted_results = [value for position, value in sorted(results)]
        result = torch.cat(sorted_results, dim=0)
        return result
"""
# as 0.22-0.30 join: a tuple split into its parts, each part torch.cat whole (a list too)
WRAPPER_PARTS = """
import torch

def _join_parts(sorted_results):
    if sorted_results and isinstance(sorted_results[0], tuple):
        return tuple(torch.cat(parts, dim=0) for parts in zip(*sorted_results))
    return torch.cat(sorted_results, dim=0)

class UBatchWrapper:
    def _run_ubatches(self, ubatch_metadata, model):
        sorted_results = [model(m) for m in ubatch_metadata]
        return _join_parts(sorted_results)
"""
# a V2 runner's join that takes tuples and lists apart, part by part (as 0.34's)
V2_NESTED = """
import torch

def merge_ubatch_outputs(outputs):
    first = outputs[0]
    if isinstance(first, tuple):
        return tuple(merge_ubatch_outputs(list(parts)) for parts in zip(*outputs))
    if isinstance(first, list):
        return [merge_ubatch_outputs(list(parts)) for parts in zip(*outputs)]
    return torch.cat(outputs, dim=0)
"""
V2_FLAT = V2_NESTED.replace("    if isinstance(first, list):\n", "    if first is None:\n")
CORE_MOE_ONLY = """
def run_engine_core(vllm_config, data_parallel):
    if data_parallel and vllm_config.model_config.is_moe:
        return "DPEngineCoreProc"
    vllm_config.parallel_config.data_parallel_size = 1
"""
PARALLEL_DEFAULTS = """
class ParallelConfig:
    enable_dbo: bool = False
    dbo_decode_token_threshold: int = 32
    dbo_prefill_token_threshold: int = Field(default=512, ge=0)
"""
MOE = {**DEEPSEEK_V3, "n_routed_experts": 256}
DBO = ("-dp", "8", "--enable-expert-parallel", "--all2all-backend", "deepep_low_latency", "--enable-dbo")
THRESHOLDS_ABOVE = ("--dbo-decode-token-threshold", "5000", "--dbo-prefill-token-threshold", "5000")
STOCK = {WRAPPER: WRAPPER_CAT, CORE: CORE_MOE_ONLY, PARALLEL: PARALLEL_DEFAULTS}


def micro_batching(
    tmp_path, files: dict[str, str | None], *options: str, target=MOE, env=(), drafter=DRAFTER
) -> dict | None:
    """The micro-batching finding (None: none) of preflight on a 0.16.0 stand-in tree applied, with
    `files` written into it (None: left out), of an EAGLE-3 launch with `options`."""
    command = ["env", *env, *serve(write_model(tmp_path / "tgt", target), write_model(tmp_path / "dr", drafter))]
    return applied_finding(tmp_path, files, [*command, *options], "micro-batching")


@pytest.mark.parametrize(
    ("wrapper", "options", "said", "handed"),
    [
        (WRAPPER_CAT, DBO, "--enable-dbo with -dp 8", "torch.cat()s the parts' outputs"),
        (WRAPPER_CAT, ("-dp", "2", "--ubatch-size", "3"), "--ubatch-size 3 with -dp 2", "torch.cat()s"),
        (WRAPPER_PARTS, DBO, "--enable-dbo with -dp 8", "its _join_parts() hands torch.cat a list"),
        (WRAPPER_CAT, (*DBO, "--max-num-batched-tokens", "4096", "--dbo-prefill-token-threshold", "8192"), "", ""),
    ],
)
def test_a_split_eagle3_target_whose_join_takes_no_tuple_fails(tmp_path, wrapper, options, said, handed):
    found = micro_batching(tmp_path, {**STOCK, WRAPPER: wrapper}, *options)
    assert found is not None and found["result"] == "fail", found
    assert said in found["message"] and handed in found["message"], found
    assert "raises TypeError there, after the load" in found["message"], found
    given = "--ubatch-size 3" if "--ubatch-size" in options else "--enable-dbo"
    assert found["fix"] == f"drop {given}: vLLM then runs each batch whole", found


@pytest.mark.parametrize(
    ("options", "target"),
    [
        (("-dp", "1", "--enable-dbo"), MOE),  # one -dp rank: vLLM never splits
        (("-dp", "8"), MOE),  # no --enable-dbo
        ((*DBO, "--no-enable-dbo"), MOE),
        (("-dp", "2", "--ubatch-size", "1"), MOE),
        (DBO, {**DEEPSEEK_V3, "n_routed_experts": 0}),  # dense: DP ranks apart
        ((*DBO, *THRESHOLDS_ABOVE, "--max-num-batched-tokens", "4096"), MOE),  # no batch reaches a threshold
    ],
)
def test_a_launch_vllm_never_splits_has_no_finding(tmp_path, options, target):
    assert micro_batching(tmp_path, STOCK, *options, target=target) is None


def test_a_join_that_takes_tuples_and_lists_apart_passes(tmp_path):
    found = micro_batching(tmp_path, {**STOCK, WRAPPER: None, V2_UTILS: V2_NESTED}, *DBO)
    assert found is not None and found["result"] == "pass", found
    assert "its merge_ubatch_outputs() joins tuples and lists" in found["message"], found
    flat = micro_batching(tmp_path / "flat", {**STOCK, WRAPPER: None, V2_UTILS: V2_FLAT}, *DBO)
    assert flat is not None and flat["result"] == "fail" and "hands torch.cat a list" in flat["message"], flat


@pytest.mark.parametrize(
    ("env", "result"),
    [((), "cannot judge"), (("VLLM_USE_V2_MODEL_RUNNER=1",), "pass"), (("VLLM_USE_V2_MODEL_RUNNER=0",), "fail")],
)
def test_runners_whose_joins_differ_are_judged_by_the_one_picked(tmp_path, env, result):
    files = {**STOCK, V2_UTILS: V2_NESTED, V2_RUNNER: "from vllm.v1.worker.gpu.ubatch_utils import UBatchRunner\n"}
    found = micro_batching(tmp_path, files, *DBO, env=env)
    assert found is not None and found["result"] == result, found
    if result == "cannot judge":
        assert "vLLM picks its V1 or V2 model runner" in found["message"], found
        assert (
            found["fix"]
            == "set VLLM_USE_V2_MODEL_RUNNER=0 (V1) or =1 (V2) in the launch, or drop --enable-dbo: vLLM then runs each batch whole"
        ), found


def test_a_v2_runner_picked_that_splits_nothing_passes(tmp_path):
    found = micro_batching(
        tmp_path, {**STOCK, V2_RUNNER: "class GPUModelRunner: ...\n"}, *DBO, env=("VLLM_USE_V2_MODEL_RUNNER=1",)
    )
    assert found is not None and found["result"] == "pass" and "splits no batch here" in found["message"], found


@pytest.mark.parametrize(
    ("files", "options", "said"),
    [
        ({WRAPPER: None}, DBO, "the tree has no vllm/v1/worker/gpu_ubatch_wrapper.py"),
        ({WRAPPER: "class UBatchWrapper:\n    def run(self, sorted_results):\n        return sorted_results\n"}, DBO,
         "joins the parts in a way patchkit does not read"),
        ({}, (*DBO, "--dbo-decode-token-threshold", "4000", "--dbo-prefill-token-threshold", "9000"),
         "depends on the batch size vLLM picks"),
        ({PARALLEL: None}, (*DBO, "--max-num-batched-tokens", "16"), "defaults are not read"),
    ],
)  # fmt: skip
def test_what_the_tree_or_launch_does_not_say_cannot_be_judged(tmp_path, files, options, said):
    found = micro_batching(tmp_path, {**STOCK, **files}, *options)
    assert found is not None and found["result"] == "cannot judge" and said in found["message"], found
    assert (
        found["fix"].endswith("drop --enable-dbo: vLLM then runs each batch whole")
        or "--max-num-batched-tokens" in found["fix"]
        or "--dbo-decode-token-threshold" in found["fix"]
    ), found
    if "the tree has no" in said:
        assert found["fix"].startswith("lay out the whole release (`patchkit fetch "), found
        assert " 0.16.0 --all --dest " in found["fix"], found


def test_a_target_whose_expert_count_is_not_read_cannot_be_judged_where_dense_ranks_run_apart(tmp_path):
    found = micro_batching(tmp_path, STOCK, *DBO, target=DEEPSEEK_V3)  # no n_routed_experts, no transformers
    assert found is not None and found["result"] == "cannot judge", found
    assert "splits only a model with experts" in found["message"], found
    older = micro_batching(tmp_path / "older", {**STOCK, CORE: None}, *DBO, target=DEEPSEEK_V3)  # 0.11-0.13: any model
    assert older is not None and older["result"] == "fail", older


def test_a_drafter_that_takes_no_aux_hidden_states_has_no_finding(tmp_path):
    """eagle_config's use_aux_hidden_state false (nvidia's gpt-oss Eagle3-v2 heads): vLLM asks the target for
    no aux layers, and its forward returns the hidden states alone, which torch.cat joins."""
    drafter = {**DRAFTER, "eagle_config": {"use_aux_hidden_state": False}}
    assert micro_batching(tmp_path, STOCK, *DBO, drafter=drafter) is None
    said = micro_batching(
        tmp_path / "on", STOCK, *DBO, drafter={**DRAFTER, "eagle_config": {"use_aux_hidden_state": True}}
    )
    assert said is not None and said["result"] == "fail", said
