"""Opt-in (`make test-vllm`): the micro-batching finding (review39 C8) held to vLLM 0.16.0 itself.
Its own UBatchWrapper._run_ubatches, run on CPU with stand-in micro-batch contexts, joins a model's
tensor outputs and raises TypeError on an EAGLE-3 target's (hidden states, [aux hidden states]):
the join patchkit reads from the same file fails. And the launches patchkit reads as split (its
`_split`) are those vLLM's own parser and ParallelConfig.use_ubatching say use micro-batching with
more than one -dp rank, the thresholds and batch cap read as vLLM reads them."""

from __future__ import annotations

import json
import os

import pytest
from vllm_overlay import ask_vllm, site_packages

from patchkit.launch import microbatch
from patchkit.launch.command import parse

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")
VLLM_VERSION = os.environ.get("VLLM_VERSION", "0.16.0")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

# vLLM's own _run_ubatches with two parts, each a thread; the stand-in context waits on the wrapper's
# barrier as UBatchContext does. A plain model returns a tensor, an EAGLE-3 target (hidden, [aux])
RUN_UBATCHES = """
import json, threading, types, torch
from vllm.v1.worker.gpu_ubatch_wrapper import UBatchWrapper

class Context:
    def __init__(self, number, barrier):
        self.id, self.barrier, self.cpu_wait_event = number, barrier, threading.Event()
    def __enter__(self):
        self.barrier.wait()
        return self
    def __exit__(self, *exc):
        return False

def run(model):
    wrapper = types.SimpleNamespace(ready_barrier=threading.Barrier(3))
    parts = [types.SimpleNamespace(context=Context(n, wrapper.ready_barrier), input_ids=torch.arange(3),
             positions=None, intermediate_tensors=None, inputs_embeds=None) for n in range(2)]
    try:
        joined = UBatchWrapper._run_ubatches(wrapper, parts, model)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return f"{type(joined).__name__} {list(joined.shape)}"

def plain(input_ids, **_):
    return torch.ones(len(input_ids), 4)

def eagle3(input_ids, **_):
    hidden = torch.ones(len(input_ids), 4)
    return hidden, [hidden, hidden, hidden]

print(json.dumps({"plain": run(plain), "eagle3": run(eagle3)}))
"""


def test_the_join_read_fails_where_vllms_own_wrapper_raises():
    source = (site_packages(VLLM_PYTHON) / microbatch.V1_WRAPPER).read_bytes()
    joins, how = microbatch._v1_join(source) or (None, "")
    assert joins is False and "torch.cat()s the parts' outputs" in how, how
    said = ask_vllm(RUN_UBATCHES)
    assert said == {"plain": "Tensor [6, 4]", "eagle3": said["eagle3"]}, said
    assert said["eagle3"].startswith("TypeError: expected Tensor as element 0"), said


# each launch's arguments: vLLM's parser reads them, then its own ParallelConfig.use_ubatching property
# on what it read; "splits" as patchkit's _split reads it: use_ubatching and -dp above 1
READ = """
import json, sys, types
from patchkit._target.engine_config import _force_cpu_platform_when_none, _parsed
_force_cpu_platform_when_none()
from vllm.config import ParallelConfig
from vllm.engine.arg_utils import AsyncEngineArgs
said = []
for arguments in json.loads(sys.argv[1]):
    args = _parsed(AsyncEngineArgs, {"arguments": arguments, "serve": True})
    ubatching = ParallelConfig.use_ubatching.fget(types.SimpleNamespace(enable_dbo=args.enable_dbo, ubatch_size=args.ubatch_size))
    said.append([ubatching and args.data_parallel_size > 1, args.dbo_decode_token_threshold,
                 args.dbo_prefill_token_threshold, args.max_num_batched_tokens])
print(json.dumps(said))
"""


def test_the_launches_read_as_split_are_those_vllm_splits(tmp_path):
    (tmp_path / "dbo.yaml").write_text("enable-dbo: true\ndata-parallel-size: 4\ndbo-prefill-token-threshold: 900\n")
    cases = [
        ["--enable-dbo", "-dp", "2"], ["--enable-dbo", "-dp", "1"], ["--enable-dbo"], ["-dp", "8"],
        ["--enable-dbo", "--no-enable-dbo", "-dp", "2"], ["--ubatch-size", "2", "-dp", "2"],
        ["--ubatch-size", "1", "-dp", "2"], ["--ubatch-size=3", "--data-parallel-size=4"],
        ["--config", str(tmp_path / "dbo.yaml")], ["--config", str(tmp_path / "dbo.yaml"), "-dp", "1"],
        ["--enable-dbo", "-dp", "2", "--dbo-decode-token-threshold", "64", "--max-num-batched-tokens", "4096"],
    ]  # fmt: skip
    vllm_said = ask_vllm(READ, json.dumps([["m", *case] for case in cases]))
    assert isinstance(vllm_said, list)
    ours = []
    for case in cases:
        options = parse(["vllm", "serve", "m", *case], VLLM_VERSION).options
        read = [options.get(name) for name in (*microbatch.THRESHOLDS, "max-num-batched-tokens")]
        ours.append([microbatch._split(parse(["vllm", "serve", "m", *case], VLLM_VERSION)) is not None, *read])
    defaults = {"dbo-decode-token-threshold": 32, "dbo-prefill-token-threshold": 512}
    assert microbatch._defaults((site_packages(VLLM_PYTHON) / microbatch.PARALLEL).read_bytes()) == defaults
    theirs = [
        [s[0], *(None if v == defaults.get(n) else v for v, n in zip(s[1:3], microbatch.THRESHOLDS, strict=True)), s[3]]
        for s in vllm_said
    ]
    assert ours == theirs, (ours, vllm_said)
    assert [s[0] for s in vllm_said].count(True) == 5
