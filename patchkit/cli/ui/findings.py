"""Failures first, then one verdict line: what failed (file:line, the source line of a syntax error
with a caret, the command that fixes it), what only follows from it folded into one line, and the
passing checks as one count."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import field, replace

from patchkit.base.enums import CheckStatus
from patchkit.base.errors import few
from patchkit.base.values import FrozenValue, frozen
from patchkit.checks import CheckResult
from patchkit.cli.ui.text import visible

# The patterns here are text, compiled on first use (re keeps them): start-up compiles none a run does not use.
_LINE_FIRST = r"(?s)line (\d+): (.*)"


@frozen
class Failure(FrozenValue):
    """One thing that failed, as a person reads it: where, what, and what to do."""

    what: str  # the check (or `drifted`, `conflict`...)
    message: str
    where: str = ""  # path, or path:line
    excerpt: str = ""  # the source line and its caret
    fix: str = ""
    warning: bool = False  # a warning: shown, but not a failure
    also: list[str] = field(default_factory=list)  # what failed only because of this one
    fixes: int = 1  # how many failures, this one last, its fix settles (fix_once)

    def heading(self) -> str:
        label = f"{self.what} warning" if self.warning else self.what
        where = visible(self.where, field=True)  # a recorded path holding a newline: one line still
        return f"{where}: {label}: {self.message}" if self.where else f"{label}: {self.message}"


def located(result: CheckResult) -> tuple[str, str]:
    """(path:line, the message without its line) for "line N: ..." messages; else (path, message)."""
    path = result.path or ""
    found = re.compile(_LINE_FIRST).fullmatch(result.message)
    if found and path:
        return f"{path}:{found.group(1)}", found.group(2)
    return path, result.message


def check_failures(results: list[CheckResult], fix: str = "", fixes: dict[str, str] | None = None) -> list[Failure]:
    """The failing results and the warnings, as failures (fold() then orders and folds them); a
    failure's fix is its check's in `fixes`, else `fix`."""
    failures = []
    for r in results:
        if r.status in (CheckStatus.FAIL, CheckStatus.WARNING):
            where, message = located(r)
            fixed = (fixes or {}).get(r.check, fix) if r.failed else ""
            failures.append(Failure(r.check, message, where, r.excerpt, fixed, not r.failed))
    return failures


SYNTAX, DRIFTED, GUARD = "syntax", "drifted", "guard"


def fold(failures: list[Failure]) -> list[Failure]:
    """Failures first (a syntax error first of all), then warnings; on a file with a syntax error
    (else a drifted file), whatever else is found on it, and the guard's refusal of it, folded
    into its one line: they follow from it."""
    leads: dict[str, Failure] = {}
    for failure in failures:
        path = _path_of(failure)
        if path and not failure.warning and _leads_before(failure, leads.get(path)):
            leads[path] = failure
    drifted = {_path_of(f) for f in failures if f.what == DRIFTED}
    kept: list[Failure] = []
    followers: dict[str, list[Failure]] = {path: [] for path in leads}
    for failure in failures:
        path = _path_of(failure)
        if path in leads and failure is not leads[path] and _follows(failure, leads[path], path in drifted):
            followers[path].append(failure)
        elif failure.what == GUARD and leads and _names_only(failure, leads):
            for path in leads:
                followers[path].append(failure)
        else:
            kept.append(failure)
    kept.sort(key=lambda f: (f.warning, _rank(f)))
    return _alike_once([_with_followers(f, followers[_path_of(f)]) if leads.get(_path_of(f)) is f else f for f in kept])


def _alike_once(failures: list[Failure]) -> list[Failure]:
    """Failures said alike of several files (each drifted file, the same fix): one line naming the
    first few files and how many more, at the first one's place (500 drifted files were 1,000 lines)."""
    alike: dict[tuple[object, ...], list[Failure]] = {}
    for failure in failures:
        alike.setdefault(_likeness(failure), []).append(failure)
    said: list[Failure] = []
    for failure in failures:
        group = alike[_likeness(failure)]
        if len(group) == 1:
            said.append(failure)
        elif failure is group[0]:
            files = few([f.where for f in group], sep=", ")
            also = [line.replace(" on it too", " on each too") for line in failure.also]
            said.append(
                replace(failure, message=f"{failure.message} ({len(group):,} files: {files})", where="", also=also)
            )
    return said


def _likeness(failure: Failure) -> tuple[object, ...]:
    """What failures said alike share: all but the file (one with a source line is its own)."""
    if not failure.where or failure.excerpt:
        return (id(failure),)
    return (failure.what, failure.message, failure.fix, tuple(failure.also), failure.warning, failure.fixes)


