"""The one exception hierarchy. Each class carries the exit code the CLI maps it to.

Exit codes (also in the README and `patchkit --help`):
  0  ok
  1  a check failed: conflict, verification failure, drift, partial state
  2  usage or bad input: malformed diff, bad option, unreadable manifest
  3  no patch set for this vLLM version
  4  target problem: vLLM not found, not writable, release sources unobtainable
 70  internal error: a bug in patchkit (EX_SOFTWARE of sysexits.h), never a verdict on the tree
130  interrupted: 128 + the signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP); the message says whether the change was written
141  the reader of the output went away (a closed pipe: `patchkit list | head -1`), as a shell reports SIGPIPE

A command that ends without an error returns a result whose `outcome` (enums.Outcome) the CLI
maps to the exit code with exit_code_for; an error carries its own code. Nothing else exits.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence

from patchkit.base import hints
from patchkit.base.enums import Outcome
from patchkit.base.values import FrozenValue, frozen

OK = 0
CHECK_FAILED = 1
BAD_INPUT = 2
NO_PATCH_SET = 3
TARGET_PROBLEM = 4
INTERNAL_ERROR = 70
INTERRUPTED = 130
BROKEN_PIPE = 141

_OUTCOME_EXIT_CODES = {
    Outcome.CONFLICT: CHECK_FAILED,
    Outcome.CHECK_FAILED: CHECK_FAILED,
    Outcome.BYTECODE_FAILED: CHECK_FAILED,
    Outcome.UNSUPPORTED: NO_PATCH_SET,
}


QUOTE_LIMIT = 160  # what a message quotes of a file's content: enough to recognize it, never a file


def quoted(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text` read from a file (a #! line, a value), as a message quotes it: its head alone when longer
    than `limit`, saying how long it is, so that no file fills a message."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def excerpt(text: str, limit: int = 300) -> str:
    """Another program's error text as a message quotes it: whole up to `limit` characters, else its
    head (where the problem is named) and its end (where a traceback's exception is), the middle left out."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]} ... ({len(text) - limit:,} characters left out) ... {text[head - limit :]}"


def ended_how(status: int) -> str:
    """How a child process ended, from its exit status (negative: the signal that killed it)."""
    if status >= 0:
        return f"exited with status {status}"
    if -status == signal.SIGKILL:  # no program sends it to itself; the kernel does when memory runs out
        return "was killed (SIGKILL: the kernel's out-of-memory killer, or another process)"
    try:
        return f"was killed by {signal.Signals(-status).name}"
    except ValueError:
        return f"was killed by signal {-status}"


def killed_fix(status: int) -> str | None:
    """What to do about a child a signal killed (None: it exited by itself)."""
    if status >= 0:
        return None
    return "free memory, then run it again" if -status == signal.SIGKILL else "run it again"


SHOWN_PROBLEMS = 3  # a list of problems in a message: the first few, then how many more


def more_said(rest: int) -> str:
    """What follows the items a message names, when it leaves `rest` out: " +N more"."""
    return f" +{rest:,} more" if rest else ""


def escaped(text: str, keep: str = "") -> str:
    """Text read from a file or a record (a recorded path), as a message shows it: each character
    that is not printable escaped, but those in `keep` (the console keeps tab and newline): a control
    (a newline too: it would split the message's line) and undecodable byte as \\xNN, one above
    U+00FF as \\uNNNN (a line or paragraph separator, a bidi override U+202A-U+202E, U+2066-U+2069
    and every other format character: each would break or reorder a terminal's line)."""
    if text.isprintable():
        return text
    if "\n" in keep and "\n" in text:  # a line at a time: a long text is mostly lines printable as they are
        return "\n".join(escaped(line, keep) for line in text.split("\n"))
    return "".join(c if c.isprintable() or c in keep else escape_of(c) for c in text)


def escape_of(char: str) -> str:
    """The escape a message writes for one non-printable character: a surrogate-escaped byte as
    the byte it stands for (\\xff), C0/C1 controls as \\xNN, anything above as \\uNNNN or \\UNNNNNNNN."""
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def few(problems: Sequence[str], shown: int = SHOWN_PROBLEMS, sep: str = "; ") -> str:
    """`problems` as one message says them: the first `shown`, each escaped, then how many more
    (a record naming thousands of files is a line, not megabytes)."""
    return sep.join(escaped(problem) for problem in problems[:shown]) + more_said(max(len(problems) - shown, 0))


def exit_code_for(outcome: Outcome) -> int:
    """The exit code of a command that ended with this outcome (every other outcome is 0)."""
    return _OUTCOME_EXIT_CODES.get(outcome, OK)


class PatchkitError(Exception):
    """Base of every error patchkit reports to a user (never with a traceback). Raise a subclass: each
    says what kind of failure it is, and so its exit code."""

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


class BreaksSet(CheckFailed):
    """A write that is not a set's own would break that set (engine/held.py): `set_name` names it."""

    def __init__(self, message: str, *, hint: str | None = None, set_name: str = ""):
        super().__init__(message, hint=hint)
        self.set_name = set_name


def drift_refused(changed: Mapping[str, str], one: Callable[[str, str], str], several: str, *, restores: str) -> Drift:
    """The Drift refusing to write over the files in `changed` (path -> how it changed, or "" where
    that goes unsaid). One file: `one(path, how)`. Several: `several` (the count is the caller's), then
    each on its own line as git names the files a checkout would overwrite. The hint: revert --force
    restores `restores` ("s" added for several) and keeps a copy of the edits."""
    fix = hints.command("revert", "--force")
    if len(changed) == 1:
        ((path, how),) = changed.items()
        return Drift(one(escaped(path), how), hint=f"{fix} restores {restores} and keeps a copy of your edit")
    listed = "".join(f"\n  {escaped(path)} ({how})" if how else f"\n  {escaped(path)}" for path, how in changed.items())
    return Drift(f"{several}:{listed}", hint=f"{fix} restores {restores}s and keeps a copy of your edits")


class BadInput(PatchkitError):
    """A malformed diff, manifest or option value."""

    exit_code = BAD_INPUT


class TreeRefused(BadInput):
    """The target's own record, journal or .patchkit/ is in a state no command acts on (damaged,
    not patchkit's, unsealed): the tree needs the repair the hint names, whatever the command."""


class NoPatchSet(PatchkitError):
    """The library has no patch set for this vLLM version."""

    exit_code = NO_PATCH_SET


class TargetError(PatchkitError):
    """vLLM was not found where asked, or the tree cannot be written."""

    exit_code = TARGET_PROBLEM


class OutputUnwritable(TargetError):
    """patchkit's own stdout or stderr cannot be written (a full disk under a redirected log, EIO)."""


class ToolFailed(TargetError):
    """A program patchkit runs (git) failed for a reason of its own: the machine's problem, not the tree's."""


class InternalError(PatchkitError):
    """patchkit caught itself being wrong (an invariant that does not hold): a bug, never a verdict."""

    exit_code = INTERNAL_ERROR


class LockBusy(TargetError):
    """Another patchkit held the target's lock for longer than the timeout."""


class FetchError(TargetError):
    """Release sources could not be obtained from the package index."""


class NoIndex(FetchError):
    """No package index pip names could be asked, or none answered (no-index, down): a caller
    holding another way (a cached file) says it instead."""


class IndexNotRead(NoIndex):
    """pip takes vLLM from where patchkit does not read (a file:// index, find-links): the caller's
    hint says what works instead."""


@frozen
class Finished(FrozenValue):
    """What a command without a richer result hands the CLI: its outcome, and the error to report."""

    outcome: Outcome = Outcome.OK
    error: PatchkitError | None = None
