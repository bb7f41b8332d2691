"""`run`'s static reading (its fast path too) refuses the values vLLM's engine config refuses at
start, as vLLM 0.16.0's create_engine_config() does (checked there with the CPU platform forced):
a number outside the pydantic bounds the option's config field declares (of a config vLLM builds
for the launch), a tensor or data parallel size of 0, a speculative-config field declared a string
given a number; and passes what it accepts (a negative -tp, a bound of a config not built).

The tree's arg_utils.py and config files are shapes written here: the declaration forms vLLM uses."""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers import run_cli_judged
from launch_fixtures import KIMI_DRAFTER, KIMI_K25, applied, patchkit_run, stand_in_launch, write_model

ARG_UTILS = textwrap.dedent("""\
    from vllm.config import CacheConfig, LoRAConfig, ModelConfig, MultiModalConfig, ParallelConfig, SchedulerConfig


    class EngineArgs:
        @staticmethod
        def add_cli_args(parser):
            parallel_kwargs = get_kwargs(ParallelConfig)
            group.add_argument("--tensor-parallel-size", "-tp", **parallel_kwargs["tensor_parallel_size"])
            cache_kwargs = get_kwargs(CacheConfig)
            group.add_argument("--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"])
            group.add_argument("--swap-space", **cache_kwargs["swap_space"])
            scheduler_kwargs = get_kwargs(SchedulerConfig)
            group.add_argument(
                "--max-num-seqs",
                **{
                    **scheduler_kwargs["max_num_seqs"],
                    "default": None,
                },
            )
            group.add_argument("--max-num-batched-tokens", **scheduler_kwargs["max_num_batched_tokens"])
            model_kwargs = get_kwargs(ModelConfig)
            group.add_argument("--max-model-len", **model_kwargs["max_model_len"])
            lora_kwargs = get_kwargs(LoRAConfig)
            group.add_argument("--max-loras", **lora_kwargs["max_loras"])
            multimodal_kwargs = get_kwargs(MultiModalConfig)
            group.add_argument("--mm-processor-cache-gb", **multimodal_kwargs["mm_processor_cache_gb"])

        def _set_default_max_num_seqs_and_batched_tokens_args(self, usage_context, model_config):
            if orig_max_num_batched_tokens is None:
                self.max_num_batched_tokens = min(
                    self.max_num_seqs * model_config.max_model_len,
                    self.max_num_batched_tokens,
                )
    """)
CONFIGS = {
    "cache": """
        class CacheConfig:
            block_size: int = None
            gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
            swap_space: float = Field(default=4, ge=0)
        """,
    "scheduler": """
        class SchedulerConfig:
            max_num_seqs: int = Field(default=128, ge=1)
            max_num_batched_tokens: int = Field(default=2048, ge=1)

            def verify_max_model_len(self, max_model_len: int) -> Self:
                if self.max_num_batched_tokens < self.max_num_seqs:
                    raise ValueError("max_num_batched_tokens must be greater than or equal to max_num_seqs")
        """,
    "model": """
        class ModelConfig:
            max_model_len: int = Field(default=None, ge=-1)
        """,
    "lora": """
        class LoRAConfig:
            max_loras: int = Field(default=1, ge=1)
        """,
    "multimodal": """
        class BaseDummyOptions:
            count: int = Field(999, ge=0)


        class MultiModalConfig:
            mm_processor_cache_gb: float = Field(default=4, ge=0)
        """,
    "parallel": """
        class ParallelConfig:
            tensor_parallel_size: int = 1
        """,
}


@pytest.fixture
def launch(tmp_path):
    tree, library, command, env, marker = stand_in_launch(tmp_path)
    (tree / "vllm" / "engine").mkdir()
    (tree / "vllm" / "engine" / "arg_utils.py").write_text(ARG_UTILS)
    for name, text in CONFIGS.items():
        (tree / "vllm" / "config" / f"{name}.py").write_text(textwrap.dedent(text))
    applied(tree, library)
    return tree, library, command, env, marker


