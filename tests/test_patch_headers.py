"""Every patch's DEP-3 header agrees with its set.toml (audit 23: three patches had no
Applied-Upstream, and kimi's 0001 said 0.20.0 where the set says its fix is upstream from 0.23.0).

A fix keeps its number across a set's series (eagle3's 0.11.0 series has 0001 and 0003: 0002's
file is not in that release), though its diff and name may change (kimi's 0001 from 0.20.0 is a
smaller diff over vLLM's rewrite). So a fix's Applied-Upstream is the first release the set covers
once no series carries that number any more, or `no` while the newest, open-ended series carries it
(then it names the set's pending pull request).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import LIBRARY
from packaging.version import Version

from patchkit.series.library import PatchSetDef, load_library, load_set, read_toml

FIELDS = ("Description", "Origin", "Forwarded", "Applied-Upstream", "Last-Update")
BEYOND = Version("9999")  # a release no set names: a series covering it is open-ended


def named_versions(patch_set: PatchSetDef) -> list[Version]:
    """Every version the set's ranges name: where a series, `upstream` or `supported` starts or ends."""
    ranges = [r.versions for r in patch_set.releases] + [s for s in (patch_set.upstream, patch_set.supported) if s]
    return sorted({Version(spec.version.removesuffix(".*")) for specs in ranges for spec in specs})


def covered(patch_set: PatchSetDef, version: Version) -> bool:
    upstream = patch_set.upstream is not None and patch_set.upstream.contains(version, prereleases=True)
    return upstream or any(r.covers(version) for r in patch_set.releases)


def header_problems(patch_set: PatchSetDef) -> list[str]:
    """What in the set's patch headers disagrees with its set.toml (empty: nothing)."""
    carrying: dict[str, list] = {}  # a fix's number -> the release entries whose series has it
    headers: dict[str, dict[str, dict[str, str]]] = {}  # a fix's number -> {its patch files: header}
    for release in patch_set.releases:
        for patch in release.read_patches(patch_set.roots):
            carrying.setdefault(patch.name[:4], []).append(release)
            headers.setdefault(patch.name[:4], {})[f"{patch_set.name}/{release.directory.name}/{patch.name}"] = (
                patch.header
            )
    problems = [
        f"{where}: no {field}"
        for files in headers.values()
        for where, header in files.items()
        for field in FIELDS
        if not header.get(field, "").strip()
    ]
    table = read_toml(patch_set.directory / "set.toml", "manifest").get("upstream_fix", {})
    for number, releases in carrying.items():
        expected = _applied_upstream(patch_set, releases)
        for where, header in headers[number].items():
            said = header.get("Applied-Upstream", "")
            if expected == "no":
                problems += _pending_problems(where, header, patch_set, table)
            elif not re.match(rf"{re.escape(expected)}(\s|,|$)", said):
                problems.append(
                    f"{where}: Applied-Upstream is {said or 'missing'}, but the set carries the fix until {expected}"
                )
    return problems


def _applied_upstream(patch_set: PatchSetDef, releases: list) -> str:
    """`no` if an open-ended series carries the fix, else the first release the set covers after
    the last one a series carrying it covers."""
    if any(r.covers(BEYOND) for r in releases):
        return "no"
    named = named_versions(patch_set)
    last = max(v for v in named if any(r.covers(v) for r in releases))
    return str(min(v for v in [*named, BEYOND] if v > last and (v == BEYOND or covered(patch_set, v))))


def _pending_problems(where: str, header: dict[str, str], patch_set: PatchSetDef, table: dict) -> list[str]:
    """A fix not upstream: its header says `no`, the set names no `upstream` range, and the pull
    request and issue the header names are [upstream_fix]'s."""
    said = header.get("Applied-Upstream", "")
    problems = (
        []
        if said.startswith("no")
        else [f"{where}: Applied-Upstream is {said or 'missing'}, but no release has the fix"]
    )
    if patch_set.upstream is not None:
        problems.append(f"{where}: the fix is carried on, but set.toml says upstream {patch_set.upstream}")
    for url in re.findall(r"https://\S+/pull/\d+", said):
        if url != table.get("pull_request"):
            problems.append(f"{where}: Applied-Upstream names {url}, set.toml's [upstream_fix] another")
    bug = header.get("Bug")
    if bug and bug != table.get("issue"):
        problems.append(f"{where}: Bug {bug}, set.toml's [upstream_fix] issue {table.get('issue')}")
    return problems


