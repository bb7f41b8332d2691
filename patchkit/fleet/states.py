"""The names of a fleet's states: a node's, where a fleet apply ended, what a Ray error means."""

from __future__ import annotations

from patchkit.base.enums import StrEnum


class NodeState(StrEnum):
    """A fleet node's state where the fleet, not the node's patchkit, says it (a node's own answer
    carries its tree's state or its command's result)."""

    READY = "ready"  # fleet prepare: the node can apply
    ERROR = "error"  # no JSON from the node's patchkit, or its agent could not start
    FAILED = "failed"  # the node's patchkit answered with an error of its own (a full disk, say)
    UNWRITABLE = "unwritable"  # the Ray worker's user cannot write the target
    DRIFTED = "drifted"  # applied, and a patched file edited since: status FAILED, the guard refuses
    NOT_RUN = "not-run"
    LOST = "lost"  # the node died, its agent crashed, or it cannot be scheduled
    TIMED_OUT = "timed-out"
    ENDING = "ending"  # its agent ended (idle) or is ending: asked again
    BUSY = "busy"  # another fleet apply's write there is undecided: not run (a write, or phase 1 of one)
    HELD = "held"  # its agent is held for this run (a claim's answer, never shown)
    INTERRUPTED = "interrupted"  # a signal came before its answer
    ROLLED_BACK = "rolled-back"
    ROLLBACK_FAILED = "rollback-failed"
    MIXED = "mixed"  # the nodes' states differ


class FleetPhase(StrEnum):
    """Where a fleet apply ended."""

    PREPARE = "prepare"  # phase 1 refused: nothing written
    APPLY = "apply"  # phase 2 ran on every node
    ROLLED_BACK = "rolled-back"  # phase 2 failed somewhere: the nodes written were reverted


class RayFailure(StrEnum):
    """What a Ray error means for a node's step (fleet.cluster.ray_failure)."""

    AGENT_ENDED = "agent-ended"  # the agent was ended on purpose: start a new one
    PATCHKIT_FAILED = "patchkit-failed"  # the task ran and failed, or the agent could not be created
    NODE_LOST = "node-lost"
