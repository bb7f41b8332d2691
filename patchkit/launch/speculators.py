"""A speculators-format model (config.json with `speculators_config`), read as vLLM reads it
(transformers_utils/config.py maybe_override_with_speculators, configs/speculators/): vLLM serves the
verifier it names, with this model as the drafter, and a speculative config of its own making (the
command's is dropped)."""

from __future__ import annotations

from typing import Any

from patchkit.base.errors import BadInput
from patchkit.base.values import FrozenValue, frozen
from patchkit.launch.models import ModelConfig

SUPPORTED_TYPES = ("eagle3",)  # configs/speculators/algos.py: the algorithms vLLM converts


@frozen
class Speculator(FrozenValue):
    """A speculators-format checkpoint: its verifier, its speculative config, its drafter."""

    verifier: str  # the model vLLM serves
    speculative_config: dict[str, Any]  # what vLLM makes of it: method, tokens, this model as the drafter
    drafter: ModelConfig  # this model's config as vLLM builds the drafter's from it


def speculator(model: ModelConfig) -> Speculator | None:
    """None for any other model; a structure vLLM refuses is BadInput, as vLLM refuses the launch."""
    raw = model.config
    if raw.get("speculators_config") is None:
        return None
    try:
        spec = raw["speculators_config"]
        tokens = spec["proposal_methods"][0]["speculative_tokens"]
        verifier = spec["verifier"]["name_or_path"]
        method = raw["speculators_model_type"]
    except (KeyError, IndexError, TypeError):
        raise BadInput(f"{model.path}: vLLM refuses it: invalid speculators config structure") from None
    if not isinstance(verifier, str) or tokens is None or not isinstance(raw.get("transformer_layer_config"), dict):
        raise BadInput(f"{model.path}: vLLM refuses it: invalid speculators config (verifier, tokens, layers)")
    speculative = {"method": method, "num_speculative_tokens": tokens, "model": model.name}
    return Speculator(verifier, speculative, drafter_config(model))


def drafter_config(model: ModelConfig) -> ModelConfig:
    """The config vLLM builds for a drafter from its config.json: for a speculators-format one (no
    model_type, a speculators_config), SpeculatorsConfig's (configs/speculators/base.py): its
    transformer_layer_config with the algorithm's fields; any other is read as it is."""
    raw = model.config
    if raw.get("model_type") not in (None, "speculators") or raw.get("speculators_config") is None:
        return model
    method = raw.get("speculators_model_type")
    if method not in SUPPORTED_TYPES:
        raise BadInput(
            f"{model.path}: vLLM refuses it: speculators_model_type {method!r} is not one of {SUPPORTED_TYPES}"
        )
    layers = raw.get("transformer_layer_config", {})
    if not isinstance(layers, dict):
        raise BadInput(f"{model.path}: vLLM refuses it: transformer_layer_config is not an object")
    config = dict(layers)
    # configs/speculators/algos.py update_eagle3: the fields the checks read
    config["draft_vocab_size"] = raw.get("draft_vocab_size")
    if raw.get("target_hidden_size") is not None:
        config["target_hidden_size"] = raw["target_hidden_size"]
    config["architectures"] = ["Eagle3LlamaForCausalLM"]
    if raw.get("eagle_aux_hidden_state_layer_ids"):
        config["eagle_aux_hidden_state_layer_ids"] = raw["eagle_aux_hidden_state_layer_ids"]
    return ModelConfig(model.name, model.path, config)
