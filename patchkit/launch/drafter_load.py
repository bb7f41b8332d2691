"""The load format vLLM loads the drafter with. From 0.17 the speculative config's draft_load_config is
the drafter's own LoadConfig: the V1 EagleProposer (eagle, eagle3, mtp) hands it to get_model in place of
the launch's, and one given without "load_format" is LoadConfig's default (auto), not the launch's
--load-format. DraftModelProposer and the V2 runner's speculator (0.17) load with the launch's. Read
from the tree: the proposer's file that hands draft_load_config to its loader."""

from __future__ import annotations

from collections.abc import Callable

from patchkit.launch.command import LaunchCommand
from patchkit.launch.model_files import EAGLE_PROPOSER
from patchkit.launch.vllm_env import V2_RUNNER, int_flag

DRAFT_MODEL_PROPOSER = "vllm/v1/spec_decode/draft_model.py"
V2_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/eagle/utils.py"  # load_eagle_model (0.17)
OWN_LOAD = b"speculative_config.draft_load_config"
KEY = "draft_load_config"
EAGLE_METHODS = ("eagle", "eagle3", "mtp")
LOAD_DEFAULT = "auto"  # LoadConfig.load_format's default (0.11-0.17)


def launch_load_format(command: LaunchCommand) -> str:
    return command.optional_text("load-format") or LOAD_DEFAULT


def drafter_load_format(command: LaunchCommand, read: Callable[[str], bytes | None], method: str | None) -> str:
    """The load format of the loader vLLM loads the drafter with: draft_load_config's where the
    speculative config gives one and the tree's proposer for the launch's `method` (the one vLLM
    settles on: patchkit/launch/method.py) hands it to its loader; else the launch's --load-format."""
    own = _own(command, read, method)
    if own is None:
        return launch_load_format(command)
    given = own.get("load_format")
    return OwnFormat(given if isinstance(given, str) and given else LOAD_DEFAULT)


class OwnFormat(str):
    """A load format draft_load_config gives the drafter (its loader's other settings are its own too)."""


def said(command: LaunchCommand, read: Callable[[str], bytes | None], method: str | None) -> str:
    """Where the drafter's load format comes from, as a message says it."""
    load_format = drafter_load_format(command, read, method)
    if _own(command, read, method) is not None:
        return f"--speculative-config's {KEY} (load_format {load_format})"
    return f"--load-format {load_format}"


def _own(command: LaunchCommand, read: Callable[[str], bytes | None], method: str | None) -> dict[str, object] | None:
    """The speculative config's draft_load_config where the tree's proposer loads the drafter with it."""
    own = (command.speculative_config or {}).get(KEY)
    path = _proposer_file(command, method)
    if not isinstance(own, dict) or path is None or OWN_LOAD not in (read(path) or b""):
        return None
    return own


def _proposer_file(command: LaunchCommand, method: str | None) -> str | None:
    """The tree file of the proposer that loads the launch's drafter (V1's, or the V2 runner's)."""
    if method == "draft_model":
        return DRAFT_MODEL_PROPOSER
    if method not in EAGLE_METHODS:
        return None
    return V2_SPECULATOR if _v2_runner(command) else EAGLE_PROPOSER


def _v2_runner(command: LaunchCommand) -> bool:
    try:
        return bool(int_flag(command.environ, V2_RUNNER))
    except ValueError:  # vLLM's envs raise on it: not the runner that loads
        return False
