from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import click
from packaging.version import Version

from patchkit.base import hints, seal, signals
from patchkit.base.enums import OutputFormat
from patchkit.base.errors import BadInput, IndexNotRead, NoIndex, NoPatchSet
from patchkit.base.options import Options
from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import format_option, os_refuses, output_options, patch, patches, set_names
from patchkit.cli.ui.console import UI
from patchkit.cli.ui.reports import show_checks
from patchkit.engine.resolve import several
from patchkit.fetch.cache import normalize_version
from patchkit.series.library import UNSUPPORTED, UPSTREAM, choose_sets, load_chosen, load_library, locate, select
from patchkit.wheel.build import WheelResult, build_patched_wheel, nothing_to_patch
from patchkit.wheel.stock import checked_stock_wheel, vouched_cached_wheel

# Where the pip-download hint has pip put the stock wheel: a directory per platform, so that the
# hint's glob never takes a wheel an earlier run downloaded for another one.
_DOWNLOAD_DIR = "vllm-stock"
_THIS_MACHINE = "this-machine"


@click.command()
@click.argument("source", metavar="VERSION|WHEEL_FILE", callback=os_refuses(BadInput, "wheel", paths_only=True))
@click.option(
    "--out",
    "out_dir",
    metavar="DIR",
    default=".",
    show_default=True,
    help="Where the patched wheel goes.",
)
@click.option(
    "--local-label",
    metavar="LABEL",
    help="The local version label added (default patchkit.<set>[.<set>...]; after an existing one, joined by '.').",
)
@click.option("--platform", metavar="TAG", help="With VERSION: the stock wheel's platform tag (default: as pip would).")
@patches
@set_names
@patch
@format_option
@output_options
def command(
    source: str,
    out_dir: str,
    local_label: str | None,
    platform: str | None,
    library: str | None,
    set_name: tuple[str, ...],
    adhoc: tuple[str, ...],
    fmt: str,
    quiet: bool,
    verbose: int,
) -> WheelResult:
    """Build the patched wheel of a stock vLLM wheel (a file, or vllm==VERSION from the index).

    The same plan and checks as apply run first (integrity against the wheel's own RECORD, syntax,
    names, contract): a conflict or a failed check writes no wheel. Unchanged members are copied as
    their compressed bytes; the version gains a local label (+patchkit.<set>); RECORD is regenerated;
    the dist-info records what was applied (patchkit.json). Prints the wheel's path.

    Without --set, every set of the library with a series for the release, in the library's order
    (the label names each); --set (repeatable) narrows.
    """
    signals.note_report("interrupted before the wheel was written: this run left nothing in --out")
    ui = make_ui(fmt, quiet, verbose)
    if adhoc and set_name:
        raise BadInput("--set and --patch exclude each other: a library set, or ad-hoc diffs")
    if platform is not None and not _PLATFORM_TAG.fullmatch(platform):  # '' is no tag: not "none installable"
        raise BadInput(
            f"--platform {platform!r} is not a platform tag",
            hint="give one such as manylinux_2_31_x86_64, or leave --platform out for this machine's",
        )
    names = tuple(dict.fromkeys(set_name))  # each once, as given
    one = names[0] if len(names) == 1 else None
    chosen = Options(library=library, adhoc=tuple(adhoc), set_name=one, set_names=names)
    with hints.selected(chosen):  # a hint to verify the installed wheel names the same library and set
        shape = _shaping_options(out_dir, local_label, fmt)
        return _build(source, out_dir, local_label, platform, chosen, ui, quiet=quiet, shape=shape)


_PLATFORM_TAG = re.compile(r"[A-Za-z0-9_.]+")  # pip's tags: letters, digits, '_' and '.'


def _shaping_options(out_dir: str, local_label: str | None, fmt: str) -> list[str]:
    """The options that shape the artifact and its report, as given: a hint to build it another
    way carries them, so the wheel it gives is the one asked for (its name, its version, where)."""
    words = [] if out_dir == "." else ["--out", out_dir]
    words += ["--local-label", local_label] if local_label is not None else []
    return words + (["--format", fmt] if fmt != OutputFormat.TEXT else [])


def _build(
    source: str,
    out_dir: str,
    local_label: str | None,
    platform: str | None,
    chosen: Options,
    ui: UI,
    *,
    quiet: bool,
    shape: list[str],
) -> WheelResult:
    stock, checked = _stock_wheel(
        source, platform, chosen, ui, shape
    )  # before the activity line: a download shows its bar
    ui.knows({"stock_wheel": str(stock)})
    again = _build_again(source, out_dir, platform, chosen, shape)
    with ui.activity("building the patched wheel") as say:
        result = build_patched_wheel(
            stock, Path(out_dir), chosen, label=local_label, say=say, expect_identity=checked, again=again
        )
    if result.path is not None:
        ui.wrote(f"the wheel was written: it is in place, {result.path}")
    for note in result.warnings:
        ui.warn(note)
    _say_if_seals_are_off(ui)
    if ui.json_mode:
        ui.json(_document(result))
    else:
        if result.checks and not quiet:
            show_checks(ui, result.checks)
        if result.path is not None:
            ui.result(str(result.path))  # alone on its line: a script reads it, a person copies it whole
            ui.note(_next_step(result.path))
    return result


