"""Which vLLM release a target is: dist-info METADATA, then vllm/_version.py, then git describe."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from email.parser import HeaderParser

from packaging.version import InvalidVersion, Version

from patchkit.errors import BadInput, TargetError
from patchkit.target import PACKAGE, Target


@dataclass(frozen=True)
class DetectedVersion:
    version: Version
    source: str  # where it came from, for status output


def parse(text: str, origin: str) -> Version:
    try:
        return Version(text.strip())
    except InvalidVersion as exc:
        raise BadInput(f"{origin}: {text!r} is not a valid version") from exc


def detect(target: Target, override: str | None = None) -> DetectedVersion:
    if override:
        return DetectedVersion(parse(override, "--vllm-version"), "--vllm-version")
    for finder in (_from_metadata, _from_version_file, _from_git):
        found = finder(target)
        if found:
            return found
    if target.installed_version:
        return DetectedVersion(parse(target.installed_version, "importlib.metadata"), "importlib.metadata")
    raise TargetError(
        f"cannot tell which vLLM version is in {target.root}",
        hint="no vllm-*.dist-info/METADATA, vllm/_version.py or git tag found; pass --vllm-version",
    )


def _from_metadata(target: Target) -> DetectedVersion | None:
    candidates = sorted(target.root.glob(f"{PACKAGE}-*.dist-info/METADATA"))
    if not candidates:
        return None
    if len(candidates) > 1:
        names = ", ".join(c.parent.name for c in candidates)
        raise TargetError(
            f"several vLLM distributions in {target.root}: {names}",
            hint="remove the stale dist-info directories or pass --vllm-version",
        )
    meta = HeaderParser().parsestr(candidates[0].read_text(encoding="utf-8", errors="replace"))
    if meta.get("Name", "").lower() != PACKAGE or not meta.get("Version"):
        return None
    where = candidates[0].relative_to(target.root).as_posix()
    return DetectedVersion(parse(meta["Version"], where), where)


def _from_version_file(target: Target) -> DetectedVersion | None:
    path = target.package_dir / "_version.py"
    if not path.is_file():
        return None
    try:
        tree = ast.parse(path.read_bytes())
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            names = [
                t.id
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(t, ast.Name)
            ]
            if {"__version__", "version"} & set(names) and isinstance(node.value.value, str):
                return DetectedVersion(parse(node.value.value, "vllm/_version.py"), "vllm/_version.py")
    return None


_DESCRIBE = re.compile(r"^v?(?P<tag>\d[^-]*)(?:-(?P<distance>\d+)-g(?P<sha>[0-9a-f]+))?$")


def _from_git(target: Target) -> DetectedVersion | None:
    if not (target.root / ".git").exists():
        return None
    import git  # GitPython: heavy, so only for source checkouts

    try:
        described = git.Repo(target.root).git.describe("--tags", "--match", "v[0-9]*")
    except (git.GitCommandError, git.InvalidGitRepositoryError):
        return None
    match = _DESCRIBE.match(described.strip())
    if not match:
        return None
    tag = parse(match["tag"], "git describe")
    if not match["distance"]:
        return DetectedVersion(tag, f"git describe ({described})")
    # setuptools-scm's rule, which vLLM's own builds follow: commits after a tag are a dev
    # release of the next patch version.
    following = Version(f"{tag.major}.{tag.minor}.{tag.micro + 1}.dev{match['distance']}+g{match['sha']}")
    return DetectedVersion(following, f"git describe ({described})")
