"""Which vLLM release a target is (dist-info METADATA, then vllm/_version.py, then git describe), and
the one rule by which a version is matched against the library's ranges (release_version)."""

from __future__ import annotations

import ast
import itertools
import os
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, overload

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from patchkit.base import hints
from patchkit.base.errors import BadInput, PatchkitError, TargetError, quoted
from patchkit.base.fsutil import NotRegularFile, inside, read_regular
from patchkit.base.patterns import LazyPattern
from patchkit.base.values import FrozenValue, frozen
from patchkit.store.state import read_state
from patchkit.tree.target import PACKAGE, Target, vllm_metadata_dirs

if TYPE_CHECKING:  # pragma: no cover
    from packaging.specifiers import SpecifierSet  # imported where a range is read: a --patch run reads none

# METADATA's headers come first; a file larger than this is read only this far (vLLM's is ~20 kB).
METADATA_HEAD = 1 << 20


@frozen
class DetectedVersion(FrozenValue):
    """The tree's vLLM version and where it was read."""

    version: Version
    source: str  # where it came from, for status output
    # --vllm-version naming another release than the tree's dist-info: "0.17.1 (vllm-0.17.1.dist-info/METADATA)"
    tree_says: str | None = None


def parse(text: str, origin: str) -> Version:
    try:
        return Version(text.strip())
    except ValueError as exc:  # InvalidVersion, or a number of more digits than int() converts
        raise BadInput(f"{origin}: {quoted(repr(text))} is not a valid version") from exc


def release_version(version: Version) -> Version:
    """The release a build belongs to, which is what every range (a set's releases, upstream and
    supported, a contract requirement's `versions`, a probe's "since") is matched against.

    Only the release number counts: 0.15.0rc1, 0.15.0.dev3, 0.15.0.post1 and 0.15.0+cu129 are all
    judged as 0.15.0 (a pre-release or dev build of X carries X's files, give or take the fixes
    still to come; a local label is a rebuild). So a range names releases: "==0.15.0rc1" matches
    nothing, "==0.15.0" matches every build of 0.15.0. git describe's builds after a tag are dev
    releases of the next patch version (0.15.1.dev5 after v0.15.0), so they are judged as 0.15.1.
    """
    return Version(version.base_version)


def in_range(versions: SpecifierSet, version: Version) -> bool:
    """Whether `versions` holds the release `version` belongs to (release_version)."""
    return versions.contains(release_version(version), prereleases=True)


@overload
def specifier(text: str, origin: object) -> SpecifierSet: ...
@overload
def specifier(text: None, origin: object) -> None: ...
def specifier(text: str | None, origin: object) -> SpecifierSet | None:
    """A version range as the library writes it (None stays None); a bad one is BadInput."""
    if text is None:
        return None

    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise BadInput(f"{origin}: bad version specifier {quoted(repr(text))}") from exc


def detect(target: Target, override: str | None = None) -> DetectedVersion:
    if override:
        return _typed(target, parse(override, "--vllm-version"))
    for finder in (_from_metadata, _from_version_file, _from_git):
        found = finder(target)
        if found:
            return found
    if target.installed_version:
        return DetectedVersion(parse(target.installed_version, "importlib.metadata"), "importlib.metadata")
    cut = cut_short(target.root)
    if cut is not None:
        raise cut
    raise TargetError(
        f"cannot tell which vLLM version is in {target.root}",
        hint="no vllm-*.dist-info/METADATA, vllm/_version.py or git tag found; pass --vllm-version",
    )


_VERSION = LazyPattern(r"[0-9]+(\.[0-9]+)*")  # a release number: what a hint may suggest as --vllm-version

# In DEST while `fetch --dest` lays a release out (it names the release): a kill leaves it behind.
LAYOUT_MARK = ".patchkit-fetch"
_RELEASE = LazyPattern(r"[0-9][0-9A-Za-z.+!_-]{0,63}( --all)?")  # a mark patchkit wrote: the release, --all