# What cannot judge a file that does not compile; what an edit after apply makes fail.
_BLIND_TO_BROKEN = {"names", "contract", "probe", "bytecode"}
_EDITED = {DRIFTED, "integrity"}


def _same(failure: Failure, lead: Failure) -> bool:
    """The same finding said twice (a drifted file's syntax error, by status and by the check)."""
    return (failure.what, failure.where, failure.message) == (lead.what, lead.where, lead.message)


def _follows(failure: Failure, lead: Failure, drifted: bool) -> bool:
    """`failure`, on the same file as `lead`, is only a consequence of it (or it again)."""
    return (
        _same(failure, lead)
        or (lead.what == SYNTAX and failure.what in _BLIND_TO_BROKEN)
        or (drifted and failure.what in _EDITED)
    )


def _names_only(guard: Failure, paths: dict[str, Failure]) -> bool:
    """The guard refuses the tree only for these files."""
    problems = guard.message.partition(": ")[2].split("; ")  # after refusal_text's lead
    if problems[-1].endswith(" more"):  # a list cut short: what the rest names is not told
        return False
    return all(any(path in problem for path in paths) for problem in problems)


def _leads_before(failure: Failure, lead: Failure | None) -> bool:
    """A syntax error leads a file's line, else its drift; of the same finding said twice, the
    one with the source line and caret."""
    if lead is not None and _same(failure, lead):
        return bool(failure.excerpt) and not lead.excerpt
    return _rank(failure) < _rank(lead)


def _rank(failure: Failure | None) -> int:
    if failure is None:
        return 3
    return {SYNTAX: 0, DRIFTED: 1}.get(failure.what, 2)


def _path_of(failure: Failure) -> str:
    return failure.where.partition(":")[0]


def _with_followers(lead: Failure, followers: list[Failure]) -> Failure:
    """`lead` with one `also` line naming what followed from it; a drifted file's fix is its fix."""
    names = [f.what for f in followers if not _same(f, lead)]
    counted = Counter(name for name in names if name not in (DRIFTED, GUARD))
    checks = [f"{name} \u00d7{n}" if n > 1 else name for name, n in counted.items()]
    # a bare check name ("also: names") says nothing to a reader: said as the checks that fail too
    said = [f"the {checks[0]} check fails on it too"] if len(checks) == 1 else []
    said += [f"the checks {', '.join(checks)} fail on it too"] if len(checks) > 1 else []
    if DRIFTED in names:
        said.insert(0, "drifted (edited after patchkit patched it)")
    if not said and GUARD not in names:
        return lead
    also = "; ".join(said)
    if GUARD in names:
        also += ("; " if also else "") + "the launch guard refuses this tree"
    fix = next((f.fix for f in followers if f.what == DRIFTED and f.fix), lead.fix)
    return Failure(lead.what, lead.message, lead.where, lead.excerpt, fix, lead.warning, [*lead.also, also])


def fix_once(failures: list[Failure]) -> list[Failure]:
    """Failures that one fix settles said together, the fix once under the last of them (five
    `fix: run patchkit apply` in a row said nothing more than one), at the first one's place."""
    first: dict[str, int] = {}
    for index, failure in enumerate(failures):
        first.setdefault(failure.fix or f"\0{index}", index)
    grouped = sorted(enumerate(failures), key=lambda pair: (first[pair[1].fix or f"\0{pair[0]}"], pair[0]))
    shown = [failure for _, failure in grouped]
    said: list[Failure] = []
    for i, failure in enumerate(shown):
        if failure.fix and i + 1 < len(shown) and shown[i + 1].fix == failure.fix:
            said.append(replace(failure, fix=""))
        else:
            group = sum(1 for other in shown if failure.fix and other.fix == failure.fix)
            said.append(replace(failure, fixes=max(group, 1)))
    return said


def count_line(results: list[CheckResult], *, verbose: bool) -> str:
    """ "25 checks passed, 1 skipped (-v shows each)": the checks that did not fail, counted."""
    statuses = Counter(r.status for r in results)
    failed = statuses[CheckStatus.FAIL]
    parts = [f"{failed} of {len(results)} checks failed"] if failed else []
    passed = statuses[CheckStatus.PASS]
    parts.append(f"{passed} passed" if failed else f"{passed} check{'s' if passed != 1 else ''} passed")
    for status in (CheckStatus.WARNING, CheckStatus.SKIPPED):
        if statuses[status]:
            word = "skipped" if status == CheckStatus.SKIPPED else "warnings" if statuses[status] > 1 else "warning"
            parts.append(f"{statuses[status]} {word}")
    more = "" if verbose or not results else " (-v shows each)"
    return ", ".join(parts) + more
