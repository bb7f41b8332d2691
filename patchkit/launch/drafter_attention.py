"""The EAGLE-3 drafter's attention as llama.py builds it (the eagle3 set's drafter-architecture check):
the length of its rotary table against the positions vLLM feeds it, and its sliding-window layers.
Read from the installed tree, statically; each rule is judged only where the tree shows it."""

from __future__ import annotations

import math
import re
from typing import Any, TypeGuard

from packaging.version import Version

from patchkit.base.errors import escaped
from patchkit.launch.engine import LaunchContext
from patchkit.launch.model_files import LLAMA
from patchkit.launch.spec_limits import max_model_len

SPECULATIVE = "vllm/config/speculative.py"
TRANSFORMERS_AUTO = "transformers/models/auto/configuration_auto.py"  # where config classes are named
ROPE_TABLE_RULE = b'max_position_embeddings = getattr(config, "max_position_embeddings"'  # llama.py 0.11-0.34
DRAFTER_RAISED = b"max_position_embeddings"  # 0.30's speculative.py raises the drafter's to the target's length
ROPE = "vllm/model_executor/layers/rotary_embedding/__init__.py"  # get_rope
PARTIAL_CHECKED = b"partial_rotary_factor <= 0.0 or partial_rotary_factor > 1.0"  # get_rope's ValueError
VLLM_CONFIGS = "vllm/transformers_utils/config.py"  # patch_rope_parameters: the names it copies in, in order
PARTIAL_NAMES = ("partial_rotary_factor", "rotary_pct", "rotary_emb_fraction")
PARTIAL_READ = b'names = ["partial_rotary_factor", "rotary_pct", "rotary_emb_fraction"]'
ROPE_DIR = "vllm/model_executor/layers/rotary_embedding"
MPE = "max_position_embeddings"
# The drafter tables of scaled RoPE types, as the tree's class sizes them: (type, its file, the line that
# shows it (whitespace dropped), a line it must lack, the config key the table starts from, whether the
# factor multiplies it). get_rope passes yarn's classes original_max_position_embeddings; the first
# entry of a type whose line the tree shows counts (0.11-0.18's dynamic scales, 0.22's does not).
ARANGE_FACTOR = b"torch.arange(self.max_position_embeddings*self.scaling_factor,"
ROPE_TABLES = (
    ("linear", "linear_scaling_rope.py", b"max_len=self.max_position_embeddings*scaling_factor", None, MPE, True),
    ("dynamic", "dynamic_ntk_scaling_rope.py", b"max_len=self.max_position_embeddings*self.scaling_factor", None, MPE, True),
    ("dynamic", "dynamic_ntk_scaling_rope.py", b"t=torch.arange(self.max_position_embeddings,dtype", None, MPE, False),
    ("yarn", "yarn_scaling_rope.py", ARANGE_FACTOR, None, "original_max_position_embeddings", True),
    ("deepseek_yarn", "deepseek_scaling_rope.py", ARANGE_FACTOR, None, "original_max_position_embeddings", True),
    ("ntk", "ntk_scaling_rope.py", b"(RotaryEmbedding):", b"def_compute_cos_sin_cache", MPE, False),  # base's table
    # short table (original rows), then long (max_position_embeddings rows), entered at position + original
    ("longrope", "phi3_long_rope_scaled_rope.py", b"long_short_cache=torch.cat([short_cache,long_cache]", None, MPE, False),
)  # fmt: skip
LONGROPE = ("longrope", "su")  # vLLM renames su longrope
PLAIN_TABLES = ("default", "llama3")  # max_position_embeddings rows (llama3 rescales frequencies only)
SLIDING_READ = b"sliding_window = config.sliding_window"  # LlamaAttention, for a layer typed sliding_attention
# the assert vLLM's KV cache spec makes of a sliding layer in an MLA model (the target's use_mla), in
# gpu_model_runner.py (0.11), attention/layer.py (0.12-0.15), layers/attention/attention.py (0.16 on)
MLA_SLIDING = b"MLA is not supported for sliding"
MLA_SLIDING_FILES = (
    "vllm/model_executor/layers/attention/attention.py",
    "vllm/attention/layer.py",
    "vllm/v1/worker/gpu_model_runner.py",
)
SLIDING_FIX = "give the drafter's config.json a sliding_window (a number), or layer_types of full_attention"
MLA_FIX = "give the drafter's layer_types full_attention: an MLA target has no sliding window"


