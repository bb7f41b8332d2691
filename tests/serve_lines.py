"""Command lines for `vllm serve` (hypothesis), and what a reading of one is compared by: shared by the
fast tier (tests/test_serve_parser_property.py, against argparse built from the recorded spec) and the
real one (tests/vllm_import/test_serve_parser_real.py, against vLLM 0.16.0's own parser); values that parser
refuses and takes (tests/test_launch_review5.py holds patchkit to them, test_serve_parser_real.py vLLM)."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from patchkit.base.errors import BadInput
from patchkit.launch.command import parse

MODELS = ["org/m", "org/other", "./local-dir"]
# options whose values any vLLM type accepts, and flags that take none
FREE = ["--model", "--tokenizer", "--served-model-name"]
WHOLE = ["--tensor-parallel-size", "-tp", "--seed", "--max-model-len", "--data-parallel-size", "-dp"]
JSON = ["--speculative-config", "--hf-overrides"]
FLAGS = [
    "--trust-remote-code",
    "--no-trust-remote-code",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--enforce-eager",
    "--headless",
    "--disable-log-stats",
]
OBJECTS = [
    {"method": "eagle3", "model": "org/drafter", "num_speculative_tokens": 3},
    {"method": "ngram"},
    {"text_config": {"hidden_size": 64}},
    {},
]
# options whose values vLLM's types and choices judge (0.16.0), and values of every kind for them: the
# values of a config object's own fields are left out (pydantic judges them; patchkit's static
# reading does not, docs/launch.md)
VALUED = [
    "--dtype",
    "--kv-cache-dtype",
    "--uvicorn-log-level",
    "--block-size",
    "--collect-detailed-traces",
    "--max-model-len",
    "--max-num-batched-tokens",
    "--kv-cache-memory-bytes",
    "--gpu-memory-utilization",
    "--kv-offloading-size",
    "--max-log-len",
    "--compilation-config",
    "--kv-transfer-config",
    "--allowed-origins",
    "--override-generation-config",
    "--model-loader-extra-config",
    "--lora-modules",
    "--revision",
]
VALUES = [
    *["auto", "bfloat16", "half", "fp8", "foo", "info", "loud", "model,worker", "None", "", "Auto"],
    *["16", "17", "-1", "0", "1.5", "0.9", "1e3", "32k", "32K", "1.5k", "1.5K", "2M", " 8 ", "abc", "0x10"],
    *["{}", '{"cudagraph_copy_inputs": true}', '{"bad_key": 1}', '{"kv_role": "kv_both"}', "3", "[1]", "{bad", "null"],
    *['["*"]', '{"temperature": 0.5}', " {} ", "a=b", "a=b=c", '{"name": "a", "path": "p"}', '{"name": "a"}'],
]
DOTTED = [
    "--speculative-config.method",
    "--speculative_config.model",
    "--speculative-config.num_speculative_tokens",
    "--hf-overrides.text_config.hidden_size",
    "--hf_overrides.architectures+",
    "-cc.bad_key",
]


def _spelled(option: str, draw) -> str:
    """An option as a user might write it: whole, an abbreviation, with underscores."""
    if not option.startswith("--"):
        return option
    how = draw(st.sampled_from(["whole", "whole", "prefix", "underscores"]))
    if how == "prefix":
        return option[: draw(st.integers(4, len(option)))]
    if how == "underscores":
        return "--" + option[2:].replace("-", "_")
    return option


@st.composite
def piece(draw) -> list[str]:
    kind = draw(st.sampled_from(["model", "free", "whole", "json", "flag", "dotted", "dashdash", "stray", "valued"]))
    if kind == "model":
        return [draw(st.sampled_from(MODELS))]
    if kind == "valued":
        option, value = _spelled(draw(st.sampled_from(VALUED)), draw), draw(st.sampled_from(VALUES))
        return [f"{option}={value}"] if draw(st.booleans()) else [option, value]
    if kind == "flag":
        return [_spelled(draw(st.sampled_from(FLAGS)), draw)]
    if kind == "dashdash":
        return ["--"]
    if kind == "stray":
        return [draw(st.sampled_from(["-3", "-0.5", "x.y", "--x", "-q"]))]
    if kind == "dotted":
        key = draw(st.sampled_from(DOTTED))
        value = draw(st.sampled_from(["eagle3", "4", "org/d", "[1, 2]", "a,b", "-1", "true"]))
        return [f"{key}={value}"] if draw(st.booleans()) else [key, value]
    option = _spelled(draw(st.sampled_from({"free": FREE, "whole": WHOLE, "json": JSON}[kind])), draw)
    if kind == "free":
        value = draw(st.sampled_from([*MODELS, "tok", "-7"]))
    elif kind == "whole":
        value = str(draw(st.integers(-2, 8)))
    else:
        value = json.dumps(draw(st.sampled_from(OBJECTS)))
    return [f"{option}={value}"] if draw(st.booleans()) else [option, value]


serve_arguments = st.lists(piece(), min_size=1, max_size=7).map(lambda pieces: [a for p in pieces for a in p])

FIELDS = ("model", "speculative_config", "tensor_parallel_size", "trust_remote_code")


def patchkit_reading(arguments: list[str], version: str = "0.16.0") -> dict:
    """What patchkit reads, in the shape the parsers' readings are compared in."""
    try:
        command = parse(["vllm", "serve", *arguments], version)
    except BadInput as exc:
        return {"refused": True, "error": exc.message}
    return {
        "refused": False,
        "model": command.model,
        "speculative_config": command.speculative_config,
        "tensor_parallel_size": command.tensor_parallel_size,
        "trust_remote_code": command.trust_remote_code,
    }


