"""ModelConfig's start-up refusal of a quantization that is not the checkpoint's own
(_verify_quantization): the target's --quantization, or --speculative-config's "quantization" (the
draft ModelConfig takes it: the drafter's checkpoint, or for mtp without a "model" the target's own),
against the quant_method of the model's quantization_config. vLLM first lets its override chain
(override_quantization_method: gptq -> gptq_marlin, awq -> awq_marlin, ...) take the checkpoint: what
it may take is read from the tree (quant_overrides); a checkpoint it may take is "cannot judge", a
method an override returns whatever the checkpoint (humming) is taken. Also the speculative
"quantization": "" where the tree's field takes only QuantizationMethods."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from patchkit.base import hints
from patchkit.base.errors import escaped
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.method import settled_method
from patchkit.launch.models import ModelConfig
from patchkit.launch.mtp import mtp_own_config
from patchkit.launch.quant_file import given_quantization, quant_file_findings
from patchkit.launch.quant_overrides import takes, tree_overrides
from patchkit.launch.spec_limits import MODEL_CONFIG
from patchkit.launch.transformers_config import CONFIGURATION, null_quantization_raises
from patchkit.launch.validation import CHECK as VALIDATION
from patchkit.launch.validation import CPU

SPEC_FILE = "vllm/config/speculative.py"
MISMATCH = b"does not match the quantization"  # the raise, 0.11-0.34
# SpeculativeConfig's field where it takes no other text (0.11-0.17; 0.22 on adds `| str`)
METHODS_ONLY = re.compile(rb"\n    quantization: (Optional\[)?me_quant\.QuantizationMethods( \| None)?\]? = None\n")
NO_TEXT = "a quant_method that is no text"
LOWERED = b'.get("quant_method", "").lower()'  # vLLM's read of it: config/model.py (0.11-0.14), then CONVERTOR
CONVERTOR = "vllm/transformers_utils/model_arch_config_convertor.py"
MAY_TAKE = "an override of the tree (override_quantization_method) may take it"


def quantization_findings(check: str, launch: LaunchContext) -> list[Finding]:
    """A failing finding for each quantization the launch names that vLLM refuses at start as not the
    checkpoint's own; cannot judge where the tree's override chain may take it."""
    found = []
    spec = launch.command.speculative_config or {}
    named = spec.get("quantization")
    if named == "" and METHODS_ONLY.search(launch.read(SPEC_FILE) or b""):
        why = '--speculative-config\'s "quantization" "" is not one of vLLM\'s quantization methods: it refuses it at start'
        found.append(Finding(check, False, why, 'drop "quantization" from --speculative-config, or name a method'))
    found += _unread_findings(check, launch)
    found += quant_file_findings(check, launch)  # a --quantization on a checkpoint without quantization_config
    if MISMATCH not in (launch.read(MODEL_CONFIG) or b""):
        return found
    given = given_quantization(launch)
    if given is not None:
        said, drop = f"--quantization {given}", "drop --quantization, or give --quantization {}"
        found += _held(check, launch, "the target", launch.target.config, given, (said, drop))
    drafted = _draft_checkpoint(launch) if isinstance(named, str) and named else None
    if isinstance(named, str) and drafted is not None:
        said = f'--speculative-config\'s "quantization" {named}'
        drop = 'drop "quantization" from --speculative-config, or write "quantization": "{}"'
        found += _held(check, launch, *drafted, named, (said, drop))
    return found


def _unread_findings(check: str, launch: LaunchContext) -> list[Finding]:
    """A checkpoint's quantization vLLM fails to read at start whatever the command: a quant_method
    that is no text fails (the tree calls .lower() on it); "quantization_config": null fails where the
    launch's transformers' to_dict raises on it (transformers_config), else it is not judged."""
    lowered = any(LOWERED in (launch.read(path) or b"") for path in (MODEL_CONFIG, CONVERTOR))
    models = [("the target", launch.target)]
    models += [("the drafter", launch.drafter)] if launch.drafter is not None else []
    found = []
    for whose, model in models:
        unread = unread_quantization(model.config)
        fix = "write its quantization_config as an object whose quant_method is text, or drop the key"
        if unread is not None and unread.startswith(NO_TEXT) and lowered:
            why = f"vLLM fails at start reading {whose}'s config.json: its quantization has {unread}, whose .lower() it calls"
            found.append(Finding(check, False, why, fix))
        elif unread is not None and _null_raises(launch, model):
            why = (
                f"vLLM fails at start reading {whose}'s config.json: it has {unread}, and the launch's transformers "
                f"({CONFIGURATION}: PretrainedConfig.to_dict, run by from_dict's log line) calls .to_dict() on it: AttributeError"
            )
            found.append(Finding(check, False, why, 'drop "quantization_config" from config.json'))
        elif unread is not None:
            why = f"whether vLLM reads {whose}'s config.json: it has {unread}, which vLLM 0.16.0 (transformers 4.57.6) fails to read at start"
            found.append(cannot_judge(check, why, fix))
    return found


def _null_raises(launch: LaunchContext, model: ModelConfig) -> bool:
    """config.json's own top-level "quantization_config": null (not an override's), read by transformers'
    from_dict (a config.json, not Mistral's params.json), whose to_dict raises on it."""
    own = model.own or model.config
    held = "quantization_config" in own and own["quantization_config"] is None
    return held and model.path.name == "config.json" and null_quantization_raises(launch.read) is True


def _draft_checkpoint(launch: LaunchContext) -> tuple[str, dict[str, Any]] | None:
    """Whose config the draft ModelConfig reads, and that config: the drafter's; for mtp without a
    "model" (given num_speculative_tokens), the target's own checkpoint (SpeculativeConfig sets model
    to the target's, 0.11-0.34), as vLLM reads it for the draft (mtp_own_config). None: no drafter."""
    if launch.drafter is not None:
        return "the drafter", launch.drafter.config
    spec = launch.command.speculative_config or {}
    if spec.get("model") is not None or spec.get("num_speculative_tokens") is None:
        return None
    if settled_method(launch.command, None, launch.read) != "mtp":
        return None
    config = mtp_own_config(launch.command, launch.target)
    return ("the drafter (the target's own checkpoint)", config) if isinstance(config, dict) else None


def _held(
    check: str, launch: LaunchContext, whose: str, config: dict[str, Any], given: str, words: tuple[str, str]
) -> list[Finding]:
    """`words`: the quantization as the launch says it, and the fix's text (a "{}" for the checkpoint's)."""
    said, drop = words
    if unread_quantization(config) is not None:  # _unread_findings says it, whatever the command
        return []
    own = checkpoint_method(config)
    if own is None or own == given:
        return []
    taken, anyway = tree_overrides(launch.read)
    if given in anyway or "*" in anyway:  # an override returns it whatever the checkpoint: no mismatch
        return []
    kind = f"{escaped(own)} checkpoint" if own else "checkpoint (a quantization_config without quant_method)"
    unclear = "?" in anyway  # an override keyed on the user's method in a way not read here
    if unclear or takes(taken, own) or any(takes(taken, a) for a in _algorithms(config)) or launch.general_plugins():
        why = f"whether vLLM takes {escaped(said)} for {whose}'s {kind}: {MAY_TAKE}"
        return [cannot_judge(check, why, _judged_by(launch))]
    if not own:  # vLLM's quant_method None: no --quantization is it
        why = (
            f"vLLM refuses {escaped(said)} at start: {whose}'s config.json has a quantization_config without "
            "quant_method, which no quantization matches, and no override of the tree takes that checkpoint"
        )
        return [Finding(check, False, why, drop.split(", or ")[0] + ", or write its quant_method into config.json")]
    why = (
        f"vLLM refuses {escaped(said)} at start: {whose}'s config.json says quant_method {escaped(own)}, "
        "and no override of the tree takes that checkpoint"
    )
    return [Finding(check, False, why, drop.format(escaped(own)))]


def _judged_by(launch: LaunchContext) -> str:
    """What judges it: vLLM's own validation; where this preflight asks vLLM, its answer below
    (decided_by_vllm drops the finding, or says what is left, once vLLM accepts the launch)."""
    if launch.python is not None:
        return "vLLM's own validation judges it: the vllm-validation finding, once it runs and accepts the launch"
    return f"vLLM's own validation judges it: {hints.command('preflight', '--', *launch.command.argv)}"


def decided_by_vllm(findings: list[Finding], argv: list[str]) -> list[Finding]:
    """`findings` after vLLM's own validation accepted the launch (`argv`), its _verify_quantization run:
    without the cannot-judge above where it ran on an accelerator; on the CPU platform (none found here)
    an override answers otherwise than the node's accelerator may (0.16.0's takes -q marlin for gptq
    on CPU): then the fix says so."""
    accepted = [f for f in findings if f.check == VALIDATION and f.ok and f.judged]
    if not accepted:
        return findings
    if not any(CPU in f.message for f in accepted):
        return [f for f in findings if f.judged or MAY_TAKE not in f.message]
    fix = (
        "vLLM's validation here ran on the CPU platform (no accelerator found), and the accelerator's override may "
        f"answer otherwise: check on the node, {hints.command('preflight', '--', *argv)} there"
    )
    return [dataclasses.replace(f, fix=fix) if not f.judged and MAY_TAKE in f.message else f for f in findings]


def checkpoint_method(config: dict[str, Any]) -> str | None:
    """The quant_method vLLM reads from a config's quantization_config (else compression_config), of
    the config, else its text_config, lowercased as vLLM does ("": one without quant_method, which vLLM
    matches with no --quantization); None: none, one it rewrites (ModelOpt's producer), or one it
    cannot read (unread_quantization)."""
    text = config.get("text_config")
    for held in (config, text if isinstance(text, dict) else {}):
        quant = held.get("quantization_config", held.get("compression_config"))
        if quant is None:
            continue
        method = quant.get("quant_method", "") if isinstance(quant, dict) else None
        if not isinstance(method, str) or _modelopt(quant):
            return None
        return method.lower().replace("compressed_tensors", "compressed-tensors")
    return None


def _modelopt(quant: dict[str, Any]) -> bool:
    """A ModelOpt config whose quant_method vLLM sets from its quant_algo (its producer's name, or 0.34's
    legacy "modelopt_quant_config"): the modelopt overrides take it. Another producer's: as written."""
    producer, inner = quant.get("producer"), quant.get("quantization")
    return (isinstance(producer, dict) and producer.get("name") == "modelopt") or (
        isinstance(inner, dict) and "modelopt_quant_config" in inner
    )


def _algorithms(config: dict[str, Any]) -> set[str]:
    """The quant_algo texts (lowercased) of the quantization vLLM reads, top-level or under "quantization":
    0.11-0.18's petit override (ROCm) tests `quant_algo or quant_method` whatever the method."""
    text = config.get("text_config")
    for held in (config, text if isinstance(text, dict) else {}):
        quant = held.get("quantization_config", held.get("compression_config"))
        if isinstance(quant, dict):
            inner = quant.get("quantization")
            found = [quant.get("quant_algo"), inner.get("quant_algo") if isinstance(inner, dict) else None]
            return {algo.lower() for algo in found if isinstance(algo, str)}
        if quant is not None:
            return set()
    return set()


def unread_quantization(config: dict[str, Any]) -> str | None:
    """What of the config's quantization vLLM 0.16.0 (with its transformers) fails to read at start,
    --quantization or not: "quantization_config": null (transformers' to_dict raises AttributeError,
    whatever compression_config holds), or a quant_method that is no text (vLLM's .lower() raises)."""
    text = config.get("text_config")
    for held in (config, text if isinstance(text, dict) else {}):
        if "quantization_config" in held and held["quantization_config"] is None:
            return '"quantization_config": null'
        quant = held.get("quantization_config", held.get("compression_config"))
        method = quant.get("quant_method", "") if isinstance(quant, dict) else ""
        if not isinstance(method, str):
            return f"{NO_TEXT} ({escaped(repr(method)[:40])})"
        if quant is not None:
            return None
    return None
