"""An EAGLE-3 head that vLLM runs under method "eagle" (EAGLE-1): the method given so, or the one its
SpeculativeConfig takes from "eagle-" in the drafter's name, which it tests before "eagle3"
("EAGLE-3-head" is EAGLE-1 to it). Its EAGLEConfig then names the drafter's class Eagle<architecture>
(kept when it starts with Eagle): an EAGLE-3 head's LlamaForCausalLMEagle3 becomes
EagleLlamaForCausalLMEagle3, which no registry holds; an Eagle3LlamaForCausalLM is built, but the
EAGLE-1 proposer feeds it the target's last hidden state, not the aux hidden states it was trained
on. Both are read from the tree's files; where they differ, "cannot judge". Any other EAGLE-1 head
is held to -tp splitting its attention heads (patchkit/launch/drafter_heads.py).
Any other drafter under eagle or mtp (EAGLE-1 heads, a separate MTP checkpoint) is held to the target's
hidden size: the proposer copies the target's hidden states, unconverted, into a buffer as wide as the
drafter's hidden_size (only eagle3 combines them first)."""

from __future__ import annotations

from typing import Any

from patchkit.base.errors import escaped
from patchkit.launch.drafter_heads import heads_unsplit, when_refused
from patchkit.launch.drafter_quant_files import quant_config_unfound
from patchkit.launch.eagle_one_weights import weights_unjudged
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.method import settled_method
from patchkit.launch.model_files import BASE_PROPOSER, EAGLE_PROPOSER
from patchkit.launch.mtp_heads import mtp_heads_findings
from patchkit.launch.target_heads import tp_refused

EAGLE_CONFIG = "vllm/transformers_utils/configs/eagle.py"
EAGLE1_NAMED = b'f"Eagle{arch}" if not arch.startswith("Eagle")'  # EAGLEConfig's rename under eagle (0.11-0.17)
AUX_ONLY_UNDER_EAGLE3 = b'if self.method == "eagle3":'  # the proposer combines aux hidden states only then
CHECK = "drafter-architecture"
FIX = 'write "method": "eagle3" in --speculative-config'
WIDTH_CHECK = "drafter-hidden-size"
DRAFTER_WIDE = b"self.hidden_size = self.draft_model_config.get_hidden_size()"  # the buffer's width
COPIED = b"self.hidden_states[:num_tokens] = target_hidden_states"  # the target's states, as they come
WIDENED = b"hc_mult"  # DeepSeek-V4's MTP widens the buffer by the config's hc_mult: not judged
FED_AS_THEY_COME = ("eagle", "mtp")


def eagle1_findings(launch: Any) -> list[Finding]:
    """A failed drafter-architecture finding for an EAGLE-3 head (an architecture named Eagle3) that
    vLLM runs under method eagle; for other drafters under eagle or mtp, their hidden size held to the
    target's; none for other methods."""
    drafter, method = launch.drafter, settled_method(launch.command, launch.drafter, launch.read)
    if drafter is None or method not in FED_AS_THEY_COME:
        return []
    own = eagle_config_archs(drafter.config)
    archs = own if isinstance(own, list) else [a for a in drafter.architectures if isinstance(a, str)]
    if method != "eagle" or not any(a.startswith("Eagle3") or a.endswith("Eagle3") for a in archs):
        heads = _eagle1_head(launch, archs) if method == "eagle" else mtp_heads_findings(launch)
        return heads + _width_findings(launch, method)  # an EAGLE-1 drafter, an MTP one, or one of no kind said
    head = f"drafter '{escaped(drafter.name)}' is an EAGLE-3 head, but vLLM runs it as EAGLE-1 ({_why(launch)})"
    if drafter.config.get("model_type") == "eagle":
        built = archs  # a config of vLLM's own EAGLEConfig is not renamed
    elif EAGLE1_NAMED in (launch.read(EAGLE_CONFIG) or b""):
        built = [a if a.startswith("Eagle") else f"Eagle{a}" for a in archs]
    else:
        return [cannot_judge(CHECK, f"{head}: the tree's {EAGLE_CONFIG} is not read", FIX)]
    tables = launch.registry().values()
    registered = [name for name in built if any(name in table for table in tables)]
    if not registered:
        said = f"{head}: it names the class {', '.join(built)}, which it does not register, and fails"
        return [Finding(CHECK, False, said, FIX)]
    if AUX_ONLY_UNDER_EAGLE3 not in (launch.read(EAGLE_PROPOSER) or b""):
        return [cannot_judge(CHECK, f"{head}: the tree's {EAGLE_PROPOSER} is not read", FIX)]
    said = f"{head}: it builds {registered[0]} and feeds it the target's last hidden state, not the aux hidden states it was trained on"
    return [Finding(CHECK, False, said, FIX)]