def comparable(reading: dict) -> dict:
    """A reading reduced to what must agree: refused or not, and what was read."""
    if reading["refused"]:
        return {"refused": True}
    found = {name: reading.get(name) for name in FIELDS}
    found["tensor_parallel_size"] = int(found["tensor_parallel_size"] or 1)
    found["trust_remote_code"] = bool(found["trust_remote_code"])
    return {"refused": False, **found}


def agree(arguments: list[str], ours: dict, theirs: dict) -> None:
    if ours.get("refused") and "names no model" in ours.get("error", "") and not theirs["refused"]:
        assert theirs["model"] not in MODELS, (arguments, ours, theirs)  # vLLM's default model, not one named
        return
    assert comparable(ours) == comparable(theirs), (arguments, ours, theirs)


# Values vLLM 0.16.0's own parser refuses (held against patchkit in tests/test_launch_review5.py, against
# vLLM in tests/vllm_import/test_serve_parser_real.py): a choice it does not offer, a type its function
# refuses, a config object that is not one or names a key its dataclass lacks, a --lora-modules item it
# cannot build
REFUSED_VALUES = [
    (["--mamba-cache-dtype", "float64"], "--mamba-cache-dtype: invalid choice: 'float64' (choose from 'auto'"),
    (["--scheduling-policy=lifo"], "--scheduling-policy: invalid choice"),
    (["--block-size", "24"], "--block-size: invalid choice: 24"),
    (["--max-num-batched-tokens", "2.5K"], "--max-num-batched-tokens: no decimals with K: did you mean 2.5k?"),
    (["--max-model-len", "lots"], "--max-model-len: 'lots' is not a whole number (like 4096, 32k"),
    (["--kv-cache-memory-bytes", "8 GiB"], "--kv-cache-memory-bytes: '8 GiB' is not a whole number"),
    (["--gpu-memory-utilization", "90%"], "--gpu-memory-utilization: '90%' is not a number"),
    (["--max-num-seqs", "1.0"], "--max-num-seqs: '1.0' is not a whole number"),
    (["--eplb-config", "[]"], "--eplb-config: '[]' is not a JSON object"),
    (["--kernel-config.nope", "1"], "--kernel-config: unknown key 'nope'; the keys are: enable_flashinfer_autotune"),
    (
        ["--default-chat-template-kwargs", "{x"],
        "--default-chat-template-kwargs: not valid JSON (Expecting property name enclosed in double quotes at column 2): {x",
    ),
    (["--lora-modules", '{"path": "/l"}'], "Invalid fields for --lora-modules"),
    (["--lora-modules", "[x"], "Invalid JSON format for --lora-modules"),
]


# ...and values it takes.
ACCEPTED_VALUES = [
    ["--max-num-batched-tokens", "2.5k", "--max-model-len", "AUTO", "--kv-cache-memory-bytes", "None"],
    ["--block-size", "64", "--mamba-cache-dtype", "float16", "--gpu-memory-utilization", "0.85"],
    ["--eplb-config", '{"window_size": 10}', "--kernel-config.enable_flashinfer_autotune", "true"],
    ["--lora-modules", "a=/l", '{"name": "b", "path": "/m", "base_model_name": "org/m"}', "--served-model-name", "s"],
]