def _build_again(source: str, out_dir: str, platform: str | None, chosen: Options, shape: list[str]) -> str:
    """This build as a command to paste from any directory (a bare `patchkit wheel` names no
    release): the release or file, --out and the options as given."""
    named = os.path.abspath(source) if source.endswith(".whl") or "/" in source else source
    words = [named, "--out", os.path.abspath(out_dir), *shape[2 if shape[:1] == ["--out"] else 0 :]]
    words += ["--platform", platform] if platform else []
    return f"{hints.command('wheel', chosen=chosen)[:-1]} {shlex.join(words)}`"


def _next_step(wheel: Path) -> str:
    """What to do with the wheel: install it over the stock vLLM of its release (its dependencies
    are that release's, already there). The path absolute: the command works from any directory."""
    install = shlex.join(["pip", "install", "--no-deps", str(wheel.resolve())])
    return f"next: install it over the stock vLLM of that release: `{install}`"


def _stock_wheel(
    source: str, platform: str | None, chosen: Options, ui: UI, shape: list[str]
) -> tuple[Path, tuple[int, ...] | None]:
    """SOURCE: a wheel file, or a version whose stock wheel is downloaded into the cache (with the
    identity of the cached file that was checked), once the library has a series for it."""
    path = Path(source)
    named_a_file = source.endswith(".whl") or "/" in source  # else a version, even if a directory has its name
    if named_a_file and path.exists() and not path.is_file():
        raise BadInput(f"{source} is not a regular file: give the path of a wheel file, or a version")
    try:
        is_file = path.is_file()
    except OSError:  # a name the OS refuses to look up (too long): no file of that name
        is_file = False
    if is_file:
        if platform:
            raise BadInput("--platform chooses the wheel of a VERSION; a wheel file has its own")
        return path, None
    if named_a_file:
        raise BadInput(f"no wheel file {source}", hint="give the path of a wheel file, or a VERSION to download")
    _require_a_series(source, chosen)
    try:
        with ui.transfer(f"vllm {source}") as on_bytes:
            return checked_stock_wheel(source, platform=platform, say=ui.detail, warn=ui.warn, on_bytes=on_bytes)
    except NoIndex as exc:  # no index to ask (no-index, file://, down): the cache's own file, else pip's
        cached = vouched_cached_wheel(source, platform)
        if cached is not None:
            exc.hint = _build_the_cached_file(cached, chosen, shape)
        elif isinstance(exc, IndexNotRead):
            exc.hint = _download_it_with_pip(source, platform, chosen, shape)
        raise


def _build_the_cached_file(cached: Path, chosen: Options, shape: list[str]) -> str:
    """The cache's own file of the release, which hashes to the sha256 this user's patchkit sealed for
    its name: `wheel FILE` builds from it with no index, held to that sha256."""
    build = hints.command("wheel", chosen=chosen)[:-1]
    rest = f" {shlex.join(shape)}" if shape else ""
    return f"the cache holds the release's wheel, with the sha256 patchkit recorded for it: {build} {shlex.quote(str(cached))}{rest}`"


def _download_it_with_pip(version: str, platform: str | None, chosen: Options, shape: list[str]) -> str:
    """What works where pip's source is one patchkit does not read: pip downloads the wheel, and
    `patchkit wheel FILE` builds from it (the same selection and shaping options). Both commands
    run as printed: a real directory, a glob left unquoted, `python3 -m pip` (a pipx install puts no
    pip on PATH)."""
    release = normalize_version(version)
    directory = f"{_DOWNLOAD_DIR}/{platform or _THIS_MACHINE}"
    pip = ["python3", "-m", "pip", "download", f"vllm=={release}", "--no-deps", "-d", directory]
    if platform:
        pip += ["--platform", platform, "--only-binary=:all:"]
    build = hints.command("wheel", chosen=chosen)[:-1]  # the selection; the file and options after it
    wheel_glob = f"{shlex.quote(directory)}/vllm-{release}-*.whl"
    rest = f" {shlex.join(shape)}" if shape else ""
    return f"run `{shlex.join(pip)}`, then {build} {wheel_glob}{rest}`"


def _say_if_seals_are_off(ui: UI) -> None:
    problem = seal.unusable_key()
    if problem:
        ui.warn(
            f"{problem}: nothing patchkit cached is trusted, so the cached wheel is hashed and the checks run "
            f"again on every run; {seal.unusable_fix()}"
        )


def _require_a_series(version: str, chosen: Options) -> None:
    """Exit 3 before any download when the set has nothing to apply to `version` (what the build
    would find after fetching ~500 MB). --patch files name no versions: they are judged on the wheel."""
    if chosen.adhoc:
        return
    release = Version(normalize_version(version))
    if several(chosen):
        sets = choose_sets(load_library(locate(chosen.library).path), chosen.set_names)
        selections = [select(each, release) for each in sets]
    else:
        selections = [select(load_chosen(chosen.library, chosen.set_name), release)]
    if any(s.kind not in (UPSTREAM, UNSUPPORTED) for s in selections):
        return
    upstream = next((s for s in selections if s.kind == UPSTREAM), None)
    if upstream is not None:
        raise nothing_to_patch(upstream)
    raise NoPatchSet("; ".join(s.note or f"{s.set_name}: no series for vLLM {release}" for s in selections))


def _document(result: WheelResult) -> dict[str, Any]:
    return {
        "result": result.outcome,
        "wheel": str(result.path) if result.path else None,
        "sha256": result.sha256(),
        "version": result.version,
        "label": result.label,
        "set": result.set_name,
        **({"sets": [name for name, _patches in result.sets]} if result.sets else {}),
        "patches": [{"name": p.name, "sha256": p.sha256} for p in result.patches],
        "checks": [r.to_json() for r in result.checks],
    }
