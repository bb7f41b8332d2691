"""The speculative method vLLM settles on for a launch: the one place every method-keyed rule reads it.

vLLM's SpeculativeConfig (config/speculative.py, 0.11 on) keeps eagle/eagle3 given; else it tells the
method from the drafter's name ("eagle-": eagle; "eagle3": eagle3), then from its model_type as
hf_config_override leaves it (medusa, mlp_speculator, one of the tree's MTPModelTypes: mtp). A
DeepSeek-V3 checkpoint named as the drafter with no method is served as mtp: a rule keyed on the
method written misses it.
"""

from __future__ import annotations

from patchkit.launch.command import LaunchCommand
from patchkit.launch.engine import Reader
from patchkit.launch.models import ModelConfig
from patchkit.launch.mtp import SPEC_FILE, mtp_drafter
from patchkit.launch.spec_literals import mtp_model_types

KEPT = ("eagle", "eagle3", "ngram", "[ngram]", "suffix")  # given or told from the name: no model_type read
TOLD_BY_TYPE = ("medusa", "mlp_speculator")  # a drafter model_type that names its own method
FROM_THE_PROMPT = ("ngram", "[ngram]", "suffix")  # SpeculativeConfig loads no drafter: "model" is never read


def drafts_from_the_prompt(command: LaunchCommand) -> bool:
    """Whether vLLM's draft comes from the prompt (n-gram, suffix), given or told from "model" ("[ngram]")."""
    return command.named_method in FROM_THE_PROMPT


def settled_method(command: LaunchCommand, drafter: ModelConfig | None, read: Reader) -> str | None:
    """The method vLLM serves the launch with: LaunchCommand.named_method (the method given, or
    the one the drafter's name says; a model's own MTP method renamed mtp), else what the drafter's
    model_type says (its config read as the tree's hf_config_override leaves it; not read: the
    method as named). Which model types are mtp is the tree's own table (mtp_model_types)."""
    types = mtp_model_types(read(SPEC_FILE))
    named = command.named_method
    named = "mtp" if named is not None and _served_as_mtp(named, types) else named
    if named in KEPT or named == "mtp" or drafter is None:
        return named
    model_type = built_model_type(drafter.config, read)
    if not isinstance(model_type, str):
        return named
    if _served_as_mtp(model_type, types):
        return "mtp"
    return model_type if model_type in TOLD_BY_TYPE else named


def _served_as_mtp(model_type: str, types: set[str] | None) -> bool:
    """Whether vLLM serves `model_type` as mtp: one of the tree's MTP model types (a `foo_mtp` it does
    not list is not: under draft_model it stays a draft model). A tree whose table is not read (another
    layout): told by the name, as every release's types are named."""
    if types is None:
        return model_type.endswith("_mtp") or model_type == "mtp"
    return model_type in types


def built_model_type(config: dict[str, object], read: Reader) -> object:
    """The drafter's model_type as vLLM's draft ModelConfig holds it: hf_config_override applied where
    the tree has one (a DeepSeek-V3 checkpoint becomes deepseek_mtp); None where it is not read."""
    source = read(SPEC_FILE) or b""
    architectures = config.get("architectures")
    if b"def hf_config_override" not in source or not isinstance(architectures, list):
        return config.get("model_type")  # no override; or none read, as vLLM's reading of the config fails first
    built = mtp_drafter(source, config) if architectures else None
    return None if built is None else built.model_type