def _eagle1_head(launch: Any, archs: list[str]) -> list[Finding]:
    """The findings of an EAGLE-1 head: its class (registered, its heads split by -tp), its vocabulary,
    and its weights (not judged statically, once its class is not refused)."""
    unbuilt = _unbuilt(launch, archs)
    if any(not f.ok for f in unbuilt):
        return unbuilt + _vocabulary(launch)  # refused at start: nothing is built
    quant = quant_config_unfound(launch)  # llama_eagle.py builds it with the drafter's own quantization too
    unread = (
        []
        if quant is None
        else [
            Finding(
                CHECK,
                False,
                f"the EAGLE-1 drafter {escaped(launch.drafter.name)}: {quant[0]}: vLLM fails building it, after the target's load",
                quant[1],
            )
        ]
    )
    return [*unbuilt, *_unsplit(launch), *_vocabulary(launch), *unread, weights_unjudged(launch)]


def _unbuilt(launch: Any, archs: list[str]) -> list[Finding]:
    """An EAGLE-1 head whose Eagle<architecture> names no class of the tree's registry: vLLM's
    SpeculativeConfig refuses it at start (the same renaming in EAGLEConfig 0.11-0.34). "cannot judge"
    where the renaming or the registry is not read, or the config's auto_map may give the class."""
    drafter = launch.drafter
    own, head = eagle_config_archs(drafter.config), f"drafter '{escaped(drafter.name)}' runs as EAGLE-1"
    if isinstance(own, str):
        return [cannot_judge(CHECK, f"{head}: which class vLLM's EAGLEConfig names for it is not known: {own}", None)]
    if not archs:
        return []
    tables = launch.registry().values()
    built = archs if own is not None else [a if a.startswith("Eagle") else f"Eagle{a}" for a in archs]
    if "auto_map" in drafter.config or not any(tables) or EAGLE1_NAMED not in (launch.read(EAGLE_CONFIG) or b""):
        unread = (
            "its config's auto_map may give it"
            if "auto_map" in drafter.config
            else f"the tree's {EAGLE_CONFIG} (its renaming) or registry is not read"
        )
        said = f"{head}: whether vLLM has the class it names for it (Eagle<architecture>) is not known: {unread}"
        return [cannot_judge(CHECK, said, f"check that vLLM's registry holds {escaped(built[0])}")]
    if any(name in table for table in tables for name in built):
        return []
    said = (
        f"{head} ({_why(launch)}): vLLM names its class"
        f" {', '.join(escaped(b) for b in built)}, which its registry does not hold, and refuses the launch at start"
    )
    fix = "use a drafter made for method eagle (vLLM builds EAGLE-1 heads as Eagle<architecture>), or the method it was made for"
    return [Finding(CHECK, False, said, fix)]


def eagle_config_archs(config: dict[str, Any]) -> list[str] | str | None:
    """The architectures vLLM's own EAGLEConfig (a config.json of model_type eagle) gives the drafter:
    its inner model's, renamed by the config's method (eagle: Eagle<arch>; eagle3: Eagle3<arch>, as
    0.11-0.34 do), the top-level ones ignored; why they are not read (a str); None for another config."""
    if config.get("model_type") != "eagle":
        return None
    inner, method = config.get("model"), config.get("method", "eagle")
    archs = inner.get("architectures") if isinstance(inner, dict) else None
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        return "its inner model (config.json's model) gives no architectures"
    if method == "eagle":
        return [a if a.startswith("Eagle") else f"Eagle{a}" for a in archs]
    if method == "eagle3":
        return [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}" for a in archs]
    return f"its method {escaped(repr(method))} is not one patchkit reads (eagle, eagle3)"


