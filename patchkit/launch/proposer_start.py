"""What vLLM's drafting proposer refuses when the model runner builds it, at the worker's start (before
the load, after the engine's config was accepted): read from the tree's proposers.
- Parallel drafting (0.16 on) with a drafter whose config.json gives neither pard_token nor ptd_token_id
  (SpecDecodeBaseProposer._init_parallel_drafting_params raises).
- draft_model with a draft_tensor_parallel_size other than the target's -tp (SpeculativeConfig takes 1;
  DraftModelProposer._raise_if_draft_tp_mismatch raises, 0.15 on).
- draft_model (and parallel drafting of more than one token) on a target that takes multimodal inputs
  (_raise_if_multimodal: 0.15's DraftModelProposer, 0.16 on the proposer that needs extra input slots).
- The same proposer with disable_padded_drafter_batch (_raise_if_padded_drafter_batch_disabled, 0.16 on).
A value is read as pydantic reads it for vLLM's field ("1", 1.0 are 1)."""

from __future__ import annotations

from patchkit.base.errors import escaped
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.lax import lax_int, lax_true
from patchkit.launch.method import settled_method
from patchkit.launch.model_files import BASE_PROPOSER, EAGLE_PROPOSER
from patchkit.launch.parallel_drafting import parallel_drafting

CHECK = "speculative-config"
DRAFT_MODEL = "vllm/v1/spec_decode/draft_model.py"
TOKEN_KEYS = ("pard_token", "ptd_token_id")
TOKEN_REQUIRED = b"`pard_token` or `ptd_token_id`"  # the ValueError _init_parallel_drafting_params raises
TP_REFUSED = b"self._raise_if_draft_tp_mismatch()"
MULTIMODAL_REFUSED = b"self._raise_if_multimodal()"
EXTRA_SLOTS = b"if self.needs_extra_input_slots:"  # 0.16 on: the base proposer's condition for the refusals
PADDING_REFUSED = b"self._raise_if_padded_drafter_batch_disabled()"
MULTIMODAL_TABLE = "_MULTIMODAL_MODELS"
PARALLEL_METHODS = ("eagle", "eagle3", "draft_model")
AT_START = "when the model runner starts (before the load)"
TEXT_ONLY_OPTIONS = ("limit-mm-per-prompt", "language-model-only", "enable-mm-embeds")


def proposer_findings(context: LaunchContext) -> list[Finding]:
    """The failing (or cannot-judge) findings for what the tree's proposer refuses at the runner's start."""
    method = settled_method(context.command, context.drafter, context.read)
    found = [
        _token_missing(context, method),
        _draft_tp_refused(context, method),
        _multimodal_refused(context, method),
        _padding_refused(context, method),
    ]
    return [finding for finding in found if finding is not None]


def _token_missing(context: LaunchContext, method: str | None) -> Finding | None:
    if not parallel_drafting(context.command) or TOKEN_REQUIRED not in (context.read(EAGLE_PROPOSER) or b""):
        return None
    if method not in PARALLEL_METHODS or context.drafter is None:
        why = f"parallel_drafting with method {escaped(str(method))}: which config vLLM reads its pard_token from"
        return cannot_judge(CHECK, f"{why} is not judged", "check that the drafter's config.json gives pard_token")
    if any(key in context.drafter.config for key in TOKEN_KEYS):  # hasattr: present, whatever its value
        return None
    message = (
        "parallel_drafting: the drafter's config.json gives neither pard_token nor ptd_token_id, which vLLM's"
        f" proposer requires {AT_START}"
    )
    fix = "give the drafter's config.json the pard_token it was trained with, or drop parallel_drafting"
    return Finding(CHECK, False, message, fix)


def _draft_tp_refused(context: LaunchContext, method: str | None) -> Finding | None:
    given = lax_int((context.command.speculative_config or {}).get("draft_tensor_parallel_size"))
    if (
        method != "draft_model"
        or given is None
        or given is False
        or TP_REFUSED not in (context.read(DRAFT_MODEL) or b"")
    ):
        return None  # absent, or no whole number: SpeculativeConfig's own check refuses it
    tp = context.command.tensor_parallel_size
    if given == tp:
        return None
    message = (
        f"draft_tensor_parallel_size {given} under -tp {tp}: vLLM's DraftModelProposer (method draft_model)"
        f" takes only the target's tensor parallel size, and refuses it {AT_START}"
    )
    return Finding(CHECK, False, message, f'give "draft_tensor_parallel_size" {tp}, or drop it')


def _multimodal_refused(context: LaunchContext, method: str | None) -> Finding | None:
    """draft_model (or parallel drafting of more tokens than one) where the target takes multimodal inputs."""
    proposer, draft_model = context.read(EAGLE_PROPOSER) or b"", context.read(DRAFT_MODEL) or b""
    slots = _extra_slots(context, method)
    refused = (MULTIMODAL_REFUSED in proposer and EXTRA_SLOTS in proposer and slots) or (
        method == "draft_model" and MULTIMODAL_REFUSED in draft_model
    )
    if not refused or method not in PARALLEL_METHODS:
        return None
    archs = context.target.architectures
    tables = context.registry()
    if not any(arch in table for arch in archs for table in tables.values()):
        return None  # not vLLM's own class: the models and architecture findings judge it
    if not any(arch in tables.get(MULTIMODAL_TABLE, {}) for arch in archs):
        return None
    given = [f"--{name}" for name in TEXT_ONLY_OPTIONS if context.command.options.get(name) not in (None, False)]
    asked = "draft_model" if method == "draft_model" else "parallel_drafting"
    said = f"{asked} on the multimodal target {escaped(archs[0])}"
    if given:
        why = f"{said}: whether {', '.join(given)} leaves it text-only is not judged"
        return cannot_judge(CHECK, why, "check that every modality's limit is 0 (--limit-mm-per-prompt)")
    message = f"{said}: vLLM's proposer does not support multimodal models, and refuses it {AT_START}"
    text_only = "serve it text-only (each modality's limit 0)"
    if method == "draft_model":
        fix = f"use a drafter method that takes a multimodal target (eagle3), or {text_only}"
    else:  # parallel drafting of several tokens: the method in use is not the cause
        fix = f'drop "parallel_drafting", or give "num_speculative_tokens" 1, or {text_only}'
    return Finding(CHECK, False, message, fix)


def _extra_slots(context: LaunchContext, method: str | None) -> bool:
    """Whether the proposer takes extra input slots: draft_model, or parallel drafting of more than one token."""
    tokens = lax_int((context.command.speculative_config or {}).get("num_speculative_tokens"))
    return method == "draft_model" or (parallel_drafting(context.command) and tokens != 1)


def _padding_refused(context: LaunchContext, method: str | None) -> Finding | None:
    """disable_padded_drafter_batch where the proposer takes extra input slots: it supports only a padded batch."""
    if not lax_true((context.command.speculative_config or {}).get("disable_padded_drafter_batch")):
        return None
    sources = [context.read(name) or b"" for name in (EAGLE_PROPOSER, BASE_PROPOSER)]
    if not any(PADDING_REFUSED in source and EXTRA_SLOTS in source for source in sources):
        return None
    if method not in PARALLEL_METHODS or not _extra_slots(context, method):
        return None
    asked = "method draft_model" if method == "draft_model" else "parallel_drafting"
    message = (
        f"disable_padded_drafter_batch with {asked}: vLLM's proposer supports only a padded drafter batch"
        f" there, and refuses it {AT_START}"
    )
    return Finding(CHECK, False, message, 'drop "disable_padded_drafter_batch" from --speculative-config')