@pytest.mark.parametrize("set_name", sorted(load_library(LIBRARY)))
def test_every_patch_header_agrees_with_its_set(set_name):
    assert header_problems(load_library(LIBRARY)[set_name]) == []


def a_set(tmp_path: Path, name: str) -> PatchSetDef:
    copied = tmp_path / name
    copied.mkdir()
    for path in (LIBRARY / name).rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            (copied / path.relative_to(LIBRARY / name)).parent.mkdir(parents=True, exist_ok=True)
            (copied / path.relative_to(LIBRARY / name)).write_bytes(path.read_bytes())
    return load_set(copied)


def edited(patch_set: PatchSetDef, relative: str, old: str, new: str) -> PatchSetDef:
    """The set with one patch's header edited, its series' sha256 dropped (the edit is the point)."""
    path = patch_set.directory / relative
    path.write_text(path.read_text().replace(old, new, 1))
    series = path.parent / "series"
    series.write_text(re.sub(r" sha256:\w+", "", series.read_text()))
    return load_set(patch_set.directory)


def test_the_check_finds_what_the_audit_found(tmp_path):
    """The headers as they were: kimi's 0001 saying 0.20.0, the names-first 0001 saying nothing; a
    pending fix naming another pull request."""
    kimi = a_set(tmp_path, "kimi-k2-tool-calls")
    whole = "0.17.0/0001-kimi-k2-stream-tool-calls-from-the-whole-text.patch"
    kimi = edited(kimi, whole, "Applied-Upstream: 0.23.0 (", "Applied-Upstream: 0.20.0 (")
    first = "0.20.0/0001-kimi-k2-stream-new-calls-names-first.patch"
    kimi = edited(kimi, first, "Applied-Upstream:", "X-Was:")
    said = next(line for line in (kimi.directory / whole).read_text().splitlines() if line.startswith("Applied-"))
    assert header_problems(kimi) == [
        f"kimi-k2-tool-calls/{first}: no Applied-Upstream",
        f"kimi-k2-tool-calls/{whole}: {said.replace(':', ' is', 1)}, but the set carries the fix until 0.23.0",
        f"kimi-k2-tool-calls/{first}: Applied-Upstream is missing, but the set carries the fix until 0.23.0",
    ]
    deepseek = a_set(tmp_path, "deepseek-tool-calls")
    v3 = "0.23.0/0001-deepseek-v3-tool-parser-streams-from-whole-text.patch"
    deepseek = edited(deepseek, v3, "/pull/48636", "/pull/1")
    assert header_problems(deepseek) == [
        f"deepseek-tool-calls/{v3}: Applied-Upstream names https://github.com/vllm-project/vllm/pull/1, "
        "set.toml's [upstream_fix] another"
    ]


@pytest.mark.parametrize("set_name", sorted(load_library(LIBRARY)))
def test_every_set_decides_its_gates_and_every_series_patches_each(set_name):
    """gate29: each shipped set says which of its files vLLM checks at start (`gates`, [] for none:
    the key left out would be a set nobody asked), and each gate is a file every one of its series
    patches: a gate a series does not touch orders nothing, and a misspelt one would go unseen."""
    patch_set = load_library(LIBRARY)[set_name]
    assert "gates" in read_toml(patch_set.directory / "set.toml", "manifest"), set_name
    for release in patch_set.releases:
        touched = {f.path for patch in release.read_patches(patch_set.roots) for f in patch.files}
        assert set(patch_set.gates) <= touched, (release.directory, patch_set.gates)
