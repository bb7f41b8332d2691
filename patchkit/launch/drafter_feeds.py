"""What vLLM's model runner and EAGLE proposer ask of an EAGLE-3 drafter after the target's load, read
from the tree: the V2 model runner (VLLM_USE_V2_MODEL_RUNNER) of 0.12-0.16 hands it none of the target's
aux hidden states, and the proposer of 0.17-0.18 asks its class for get_top_tokens() under the
speculative config's use_local_argmax_reduction. Each rule gives (why, fix), or None."""

from __future__ import annotations

from patchkit.base.errors import escaped
from patchkit.launch.engine import LaunchContext
from patchkit.launch.lax import lax_true
from patchkit.launch.model_files import EAGLE_PROPOSER, MODELS_DIR
from patchkit.launch.vllm_env import int_flag

V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
V2_RUNNER_UNFED = b"None,  # aux_hidden_states"  # 0.12-0.16's V2 runner calls its speculator so
TOP_TOKENS_ASKED = b'hasattr(self.model, "get_top_tokens")'  # load_model's check (0.17-0.18)
TOP_TOKENS_DEFINED = b"def get_top_tokens("


def v2_runner_unfed(launch: LaunchContext) -> tuple[str, str] | None:
    """VLLM_USE_V2_MODEL_RUNNER (vLLM's bool(int(...)) of it) picks the V2 model runner, whose EAGLE step in
    0.12-0.16 hands the drafter no aux hidden states (the literal None the tree's runner passes): (why, fix)."""
    command = launch.command
    given = command.environ.get(V2_RUNNER_ENV, "")
    try:
        chosen = int_flag(command.environ, V2_RUNNER_ENV, None)
    except ValueError:
        return None  # vLLM's envs raise on it at start: refused before any load
    if not chosen or V2_RUNNER_UNFED not in (launch.read(V2_RUNNER) or b""):
        return None
    why = (
        f"{V2_RUNNER_ENV}={escaped(given)} picks vLLM's V2 model runner, which hands an EAGLE-3 drafter none "
        "of the target's aux hidden states: its drafts fail, after the target's load"
    )
    undo = f"drop {V2_RUNNER_ENV}={escaped(given)} from the command" if V2_RUNNER_ENV in command.env else None
    return why, f"{undo or f'unset {V2_RUNNER_ENV}'}: vLLM then runs its V1 model runner"


def top_tokens_missing(launch: LaunchContext, module: str) -> tuple[str, str] | None:
    """The speculative config's use_local_argmax_reduction makes the tree's EAGLE proposer (0.17-0.18) ask
    the drafter for get_top_tokens() in load_model, raising where its class has none: (why, fix), else None.
    The drafter's module and llama.py (whose LlamaForCausalLM the Llama-layer drafters extend) are read."""
    asked = (launch.command.speculative_config or {}).get("use_local_argmax_reduction")
    if not lax_true(asked) or TOP_TOKENS_ASKED not in (launch.read(EAGLE_PROPOSER) or b""):
        return None
    if any(TOP_TOKENS_DEFINED in (launch.read(f"{MODELS_DIR}/{name}.py") or b"") for name in (module, "llama")):
        return None
    why = f"use_local_argmax_reduction asks its class for get_top_tokens(), which {module}.py does not define"
    return why, 'drop "use_local_argmax_reduction" from --speculative-config: this drafter cannot use it'
