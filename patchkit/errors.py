"""The one exception hierarchy. Each class carries the exit code the CLI maps it to.

Exit codes (also in the README and `patchkit --help`):
  0  ok
  1  a check failed: conflict, verification failure, drift, partial state
  2  usage or bad input: malformed diff, bad option, unreadable manifest
  3  no patch set for this vLLM version
  4  target problem: vLLM not found, not writable, release sources unobtainable
"""

from __future__ import annotations

OK = 0
CHECK_FAILED = 1
BAD_INPUT = 2
NO_PATCH_SET = 3
TARGET_PROBLEM = 4


class PatchkitError(Exception):
    """Base of every error patchkit reports to a user (never with a traceback)."""

    exit_code = CHECK_FAILED

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class CheckFailed(PatchkitError):
    """A check did not pass: verification, drift, partial state."""

    exit_code = CHECK_FAILED


class Conflict(CheckFailed):
    """A hunk's context is not where the patch expects it."""


class Drift(CheckFailed):
    """A patched file was edited after patchkit wrote it."""


class BadInput(PatchkitError):
    """A malformed diff, manifest or option value."""

    exit_code = BAD_INPUT


class NoPatchSet(PatchkitError):
    """The library has no patch set for this vLLM version."""

    exit_code = NO_PATCH_SET


class TargetError(PatchkitError):
    """vLLM was not found where asked, or the tree cannot be written."""

    exit_code = TARGET_PROBLEM


class LockBusy(TargetError):
    """Another patchkit held the target's lock for longer than the timeout."""


class FetchError(TargetError):
    """Release sources could not be obtained from the package index."""