def _unsplit(launch: Any) -> list[Finding]:
    """An EAGLE-1 head whose attention heads the launch's -tp does not split: vLLM asserts building it
    in the target's tensor-parallel group. An EAGLEConfig (model_type eagle) is judged by its inner model."""
    config, inner = launch.drafter.config, launch.drafter.config.get("model")
    if config.get("model_type") == "eagle" and isinstance(inner, dict) and "num_attention_heads" not in config:
        config = inner
    tp = launch.command.tensor_parallel_size
    found = (
        None
        if tp_refused(launch.target, tp)
        else heads_unsplit(config, tp, launch.command.uses_mla(launch.drafter.config, launch.read, eagle=True))
    )
    if found is None:
        return []
    said = f"drafter '{escaped(launch.drafter.name)}' runs as EAGLE-1 ({_why(launch)}), but {found[0]}"
    when = when_refused(found, launch.command.speculative_config or {}, launch.read)
    return [Finding(CHECK, False, f"{said}: {when}", found[1])]


def _vocabulary(launch: Any) -> list[Finding]:
    """An EAGLE-1 head of a vocab_size not the target's: "cannot judge". Unlike EAGLE-3's, its proposer
    takes the target's embedding and lm_head in place of the head's when the head's weights lack them
    or equal the target's, which only the load shows."""
    config, inner = launch.drafter.config, launch.drafter.config.get("model")
    if config.get("model_type") == "eagle" and isinstance(inner, dict) and "vocab_size" not in config:
        config = inner
    own, target = config.get("vocab_size"), launch.target.text_config.get("vocab_size")
    if own == target and type(own) is int:
        return []
    said = (
        f"drafter '{escaped(launch.drafter.name)}' runs as EAGLE-1 ({_why(launch)}): its vocab_size {_shown(own)},"
        f" the target's {_shown(target)}; whether vLLM shares the target's embedding with it is known only at load"
    )
    return [cannot_judge("drafter-vocabulary", said, "use a drafter made for this target's vocabulary")]


def _why(launch: Any) -> str:
    given = (launch.command.speculative_config or {}).get("method")
    if given == "eagle":
        return 'method "eagle" given'
    return f'"eagle-" in its name {escaped(launch.command.draft_model_name(str((launch.command.speculative_config or {}).get("model"))))}'


def _width_findings(launch: Any, method: str) -> list[Finding]:
    """A failed drafter-hidden-size finding when the drafter's hidden_size is not the target's (under
    eagle or mtp); "cannot judge" when either size or the tree's proposer is not read plainly."""
    drafter, target = launch.drafter, launch.target
    wide, fed = _hidden_size(drafter.config), target.text_config.get("hidden_size")
    if wide == fed and type(wide) is int:
        return []
    head = f"drafter '{escaped(drafter.name)}' (method {method})"
    fix = f"use a drafter made for this target (hidden_size {fed})" if type(fed) is int else None
    if type(wide) is not int or type(fed) is not int or wide <= 0 or fed <= 0:
        said = f"{head}: its hidden_size {_shown(wide)} or the target's {_shown(fed)} is not a size"
        return [cannot_judge(WIDTH_CHECK, said, fix or "give both config.json files a hidden_size")]
    sources = [(path, launch.read(path) or b"") for path in (BASE_PROPOSER, EAGLE_PROPOSER)]
    path, rules = next(((p, s) for p, s in sources if DRAFTER_WIDE in s and COPIED in s), (EAGLE_PROPOSER, b""))
    if not rules or (WIDENED in rules and any(WIDENED.decode() in c for c in (drafter.config, target.text_config))):
        said = f"{head} has hidden_size {wide}, the target {fed}, and how the tree's proposer feeds it is not read"
        return [cannot_judge(WIDTH_CHECK, said, fix)]
    said = (
        f"{head} has hidden_size {wide}, the target {fed}: vLLM's proposer ({path}) copies the target's"
        f" {fed}-wide hidden states into the drafter's {wide}-wide buffer and fails after the target's load"
    )
    return [Finding(WIDTH_CHECK, False, said, fix)]


def _hidden_size(config: dict[str, Any]) -> object:
    """The drafter's hidden_size as vLLM's EAGLEConfig gives it: its own, else (a config of model_type
    eagle) its inner model's; a multimodal drafter's text config's."""
    inner = config.get("model")
    if config.get("model_type") == "eagle" and isinstance(inner, dict) and "hidden_size" not in config:
        return inner.get("hidden_size")
    text = config.get("text_config")
    return (text if isinstance(text, dict) else config).get("hidden_size")


def _shown(value: object) -> str:
    return escaped(repr(value)) if value is not None else "(none)"
