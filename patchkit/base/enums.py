"""The names of patchkit's states and outcomes, each a `str` enum whose value is what JSON and
text output show. Distinct meanings get distinct names: a plan step is `ALREADY_APPLIED` ("applied")
while a tree is `TreeState.APPLIED` (also "applied"); an apply result is `Outcome.ALREADY_APPLIED`
("already-applied")."""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """A str whose str() and format() are its value (enum.StrEnum from Python 3.11 on)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class StepState(StrEnum):
    """A patch of a plan: will it change the tree, is its change there already, or neither."""

    WILL_CHANGE = "apply"
    ALREADY_APPLIED = "applied"
    CONFLICT = "conflict"


class FileKind(StrEnum):
    """What a patch does to one file."""

    ADD = "add"
    DELETE = "delete"
    RENAME = "rename"
    MODIFY = "modify"


class PatchState(StrEnum):
    """A patch as `status` reports it."""

    APPLIED = "applied"
    NOT_APPLIED = "not-applied"
    CONFLICT = "conflict"


class TreeState(StrEnum):
    """A target tree for its patch set, as `status` reports it."""

    APPLIED = "applied"
    NOT_APPLIED = "not-applied"
    PARTIAL = "partial"
    UPSTREAM = "upstream"
    UNSUPPORTED = "unsupported"


class SelectionKind(StrEnum):
    """What the library holds for a vLLM version."""

    PATCH = "patch"
    UPSTREAM = "upstream"
    UNSUPPORTED = "unsupported"


class LibraryPatchState(StrEnum):
    """A patch file of the library as `list` reports it."""

    OK = "ok"  # its sha256 is the one the series records
    UNRECORDED = "unrecorded"  # the series records no sha256 for it
    DAMAGED = "damaged"  # unreadable, or its sha256 differs from the recorded one


class ReleaseOutcome(StrEnum):
    """A release verified from its stock files (`verify --vllm-version/--all/--latest`)."""

    PATCHED = "patched"
    UPSTREAM = "upstream"
    CONFLICT = "conflict"
    CHECK_FAILED = "check-failed"
    UNSUPPORTED = "unsupported"


class CheckLevel(StrEnum):
    """How much a check result that is not ok weighs: an error fails verify and stops apply."""

    ERROR = "error"
    WARNING = "warning"


class MatrixCell(StrEnum):
    """A cell of the compatibility matrix: a release (or a library range) for one set."""

    APPLIED = "applied"
    UPSTREAM = "upstream"
    CONFLICT = "conflict"
    FAILED = "failed"
    UNSUPPORTED = "unsupported"  # in the set's range without a series
    NOT_COVERED = "-"  # outside the set's range


class CheckStatus(StrEnum):
    """A check result as tables and JUnit show it."""

    PASS = "pass"
    FAIL = "fail"
    WARNING = "warning"
    SKIPPED = "skipped"  # a passing result at warning level: the check did not run


class Outcome(StrEnum):
    """How a command ended; errors.exit_code_for maps it to the exit code."""

    OK = "ok"
    APPLIED = "applied"
    ALREADY_APPLIED = "already-applied"
    DRY_RUN = "dry-run"
    UPSTREAM = "upstream"
    REVERTED = "reverted"
    NOT_APPLIED = "not-applied"  # revert: nothing to do, the tree is stock
    CONFLICT = "conflict"
    CHECK_FAILED = "check-failed"
    BYTECODE_FAILED = "bytecode-failed"
    UNSUPPORTED = "unsupported"


class NodeState(StrEnum):
    """A fleet node's state where the fleet, not the node's patchkit, says it (a node's own answer
    carries its tree's state or its command's result)."""

    READY = "ready"  # fleet prepare: the node can apply
    ERROR = "error"
    UNWRITABLE = "unwritable"  # the Ray worker's user cannot write the target
    NOT_RUN = "not-run"
    LOST = "lost"  # the node died, its agent crashed, or it cannot be scheduled
    TIMED_OUT = "timed-out"
    ENDING = "ending"  # its agent ended (idle) or is ending: asked again
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


class PatchChange(StrEnum):
    """What `refresh` or `port` did to one patch file of a series."""

    UNCHANGED = "unchanged"
    UPDATED = "updated"
    NEW = "new"
    REMOVED = "removed"


class SharedState(StrEnum):
    """A release that shares the refreshed series, as `refresh` checked it."""

    APPLIES = "applies"
    CONFLICT = "conflict"
    NOT_VERIFIED = "not-verified"


class PortOutcome(StrEnum):
    """How `port` ended."""

    PORTED = "ported"
    CONFLICTS = "conflicts"
    UPSTREAM = "upstream"  # the new release has the change itself: nothing written
    IDENTICAL = "identical"  # the series applies to the new release as it is