def positions_unserved(launch: LaunchContext, defaults: dict[str, Any] | None) -> tuple[str, str] | None:
    """llama.py sizes the drafter's rotary table from its own config (max_position_embeddings, else its
    config class's default: `defaults`; yarn's from original_max_position_embeddings), and vLLM feeds it
    the target's positions, up to max_model_len - 1 (vLLM #48894; 0.30's speculative.py raises the drafter's
    max_position_embeddings, which yarn's table does not start from; longrope's long table is read once
    max_model_len passes its original length): (what fails, fix) when the table is shorter; None where
    this cannot be told."""
    config = launch.drafter.config if launch.drafter is not None else {}
    table = _table(launch, config)
    if table is None or (table[0] == MPE and DRAFTER_RAISED in (launch.read(SPECULATIVE) or b"")):
        return None
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    start = config.get(MPE, (defaults or {}).get(MPE)) if table[0] == MPE else config.get(table[0], rope.get(table[0]))
    length = max_model_len(launch)
    if not _whole(start) or start <= 0 or length is None or length <= (rows := math.ceil(start * table[1])):
        return None  # absent, with no default read (unjudged says so), or odd: vLLM refuses it at start
    kind = _rope(config)
    original = config.get("original_max_position_embeddings", rope.get("original_max_position_embeddings"))
    if kind in LONGROPE and (not _whole(original) or length <= original):
        return None  # up to its original length longrope reads the short table alone
    if kind not in (None, *PLAIN_TABLES):
        held = f"its {kind} RoPE scaling"  # another max_position_embeddings would change its frequencies too
        fix = f"give --max-model-len {rows}, or use a drafter whose rotary table holds {length} positions"
    else:
        held = MPE + ("" if MPE in config else ", its config's default")
        fix = f"give --max-model-len {rows}, or set max_position_embeddings to {length} in the drafter's config.json"
    if launch.command.options.get("max-model-len") == -1:  # auto: vLLM fits it to the memory free, at start
        fix = fix.replace(f"give --max-model-len {rows}", f"give --max-model-len {rows} in place of auto")
        up_to = (
            f"up to the max_model_len vLLM picks at start by the GPU memory free (auto; at most the target's {length}): "
            f"where that is above {rows}, the first request past {rows} tokens crashes the engine (vLLM #48894)"
        )
    else:
        up_to = f"up to max_model_len {length}: the first request past {rows} tokens crashes the engine (vLLM #48894)"
    return f"its rotary table holds {rows} positions ({held}) and vLLM feeds it the target's, {up_to}", fix


def unjudged(launch: LaunchContext, defaults: dict[str, Any] | None, mla: bool) -> tuple[str, str] | None:
    """(why, what gives it) where a rule here needs the drafter's config class's default (`defaults`:
    None, not read) because its config.json is silent: the rotary table's length, a sliding window (under
    an MLA target, `mla`, only full attention is sure to serve)."""
    config = launch.drafter.config if launch.drafter is not None else {}
    if defaults is not None:
        return None
    table, missing = _table(launch, config), None
    raised = DRAFTER_RAISED in (launch.read(SPECULATIVE) or b"")
    if table is not None and table[0] == MPE and MPE not in config and not raised and max_model_len(launch):
        missing = MPE
    elif _sliding_layer(launch) and "sliding_window" not in config:
        missing = "sliding_window"
    if missing is None:
        return None
    unread = launch.read(TRANSFORMERS_AUTO) is None
    where = "no transformers/ beside vllm/" if unread else f"model_type {escaped(repr(config.get('model_type')))}"
    gives = MLA_FIX if mla and missing != MPE else f"set {missing} in the drafter's config.json"
    gives += ", or give --python PATH (the launch's interpreter)" if unread else ""
    return f"its config.json gives no {missing}, and its config class's default is not read ({where})", gives


def partial_refused(launch: LaunchContext) -> tuple[str, str] | None:
    """get_rope raises for a partial_rotary_factor outside (0, 1] (a TypeError comparing one that is no
    number) as it builds the drafter's attention: vLLM copies the first of its names the config has into
    the RoPE parameters (with the launch's transformers < 5; 5 may refuse it earlier, at start).
    (what fails, fix) where the tree shows both steps and that transformers; else None."""
    config = launch.drafter.config if launch.drafter is not None else {}
    named = next((name for name in PARTIAL_NAMES if name in config), None)
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    value = config[named] if named is not None else None
    if value is None and isinstance(rope, dict):
        named, value = "partial_rotary_factor", rope.get("partial_rotary_factor")
    transformers = _version(launch.distribution("transformers"))
    if value is None or transformers is None or transformers.major >= 5:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1:
        return None
    if PARTIAL_CHECKED not in (launch.read(ROPE) or b"") or PARTIAL_READ not in (launch.read(VLLM_CONFIGS) or b""):
        return None
    fix = f"give the drafter's config.json a {named} above 0 and at most 1 (the share of each head rotated)"
    return f"its {named} {escaped(repr(value))[:20]} is not above 0 and at most 1 (get_rope raises)", fix


