"""Opt-in (`make test-vllm`): the engine options whose values patchkit's static reading refuses
(patchkit/launch/bounds.py: the pydantic bounds of the config field each option is declared from in
the installed arg_utils.py, a tensor or data parallel size of 0) are exactly those the real vLLM's
own parser and create_engine_config() refuse, on a small Llama target, with the CPU platform forced
as patchkit's validation forces it: for every bounded option found, a value just outside each bound
and the bound itself; a negative parallel size vLLM takes; a bound of a config not built."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest
from vllm_overlay import TINY_LLAMA, ask_vllm, site_packages

from patchkit.base.errors import BadInput
from patchkit.launch import bounds
from patchkit.launch.bounds import bounds_findings
from patchkit.launch.command import parse
from patchkit.launch.engine import LaunchContext
from patchkit.launch.models import resolve_model

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

TARGET = {**TINY_LLAMA, "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 2048}
TARGET |= {"torch_dtype": "float32"}
FIXED = [  # beyond the bounds found: what vLLM does with parallel sizes, and configs built only on demand
    ["-tp", "0"],
    ["-tp", "-8"],
    ["-dp", "0"],
    ["-dp", "-1"],
    ["--max-loras", "0"],
    ["--enable-lora", "--max-loras", "0"],
    ["--mm-processor-cache-gb", "-1"],
]
ASK_VLLM = textwrap.dedent("""\
    import json, sys
    from patchkit._target import engine_config
    target, lines = sys.argv[1], json.loads(sys.argv[2])
    refused = []
    for line in lines:
        answer = engine_config.work({"arguments": [target, *line], "serve": True, "args": [target, *line]})
        refused.append(None if answer["status"] == "ok" else answer.get("error", answer["status"])[-300:])
    print(json.dumps(refused))
    """)


def _lines(site: Path, target: str) -> list[list[str]]:
    """For each bounded option the static reading finds, a value just outside each bound and the bound."""
    lines = [*FIXED]
    command = parse(["vllm", "serve", target], "0.16.0")
    context = LaunchContext(command, resolve_model(target, {}), None, site, None, None)
    for option in _options(site):
        found = _bounds_of(context, option)
        whole = "int" in found.get("type", "int")
        step = 1 if whole else 0.25
        for rule, limit in found.get("bounds", {}).items():
            outside = {"ge": limit - step, "gt": limit, "le": limit + step, "lt": limit}[rule]
            inside = {"ge": limit, "gt": limit + step, "le": limit, "lt": limit - step}[rule]
            lines += [[option, str(int(v) if whole else v)] for v in (outside, inside)]
    return lines


def _options(site: Path) -> list[str]:
    text = (site / "vllm/engine/arg_utils.py").read_text()
    return sorted(set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', text)))


def _bounds_of(context: LaunchContext, option: str) -> dict:
    declared = (context.root / bounds.ARG_UTILS).read_text()
    field = bounds._config_field(declared, option[2:], context)
    if field is None:
        return {}
    found = bounds._field_bounds(context, *field)
    source = (context.root / f"vllm/config/{field[0].removesuffix('Config').lower()}.py").read_text()
    kind = "float" if f"    {field[1]}: float" in source or f"    {field[1]}: float | None" in source else "int"
    return {"bounds": found, "type": kind} if found else {}


def test_the_static_bounds_refuse_what_vllm_refuses_and_only_that(tmp_path: Path):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(TARGET))
    target, site = str(tmp_path / "target"), site_packages(VLLM_PYTHON)
    lines = _lines(site, target)
    assert len(lines) > len(FIXED) + 10, lines  # the bounded options of 0.16.0 were found
    vllm_refused = ask_vllm(ASK_VLLM, target, json.dumps(lines))
    wrong = []
    for line, refused in zip(lines, vllm_refused, strict=True):
        try:  # a negative float reads as a dotted option to vLLM's parser too (it fails on it)
            command = parse(["vllm", "serve", target, *line], "0.16.0")
        except BadInput as exc:
            ours = [exc.message]
        else:
            context = LaunchContext(command, resolve_model(target, {}), None, site, None, None)
            ours = [f.message for f in bounds_findings("command", context)]
        if bool(ours) != (refused is not None):
            wrong.append((line, ours, refused))
    assert not wrong, json.dumps(wrong, indent=1)