REFUSED = [
    (["-tp", "0"], "--tensor-parallel-size 0: vLLM divides by it"),
    (["-dp", "0"], "--data-parallel-size 0: vLLM finds no data-parallel rank"),
    (["--max-num-seqs", "0"], "vLLM refuses --max-num-seqs 0: its SchedulerConfig.max_num_seqs must be at least 1"),
    (["--gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be above 0 and at most 1"),
    (["--gpu-memory-utilization", "0"], "gpu_memory_utilization must be above 0 and at most 1"),
    (["--swap-space", "-1"], "vLLM refuses --swap-space -1.0: its CacheConfig.swap_space must be at least 0"),
    (["--enable-lora", "--max-loras", "0"], "vLLM refuses --max-loras 0: its LoRAConfig.max_loras must be at least 1"),
    (["--max-model-len", "0"], "vLLM refuses --max-model-len 0: without --max-num-batched-tokens it derives"),
    (["--max-model-len", "0", "--max-num-seqs", "4"], "SchedulerConfig.max_num_batched_tokens must be at least 1"),
    (["--max-model-len", "-2"], "vLLM refuses --max-model-len -2: its ModelConfig.max_model_len must be at least -1"),
    (
        ["--max-num-seqs", "64", "--max-num-batched-tokens", "32"],
        "vLLM refuses --max-num-batched-tokens 32 below --max-num-seqs 64",
    ),
]
ACCEPTED = [  # vLLM 0.16.0's create_engine_config takes each
    ["-tp", "-8"],
    ["-dp", "-1"],
    ["--max-num-seqs", "1"],
    ["--gpu-memory-utilization", "1"],
    ["--swap-space", "0"],
    ["--max-loras", "0"],  # no LoRAConfig is built without --enable-lora
    ["--mm-processor-cache-gb", "-1"],  # nor a MultiModalConfig for a model that is not multimodal: not judged
    ["--max-model-len", "0", "--max-num-batched-tokens", "2048"],  # given, nothing derives 0
    ["--max-model-len", "-1"],
    ["--max-model-len", "1"],
    ["--max-num-seqs", "32", "--max-num-batched-tokens", "32"],
    ["--max-num-batched-tokens", "32"],  # vLLM derives max_num_seqs to fit
]


def _with(command: list[str], extra: list[str]) -> list[str]:
    """The launch with `extra` in place of its -tp 4."""
    at = command.index("-tp")
    return [*command[:at], *command[at + 2 :], *extra]


@pytest.mark.parametrize(("extra", "said"), REFUSED)
def test_run_refuses_a_value_vllms_engine_config_refuses(launch, extra, said):
    tree, library, command, env, marker = launch
    for _cold_then_warm in range(2):  # the warm run answers from its kept findings
        _pid, done = patchkit_run(tree, library, _with(command, extra), env)
        assert done.returncode == 1 and not marker.exists(), done.stderr
        assert said in " ".join((done.stdout + done.stderr).split()), done.stdout + done.stderr


def test_run_launches_a_value_vllms_engine_config_takes(launch):
    tree, library, command, env, marker = launch
    for extra in ACCEPTED:
        _pid, done = patchkit_run(tree, library, _with(command, extra), env)
        assert done.returncode == 7 and marker.exists(), (extra, done.stderr)
        marker.unlink()


def _spec(**fields: object) -> str:
    return json.dumps({"method": "eagle3", "num_speculative_tokens": 3, **fields})


@pytest.mark.parametrize("value", [5, 5.5, True, ["main"]])
def test_a_speculative_field_declared_a_string_refuses_any_other_value(tmp_path, value):
    tree, library, _command, env, marker = stand_in_launch(tmp_path)
    applied(tree, library)
    drafter = str(write_model(tmp_path / "drafter", KIMI_DRAFTER))
    target = str(write_model(tmp_path / "kimi", KIMI_K25))
    launch = ["vllm", "serve", target, "--trust-remote-code", "--speculative-config"]
    done = patchkit_run(tree, library, [*launch, _spec(model=drafter, revision=value)], env)[1]
    assert done.returncode == 1 and not marker.exists(), done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert f"revision {value!r} is not a string" in said and 'give "revision" as a JSON string' in said, said

    args = ["preflight", "--no-import", "--target", tree, "--patches", library, "--format", "json", "--"]
    dotted = run_cli_judged(*args, *launch, _spec(model=drafter), "--speculative-config.revision", "5", env=env)
    assert dotted.returncode == 1 and "revision 5 is not a string" in dotted.stdout, dotted.stdout

    for taken in ("main", None):
        done = patchkit_run(tree, library, [*launch, _spec(model=drafter, revision=taken)], env)[1]
        assert done.returncode == 7 and marker.exists(), (taken, done.stderr)
        marker.unlink()