def marked_release(root: Path) -> str | None:
    """The release a lay-out cut short in `root` was of, with " --all" when it was of every file (its
    mark; "" when the mark is there but says none patchkit wrote); None: no mark."""
    try:
        text = read_regular(root / LAYOUT_MARK, 256).decode("ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return ""
    return text if _RELEASE.fullmatch(text) else ""


def cut_short(root: Path) -> TargetError | None:
    """The refusal of a tree `fetch --dest` was cut short in (killed, a full disk): the files that
    say which release it is are written last, so none is there; the fix is that fetch again, never
    --vllm-version (the tree lacks files). None: no such tree."""
    release = marked_release(root)
    if release is None:
        vllm = root / "vllm"
        if not vllm.is_dir() or (vllm / "__init__.py").exists() or vllm_metadata_dirs(root):
            return None
        said = f"{vllm} has no __init__.py, and there is no vllm-*.dist-info beside it"
    else:
        said = "a `fetch --dest` there was cut short (killed, or the disk filled)"
    again = hints.command("fetch", *(release or "VERSION").split(), "--dest", str(root))
    return TargetError(
        f"cannot tell which vLLM version is in {root}: {said}, and the files that say which release it is are missing",
        hint=f"run {again} again (it writes only the missing files); for an installed vLLM, reinstall it",
    )


def _typed(target: Target, given: Version) -> DetectedVersion:
    """--vllm-version, in the tree's dist-info's spelling where PEP 440 holds the two equal (0.16 or
    0.16.0.0 on a 0.16.0 tree: what apply records is what the guard reads there); with what the
    dist-info says where it names another release (a series for one release then fails on the
    other's files: said in one line, not as conflicts)."""
    try:
        found = _from_metadata(target)
    except (TargetError, BadInput):  # unreadable: nothing to hold --vllm-version against
        found = None
    if found is not None and found.version == given:
        return DetectedVersion(found.version, "--vllm-version")
    if found is None or release_version(found.version) == release_version(given):
        return DetectedVersion(given, "--vllm-version")
    return DetectedVersion(given, "--vllm-version", f"{found.version} ({found.source})")


def _from_metadata(target: Target) -> DetectedVersion | None:
    candidates = [m for d in vllm_metadata_dirs(target.root) if (m := _metadata_file(d)) is not None]
    if not candidates:
        return None
    if len(candidates) > 1:
        names = [c.parent.name for c in candidates]
        raise TargetError(
            f"several vLLM distributions in {target.root}: {', '.join(names)}", hint=_several_fix(target, names)
        )
    where = candidates[0].relative_to(target.root).as_posix()
    meta = first_headers(_read_metadata(target, candidates[0], where))
    if meta.get("name", "").strip().lower() != PACKAGE or not meta.get("version", "").strip():
        return None
    try:
        return DetectedVersion(parse(meta["version"], where), where)
    except BadInput as exc:
        raise BadInput(exc.message, hint=_repair_fix(candidates[0].parent.name)) from None


def _repair_fix(dist_info: str) -> str:
    """The fix of a dist-info whose METADATA names no version: pip writes it again, or the user says
    which release the files are (the dist-info's name carries the version pip installed)."""
    named = _dist_info_release(dist_info)
    release = named if _VERSION.fullmatch(named) else None
    again = hints.pip_reinstall(release)
    return f"pass --vllm-version {release or 'VERSION'}, or write {dist_info} again: {again}"


def _several_fix(target: Target, names: list[str]) -> str:
    """The fix of several vllm-*.dist-info, naming the one to keep where vllm/_version.py (the files'
    own release) or the tree's record names one of them: which to keep, which to remove."""
    try:
        recorded = {e.vllm_version for e in read_state(target.root).entries if e.vllm_version}
        files = _from_version_file(target)
    except PatchkitError:  # a damaged record or _version.py says nothing here: status says what it is
        recorded, files = set(), None
    said = str(files.version) if files is not None else None
    for witness, words in (
        (said, f"vllm/_version.py says vLLM {said}"),
        (_one(recorded), "the tree's record says the patches were applied to vLLM {}"),
    ):
        kept = [name for name in names if witness is not None and _dist_info_release(name) == witness]
        if len(kept) == 1:
            others = [name for name in names if name != kept[0]]
            also = "; the tree's record names it too" if witness in recorded and said == witness else ""
            return (
                f"{words.format(witness)} ({kept[0]}{also}): remove {', '.join(others)} "
                f"(pip left {'it' if len(others) == 1 else 'them'}), or pass --vllm-version"
            )
    return "remove the stale dist-info directories (pip left them; keep the installed vLLM's) or pass --vllm-version"


def _one(versions: set[str]) -> str | None:
    return next(iter(versions)) if len(versions) == 1 else None


def _dist_info_release(name: str) -> str:
    """The version a vllm-VERSION.dist-info's name carries."""
    return name.lower().partition("-")[2].rpartition(".")[0]


def _metadata_file(directory: Path) -> Path | None:
    """The file importlib.metadata reads a distribution's metadata from: METADATA, else PKG-INFO
    (a broken symlink is named too: _read_metadata refuses it)."""
    return next((p for p in (directory / "METADATA", directory / "PKG-INFO") if os.path.lexists(p)), None)


def metadata_headers(text: str) -> list[tuple[str, str]]:
    """The header fields (name, value), in order, importlib.metadata reads from a METADATA text: the
    lines pathlib reads (every line end "\\n"), cut where its email parser (compat32) cuts them (at
    "\\n" only), a folded value kept and dedented as its Message does; the description after them not.
    By hand: email would cost a start-up ~10x this, and str.splitlines cuts where email does not."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    block = list(itertools.takewhile(re.compile(_HEADER_LINE).match, lines))
    fields: list[list[str]] = []
    current: list[str] | None = None
    for number, line in enumerate(block):
        if line[0] in " \t":  # folded: the field before it goes on (none: email drops the line)
            if current is not None:
                current.append(line)
            continue
        current = None
        if line.startswith("From "):  # an envelope line, or the description's first (the block's last)
            if number == len(block) - 1:
                break
            continue
        name, _, value = line.partition(":")
        if name:  # ":x" names no field: email passes over it
            current = [name, value.lstrip(" \t")]
            fields.append(current)
    return [(name, _redent("\n".join(value))) for name, *value in fields]


# email.feedparser's headerRE: a line of the header block (an envelope line, a field, a fold)
_HEADER_LINE = r"From |[\041-\071\073-\176]*:|[\t ]"


def _redent(value: str) -> str:
    """importlib.metadata's Message.redent: a folded value dedented as if its first line were too."""
    return textwrap.dedent(" " * 8 + value) if "\n" in value else value


def first_headers(text: str) -> dict[str, str]:
    """The first value of each header of METADATA, by lower-case name (as email's msg[name] finds it)."""
    found: dict[str, str] = {}
    for name, value in metadata_headers(text):
        found.setdefault(name.lower(), value)
    return found


def _read_metadata(target: Target, path: Path, where: str) -> str:
    """METADATA's text, read as untrusted input: a regular file inside the tree, UTF-8 (core metadata's
    encoding), no NUL byte; anything else is BadInput naming it."""

    def refuse(why: str) -> BadInput:
        return BadInput(f"{where} {why}", hint="repair or remove that dist-info, or pass --vllm-version")

    if not inside(target.root, path):
        raise refuse("leads outside the target (a symlink)")
    try:  # never blocks, never reads past its head: a fifo or /dev/zero put there is refused
        head = read_regular(path, METADATA_HEAD, follow_symlinks=True, head=True)
    except NotRegularFile:
        raise refuse("is not a regular file") from None
    except OSError as exc:
        raise refuse(f"cannot be read: {exc.strerror or exc}") from exc
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if len(head) < METADATA_HEAD or exc.start < len(head) - 4:  # not merely a character cut at the end
            raise refuse("is not UTF-8 text") from exc
        text = head[: exc.start].decode("utf-8")
    if "\x00" in text:
        raise refuse("is binary, not metadata text")
    return text


VERSION_FILE_BYTES = 1 << 20  # vllm/_version.py: a few lines


def _from_version_file(target: Target) -> DetectedVersion | None:
    path = target.package_dir / "_version.py"
    if not path.is_file():
        return None
    try:
        tree = ast.parse(read_regular(path, VERSION_FILE_BYTES, follow_symlinks=True))
    except NotRegularFile as exc:
        raise BadInput(f"{path} {exc.strerror}", hint="reinstall vLLM, or pass --vllm-version") from exc
    except (SyntaxError, ValueError):  # ValueError: a NUL byte in it
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


# The patterns here are text, compiled on first use (re keeps them): start-up compiles none a run does not use.
_DESCRIBE = r"^v?(?P<tag>\d[^-]*)(?:-(?P<distance>\d+)-g(?P<sha>[0-9a-f]+))?$"


def _from_git(target: Target) -> DetectedVersion | None:
    if not (target.root / ".git").exists():
        return None
    # lazy: GitPython loads only for a source checkout
    import git

    try:
        described = git.Repo(target.root).git.describe("--tags", "--match", "v[0-9]*")
    except (git.GitCommandError, git.InvalidGitRepositoryError):
        return None
    match = re.compile(_DESCRIBE).match(described.strip())
    if not match:
        return None
    tag = parse(match["tag"], "git describe")
    if not match["distance"]:
        return DetectedVersion(tag, f"git describe ({described})")
    # setuptools-scm's rule, which vLLM's own builds follow: commits after a tag are a dev
    # release of the next patch version.
    following = Version(f"{tag.major}.{tag.minor}.{tag.micro + 1}.dev{match['distance']}+g{match['sha']}")
    return DetectedVersion(following, f"git describe ({described})")