def _rope(config: dict[str, Any]) -> str | None:
    """The drafter's RoPE type as vLLM reads it (rope_scaling, else rope_parameters; "type" for rope_type)."""
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
    return kind if isinstance(kind, str) else None


def _table(launch: LaunchContext, config: dict[str, Any]) -> tuple[str, float] | None:
    """(the config key the drafter's rotary table starts from, the factor its rows are that times) as the
    tree's llama.py and get_rope build it for `config`; None where not known (a per-layer or multimodal
    rope, dual-chunk attention, a type sized otherwise, a llama.py not sizing it from the config)."""
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    if config.get("dual_chunk_attention_config") or ROPE_TABLE_RULE not in (launch.read(LLAMA) or b""):
        return None
    if rope is None:
        return MPE, 1
    kind = _rope(config)
    if not isinstance(rope, dict) or "mrope_section" in rope or kind is None:
        return None
    if kind in PLAIN_TABLES:
        return MPE, 1
    kind = "longrope" if kind in LONGROPE else kind
    sources = {name: launch.read(f"{ROPE_DIR}/{name}") for type_, name, *_ in ROPE_TABLES if type_ == kind}
    flat = {name: re.sub(rb"\s+", b"", text) for name, text in sources.items() if text is not None}
    sized = next(
        (
            (key, scaled)
            for type_, name, shows, lacks, key, scaled in ROPE_TABLES
            if type_ == kind and name in flat and shows in flat[name] and (lacks is None or lacks not in flat[name])
        ),
        None,
    )
    if sized is None or (kind == "dynamic" and "alpha" in rope):
        return None  # a type sized otherwise, or none the tree shows; dynamic with alpha: another class
    factor = rope.get("factor") if sized[1] else 1
    if not isinstance(factor, int | float) or isinstance(factor, bool):
        return None  # vLLM refuses it building the config, before the target's load
    return sized[0], factor  # rows: ceil(start x factor), torch.arange of a float product


def sliding_unbuilt(launch: LaunchContext, defaults: dict[str, Any] | None, mla: bool) -> tuple[str, str] | None:
    """llama.py's LlamaAttention reads config.sliding_window for a layer layer_types calls
    sliding_attention: an AttributeError building it when the config (and its class's defaults:
    `defaults`) has none, a TypeError building its attention when it is no number. (what fails, fix):
    under an MLA target (`mla`) the fix is full attention, as sliding_under_mla says."""
    if not _sliding_layer(launch):
        return None
    fix = MLA_FIX if mla else SLIDING_FIX
    config = launch.drafter.config if launch.drafter is not None else {}
    window = config.get("sliding_window", (defaults or {}).get("sliding_window", ...))
    if window is ... and defaults is not None:
        return "a layer_types entry is sliding_attention but it gives no sliding_window", fix
    if window is ... or window is None or isinstance(window, int | float):
        return None  # None: vLLM builds the layer with full attention
    return f"its sliding_window {escaped(repr(window))[:20]} is no number", fix


def sliding_under_mla(launch: LaunchContext, mla: bool) -> tuple[str, str] | None:
    """vLLM's KV cache spec asserts that an MLA model (the target's use_mla: `mla`) has no sliding layer,
    once the drafter has loaded too: (what fails, fix), where the tree shows that assert; else None."""
    window = (launch.drafter.config if launch.drafter is not None else {}).get("sliding_window")
    if not mla or window is None or not _sliding_layer(launch):
        return None
    if not any(MLA_SLIDING in (launch.read(path) or b"") for path in MLA_SLIDING_FILES):
        return None
    why = (
        "a layer_types entry is sliding_attention, and vLLM's KV cache asserts no sliding window "
        "under an MLA target: it fails after the target's load"
    )
    return why, MLA_FIX


def _sliding_layer(launch: LaunchContext) -> bool:
    """Whether llama.py reads sliding_window for one of the drafter's layers (layer_types, by draft layer)."""
    config = launch.drafter.config if launch.drafter is not None else {}
    types, layers = config.get("layer_types"), config.get("num_hidden_layers", 1)
    if not isinstance(types, list) or not _whole(layers) or SLIDING_READ not in (launch.read(LLAMA) or b""):
        return False
    return "sliding_attention" in types[:layers]


def _version(fields: list[tuple[str, str]] | None) -> Version | None:
    """The Version a distribution's METADATA gives (untrusted text); None where none or not one."""
    said = next((value for key, value in fields or [] if key.lower() == "version"), None)
    try:
        return Version(said) if said is not None else None
    except ValueError:
        return None


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
