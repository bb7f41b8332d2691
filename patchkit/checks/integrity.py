"""integrity: the files a series patches are the stock files of the vLLM release it was made for.

The reference is the installed distribution's RECORD (`<root>/vllm-X.dist-info/RECORD`: sha256,
urlsafe base64 without padding, per file); fetched trees carry one too. When the fetch cache holds
the published wheel's RECORD for the same version (`patchkit fetch` put it there; the cache is only
read, no network I/O), it is used too: a file where it and the installed RECORD disagree is reported
(the installed build is not the published wheel), and a file the target's RECORD cannot vouch for
is compared with it - a match passes, a mismatch is a warning (a source checkout may differ).

A file passes when its stock content - the file as on disk with the series' patches that are already
in place undone - matches the reference: a stock file, a file patchkit patched, and a file patched by
hand with this series all pass. A file exactly as patchkit recorded writing it passes as well. Any
other content fails (apply refuses it unless --force). A tree without RECORD, or a file RECORD does
not list, cannot be verified: a warning, never a failure. So is a file RECORD hashes with an algorithm
wheels do not allow (md5, sha1...: only sha256 or stronger, record.HASHES): such an entry is not trusted.

Not in default_checks(): apply runs it before anything else (and lets --force override it), verify
reports it alongside the other checks.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit import fetch  # its modules load on first use: the cache's reader only, here
from patchkit.base.enums import CheckLevel
from patchkit.base.errors import BadInput, CheckFailed, PatchkitError
from patchkit.base.fsutil import read_file
from patchkit.base.hashing import sha256
from patchkit.checks import ERROR, WARNING, CheckContext, CheckResult
from patchkit.distinfo import installed_record, installed_wheel_reader
from patchkit.distinfo.record import (
    Record,
    has_provenance,
    parsed_record,
    record_algorithm,
    record_digest,
    record_hash,
)
from patchkit.store.state import State, read_state
from patchkit.tree.target import stock_files_command

if TYPE_CHECKING:  # pragma: no cover
    from packaging.version import Version

Write = tuple[str | None, str]  # the sha256 before and after of a write patchkit recorded

NAME = "integrity"
LIKELY_CAUSES = (
    "a local edit, a different build of vLLM (a custom or vendor wheel), "
    "or a development build that shares the release's version string"
)


class IntegrityCheck:
    name = NAME

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        if ctx.root is None:
            return []
        wanted = set(ctx.paths)  # only these rows of each RECORD are parsed
        installed, why_not = installed_record(ctx.root, ctx.version, wanted)
        published = published_record(_stock_release(ctx.root) or ctx.version, wanted)
        recorded = _recorded_writes(ctx.root, ctx.state)
        results = []
        for path in ctx.paths:
            results.extend(self._check(ctx, ctx.root, path, installed, why_not, published, recorded))
        return results

    def _check(
        self,
        ctx: CheckContext,
        root: Path,
        path: str,
        installed: Record | None,
        why_not: str,
        published: Record | None,
        recorded: dict[str, list[Write]],
    ) -> list[CheckResult]:
        current = ctx.read_current(path) if ctx.read_current else read_file(root / path)
        stock = ctx.read_stock(path) if ctx.read_stock else current
        # (each test of a Record names it, so that the type checker sees it is not None there)
        if installed is not None and path in installed.hashes:
            results = [self._verdict(path, current, stock, installed, recorded.get(path, []))]
            if published is not None and path in published.hashes and installed.hashes[path] != published.hashes[path]:
                results.append(
                    self._result(
                        path,
                        False,
                        f"{installed.label} and {published.label} disagree "
                        "on this file: the installed build is not the "
                        "published wheel",
                        WARNING,
                    )
                )
            return results
        if stock is None:
            return [self._result(path, True, "new file: added by the series")]
        reason = installed.why_unlisted(path) if installed else why_not
        if published is None or path not in published.hashes:
            return [self._result(path, False, f"not verifiable: {reason}", WARNING)]
        # Without the target's own RECORD, the published wheel is evidence, not proof: a source
        # checkout may legitimately differ from it.
        verdict = self._verdict(path, current, stock, published, recorded.get(path, []))
        if verdict.ok:
            return [verdict]
        return [replace(verdict, level=WARNING, message=f"{reason}; {verdict.message}")]

    def _verdict(
        self,
        path: str,
        current: bytes | None,
        stock: bytes | None,
        reference: Record,
        writes: list[Write],
    ) -> CheckResult:
        if stock is None:
            return self._result(path, False, f"missing, but {reference.label} lists it")
        if (
            current is not None
            and current != stock
            and reference.matches(path, current)
            and not reference.patched_wheel
        ):
            # the file as it is is stock (a patched wheel's RECORD is no evidence of it): the release's own files already hold the series' change
            return self._result(path, True, f"stock: matches {reference.label} (it already holds the series' change)")
        if reference.matches(path, stock):
            how = "" if stock == current else " once the series' patches already in place are undone"
            return self._result(path, True, f"stock: matches {reference.label}{how}")
        digest = sha256(current)
        for before, after in writes:
            if digest == after:
                if before is not None and _record_hash_of_digest(before, reference.hashes[path]):
                    return self._result(path, True, f"as patchkit wrote it over the stock file ({reference.label})")
                return self._result(
                    path,
                    False,
                    "as patchkit wrote it, but over a file that was not stock (applied with --force)",
                    WARNING,
                )
        if _padded_match(reference.hashes[path], stock):
            return self._result(
                path,
                False,
                f"{reference.label} writes its hash with base64 padding ('='), which a wheel's RECORD may not: "
                "the file matches it without the padding, but that RECORD is not in the wheel format",
            )
        return self._result(
            path,
            False,
            f"differs from the stock file in {reference.label} and from what "
            f"this series would make of it: {LIKELY_CAUSES}",
        )

    def _result(self, path: str, ok: bool, message: str, level: CheckLevel = ERROR) -> CheckResult:
        return CheckResult(self.name, path, ok, message, level)


CHECK = IntegrityCheck()


def _padded_match(entry: str, data: bytes) -> bool:
    """A RECORD hash written with base64's '=' padding (wheels drop it) that is `data`'s."""
    return entry.endswith("=") and record_hash(data, record_algorithm(entry)) == entry.rstrip("=")


def forced(results: list[CheckResult]) -> list[CheckResult]:
    """apply --force: failures stay visible, as warnings."""
    return [
        replace(r, level=WARNING, message=f"{r.message} (accepted with --force)") if r.failed else r for r in results
    ]


def refusal(failed: list[CheckResult], version: Version | None, root: Path) -> CheckFailed:
    release = f"vLLM {version}" if version else "the installed vLLM"
    return CheckFailed(
        "not the stock files of "
        + release
        + "; nothing was written:\n  "
        # the likely causes are the hint's, said once there
        + "\n  ".join(f"{r.path}: {r.message.removesuffix(f': {LIKELY_CAUSES}')}" for r in failed),
        hint=f"likely causes: {LIKELY_CAUSES}. Put the stock files back "
        f"({stock_files_command(root, version)}), or pass --force to patch these files anyway",
    )


# -- references ---------------------------------------------------------------------------------
def published_record(version: Version | str | None, only: Collection[str] | None = None) -> Record | None:
    """The published wheel's RECORD when `patchkit fetch` already cached this release (no network),
    and only while the cache holds it as fetched (the cache is untrusted input: fetch re-checks it)."""
    if version is None:
        return None
    try:
        data = fetch.cached_record(str(version))
    except PatchkitError:  # a version the cache cannot name, a damaged entry: no evidence
        return None
    return parsed_record(data, f"the published wheel's RECORD (fetch cache, vllm {version})", only) if data else None


def cached_stock(root: Path, version: Version | str | None, paths: Collection[str]) -> dict[str, bytes] | None:
    """The stock bytes of `paths` from the fetch cache's copy of the release, each as the published
    RECORD (else the tree's own) lists it (None: the cache holds no such copy of one); no network,
    nothing written. What a fix that puts the stock files back leaves, to judge a launch on."""
    record = published_record(version, set(paths)) or installed_record(root, version, set(paths))[0]
    if record is None or version is None:
        return None
    tree = fetch.cache.release_root(fetch.normalize_version(str(version))) / "tree"
    found = {}
    for path in paths:
        try:
            data = fetch.cache.read_regular(tree, path, limit=MAX_STOCK_BYTES)
        except (OSError, fetch.cache.Damaged):
            return None
        if path not in record.hashes or not record.matches(path, data):
            return None
        found[path] = data
    return found


MAX_STOCK_BYTES = 64 * 1024 * 1024  # a source file of vLLM's is far smaller: a larger one is no stock file


def _stock_release(root: Path) -> str | None:
    """The release a patched wheel installed in `root` was built from (its published RECORD is the
    one to hold the stock files to), or None."""
    if not has_provenance(root):
        return None
    try:
        found = installed_wheel_reader().find(root)
    except BadInput:
        return None
    return found.vllm_version if found else None


def _recorded_writes(root: Path, state: State | None) -> dict[str, list[Write]]:
    """path -> (before, after) sha256 of what patchkit recorded writing there (in `state`, the
    record the command read; None: read here)."""
    try:
        entries = (state if state is not None else read_state(root)).entries
    except BadInput:
        return {}
    writes: dict[str, list[Write]] = {}
    for entry in entries:
        for path, shas in entry.files.items():
            if after := shas.get("after"):
                writes.setdefault(path, []).append((shas.get("before"), after))
    return writes


# -- hashes ---------------------------------------------------------------------------------------
def _record_hash_of_digest(hex_sha256: str, like: str) -> bool:
    """Whether a hex sha256 (as state.json keeps them) is the digest RECORD entry `like` states."""
    return like.startswith("sha256=") and record_digest(bytes.fromhex(hex_sha256), "sha256") == like
