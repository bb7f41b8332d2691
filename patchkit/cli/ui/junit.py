"""JUnit XML reports: a testcase per release, or per check on a target."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from patchkit.base.enums import CheckStatus, ReleaseOutcome
from patchkit.base.values import FrozenValue, frozen
from patchkit.cli.ui.text import visible

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.checks import CheckResult
    from patchkit.releases.check import ReleaseResult


@frozen
class JUnitCase(FrozenValue):
    """One <testcase> of a JUnit report: passed, failed, skipped or an error."""

    name: str
    seconds: float = 0.0
    failure: str | None = None  # the one-line reason; None: passed
    details: str = ""
    skipped: str | None = None
    output: str = ""
    kind: str = "failure"  # the <failure type=...> (or <error type=...>)
    error: str | None = None  # the run could not judge this case: an <error>, not a <failure>


def junit(suite: str, cases: list[JUnitCase], command: str = "verify") -> str:
    """JUnit XML: one <testsuite>, a <testcase> per case, <failure>/<skipped> where they apply;
    the <testsuites> named after the command that wrote it (`patchkit preflight`)."""
    return junit_suites([(suite, cases)], command)


def junit_suites(suites: list[tuple[str, list[JUnitCase]]], command: str = "verify") -> str:
    """One JUnit document: a <testsuite> per (name, cases), their counts summed in <testsuites>.
    Several sets on one target go into one document: a reader parses one root element only."""
    # lazy: only a JUnit report needs it
    import xml.etree.ElementTree as ET

    every = [c for _, cases in suites for c in cases]
    root = ET.Element("testsuites", {"name": f"patchkit {command}", **_counts(every)})
    for suite, cases in suites:
        suite_el = ET.SubElement(root, "testsuite", {"name": suite, **_counts(cases)})
        for c in cases:
            _add_case(ET, suite_el, suite, c)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _counts(cases: list[JUnitCase]) -> dict[str, str]:
    """The tests/failures/errors/skipped/time attributes of a <testsuite> (or <testsuites>)."""
    return {
        "tests": str(len(cases)),
        "failures": str(sum(1 for c in cases if c.failure)),
        "errors": str(sum(1 for c in cases if c.error and not c.failure)),
        "skipped": str(sum(1 for c in cases if c.skipped and not (c.failure or c.error))),
        "time": f"{sum(c.seconds for c in cases):.3f}",
    }


def _add_case(ET: Any, suite_el: Any, suite: str, c: JUnitCase) -> None:
    # XML cannot hold a control character, even escaped
    case = ET.SubElement(suite_el, "testcase", classname=suite, name=visible(c.name), time=f"{c.seconds:.3f}")
    if c.failure:
        failure = ET.SubElement(case, "failure", type=c.kind, message=visible(c.failure))
        failure.text = visible(c.details or c.failure)
    elif c.error:
        error = ET.SubElement(case, "error", type=c.kind, message=visible(c.error))
        error.text = visible(c.details or c.error)
    elif c.skipped:
        ET.SubElement(case, "skipped", message=visible(c.skipped))
    if c.output:
        ET.SubElement(case, "system-out").text = visible(c.output)


def error_junit(suite: str, message: str, hint: str | None, exit_code: int, command: str = "verify") -> str:
    """A run that ended before it could judge anything (the index unreachable, a bad option...):
    one testcase in error, so that a report file is never empty."""
    details = message + (f"\nhint: {hint}" if hint else "")
    case = JUnitCase(name=f"patchkit {command}", error=message, details=details, kind=f"exit-{exit_code}")
    return junit(suite, [case], command)


def releases_junit(results: list[ReleaseResult], suite: str) -> str:
    """A <testcase> per release, <failure> with the reason, <skipped> when unsupported."""
    return junit(suite, [_release_case(r) for r in results])


def sets_releases_junit(by_set: dict[str, list[ReleaseResult]], suite: str) -> str:
    """verify of several sets' releases: a <testcase> per set and release ("SET: vllm X")."""
    return junit(suite, [_release_case(r, f"{name}: ") for name, results in by_set.items() for r in results])


def _release_case(r: ReleaseResult, prefix: str = "") -> JUnitCase:
    details = "\n".join([r.detail] + [c.describe() for c in r.checks if c.failed])
    return JUnitCase(
        name=f"{prefix}vllm {r.version}",
        seconds=r.timings.get("total", 0.0),
        failure=f"{r.label}: {r.detail}" if r.failed else None,
        details=details,
        kind=r.label,
        skipped=r.detail if r.outcome == ReleaseOutcome.UNSUPPORTED else None,
        output=f"{r.label}: {r.detail}",
    )


def check_cases(results: list[CheckResult]) -> list[JUnitCase]:
    """A case per check result: a failure fails it; a warning or a check not run is skipped."""
    return [
        JUnitCase(
            name=f"{r.check}: {r.path}" if r.path else r.check,
            failure=r.message if r.status == CheckStatus.FAIL else None,
            kind=r.check,
            skipped=r.message if r.status in (CheckStatus.WARNING, CheckStatus.SKIPPED) else None,
            output=r.message,
        )
        for r in results
    ]
