"""The engine options whose values vLLM's config classes refuse when it builds its engine config,
seconds after the start and before any load, read statically from the installed tree:

- an option `add_argument("--max-num-seqs", **scheduler_kwargs["max_num_seqs"])` declares in
  vllm/engine/arg_utils.py, where `scheduler_kwargs = get_kwargs(SchedulerConfig)`, takes the
  pydantic bounds its field declares in vllm/config/scheduler.py
  (`max_num_seqs: int = Field(default=..., ge=1)`): a number outside them is refused. Only the
  config classes vLLM builds for every launch count (LoRAConfig with --enable-lora): a multimodal
  one is built only for a multimodal model, and its bounds are then not judged here;
- a tensor or data parallel size of 0: vLLM divides by the one and finds no rank in [0, 0) for the
  other (neither field declares a bound; a negative size is not refused there, so not here).

A layout this does not find (another release's) says nothing: vLLM's own validation judges.
"""

from __future__ import annotations

import ast
import re

from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding

ARG_UTILS = "vllm/engine/arg_utils.py"
BUILT_ALWAYS = ("ModelConfig", "CacheConfig", "ParallelConfig", "SchedulerConfig", "ObservabilityConfig", "LoadConfig")
BUILT_WITH = {"LoRAConfig": "enable-lora"}  # built only when the launch turns this option on
ZERO_REFUSED = {
    "tensor-parallel-size": "vLLM divides by it at start (integer modulo by zero)",
    "data-parallel-size": "vLLM finds no data-parallel rank in [0, 0) at start",
}
_WORDS = {"ge": "at least", "gt": "above", "le": "at most", "lt": "below"}


def bounds_findings(check: str, context: LaunchContext) -> list[Finding]:
    """A failing finding for each number the launch gives that vLLM's engine config refuses."""
    numbers = {
        name: value
        for name, value in context.command.options.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    found = [
        Finding(check, False, f"--{name} 0: {why}", f"give --{name} 1 or more, or drop it")
        for name, why in ZERO_REFUSED.items()
        if numbers.get(name) == 0
    ]
    declared = context.read(ARG_UTILS) if set(numbers) - set(ZERO_REFUSED) else None
    if declared is None:
        return found
    text = declared.decode("utf-8", "replace")
    found += _derived_zero(check, context, numbers, text)
    for name, value in sorted(numbers.items()):
        field = _config_field(text, name, context)
        bound = _field_bounds(context, *field) if field is not None else {}
        if field is not None and not all(_holds(value, rule, limit) for rule, limit in bound.items()):
            rules = " and ".join(f"{_WORDS[rule]} {limit}" for rule, limit in bound.items())
            why = f"vLLM refuses --{name} {value}: its {field[0]}.{field[1]} must be {rules}"
            found.append(Finding(check, False, why, f"give --{name} a value {rules}, or drop it"))
    return found


# arg_utils.py's default of max_num_batched_tokens when none is given: the launch's max_model_len
# times max_num_seqs, so --max-model-len 0 makes it 0, which SchedulerConfig's ge=1 refuses
_BATCHED_DEFAULT = "self.max_num_seqs * model_config.max_model_len"


def _derived_zero(check: str, context: LaunchContext, numbers: dict[str, int | float], arg_utils: str) -> list[Finding]:
    """--max-model-len 0 without --max-num-batched-tokens, where the tree's arg_utils.py derives the
    one from the other (vLLM 0.15, 0.16): vLLM refuses the 0 it derives, before any load."""
    given = "max-num-batched-tokens" in context.command.options
    if numbers.get("max-model-len") != 0 or given or _BATCHED_DEFAULT not in arg_utils:
        return []
    why = (
        "vLLM refuses --max-model-len 0: without --max-num-batched-tokens it derives max_num_batched_tokens "
        "as max_num_seqs times max_model_len, 0, and its SchedulerConfig.max_num_batched_tokens must be at least 1"
    )
    return [Finding(check, False, why, "give --max-model-len 1 or more (-1: fit to the memory), or drop it")]


def _config_field(arg_utils: str, name: str, context: LaunchContext) -> tuple[str, str] | None:
    """(config class, field) the option `--name` is declared from in arg_utils.py, when that class
    is built for this launch; None when not declared so."""
    at = re.search(rf'add_argument\(\s*"--{re.escape(name)}"', arg_utils)
    if at is None:
        return None
    call = arg_utils[at.end() : at.end() + 600].split("add_argument(")[0]
    used = re.search(r'(\w+)\["(\w+)"\]', call)
    if used is None:
        return None
    made = re.search(rf"^\s*{re.escape(used[1])} = get_kwargs\((\w+)\)", arg_utils, re.M)
    if made is None:
        return None
    config = made[1]
    switch = BUILT_WITH.get(config)
    if config not in BUILT_ALWAYS and not (switch and context.command.options.get(switch) is True):
        return None
    return config, used[2]


def _field_bounds(context: LaunchContext, config: str, field: str) -> dict[str, int | float]:
    """The constant bounds (ge, gt, le, lt) `config`'s `field` declares with pydantic's Field in
    vllm/config/<name>.py (CacheConfig: cache.py); empty when not found there."""
    source = context.read(f"vllm/config/{config.removesuffix('Config').lower()}.py")
    if source is None:
        return {}
    text = source.decode("utf-8", "replace")
    body = re.search(rf"^class {config}\b.*?(?=^class |\Z)", text, re.M | re.S)
    declared = body and re.search(rf"^    {field}: [^\n=]+= Field\(([^\n]*)\)\s*$", body[0], re.M)
    if not declared:
        return {}
    try:
        call = ast.parse(f"Field({declared[1]})", mode="eval").body
    except (SyntaxError, ValueError):
        return {}
    bounds: dict[str, int | float] = {}
    for keyword in call.keywords if isinstance(call, ast.Call) else []:
        try:
            limit = ast.literal_eval(keyword.value) if keyword.arg in _WORDS else None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            limit = None
        if isinstance(limit, (int, float)) and not isinstance(limit, bool):
            bounds[str(keyword.arg)] = limit
    return bounds


def _holds(value: float, rule: str, limit: float) -> bool:
    return {"ge": value >= limit, "gt": value > limit, "le": value <= limit, "lt": value < limit}[rule]
