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
    # no patch applied, and one does not apply: a file differs from stock there (a local edit)
    CONFLICT = "conflict"
    UPSTREAM = "upstream"
    # the files hold the set's change with no apply recorded, and nothing proves them the release's
    # stock files (a checkout, a lost record): upstream's or a hand's, never called upstream
    UNRECORDED = "unrecorded"
    UNSUPPORTED = "unsupported"


class SelectionKind(StrEnum):
    """What the library holds for a vLLM version."""

    PATCH = "patch"
    UPSTREAM = "upstream"
    UNSUPPORTED = "unsupported"


class Holder(StrEnum):
    """Who put a series' change in files that hold it with no apply of patchkit's recorded."""

    STOCK = "stock"  # the release's stock files: its RECORD (or the fetch cache's) lists them so
    UNKNOWN = "upstream-or-hand"  # nothing tells (a checkout, no cached release to compare with)
    HAND = "hand"  # unlike the release's stock files in the fetch cache: applied by hand


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
    FAILED = "failed"  # apply of several sets: a set's error that is no conflict and no failed check
    UNSUPPORTED = "unsupported"


class OutputFormat(StrEnum):
    """A command's --format: what it writes on stdout."""

    TEXT = "text"
    JSON = "json"
    JUNIT = "junit"
    MARKDOWN = "markdown"


class WorkerStatus(StrEnum):
    """A `_target/` worker's answer. The workers run by path under -I and write plain strings;
    launch.validation reads them into this enum in one place (an unknown one reads as None)."""

    OK = "ok"
    NO_VLLM = "no-vllm"
    UNANSWERED = "unanswered"
    NOT_REGISTERED = "not-registered"
    INVALID = "invalid"
    AFTER_LOAD = "after-load"  # create_engine_config() accepts it; what the server runs after the load refuses it
    ERROR = "error"
    PLUGIN_FAILED = "plugin-failed"
    PLUGIN_RUNNING = "plugin-running"
    MIDDLEWARE_IMPORTING = "middleware-importing"  # the answer file while a --middleware module imports
    MEMORY = "memory"  # engine_config hit its memory bound (DATA_BOUND): no verdict


class BuildStatus(StrEnum):
    """engine_config's verdict on the drafter it built (_target/drafter_build.py), read in launch.validation."""

    BUILT = "built"
    FAILED = "failed"  # vLLM's build or load raised: the launch fails there
    CANNOT = "cannot"  # not attempted, or not to a verdict (its reason)
    BUILDING = "building"  # the answer file while the build runs
