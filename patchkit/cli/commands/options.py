"""Every option more than one command takes, declared once; the commands compose them.

Kept import-light: `patchkit COMMAND --help` loads this (click only)."""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar, overload

import click

from patchkit.base import hints
from patchkit.base.enums import OutputFormat
from patchkit.base.errors import BadInput, PatchkitError, TargetError, escaped
from patchkit.base.options import CHOSEN_FORMAT, Options
from patchkit.tree.modules import scanned_once

F = TypeVar("F", bound=Callable[..., Any])
Command = Callable[..., Any]  # a command function: target_options changes its parameters

FORMATS = (OutputFormat.TEXT, OutputFormat.JSON)
VERSION_HELP = "Override the detected vLLM version."


# what the OS says of a path itself (not of a file patchkit would read): no command can use such a path
PATH_REFUSALS = (errno.ENAMETOOLONG, errno.ELOOP, errno.EACCES, errno.EPERM)
SHOWN_PATH = 120  # characters of a refused path a message shows (a refused path may be thousands long)


def os_refuses(
    error: type[PatchkitError], what: str, *, paths_only: bool = False
) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A callback that stops a command whose `what` path the OS refuses to look up (too long, a
    symlink loop, a directory it may not search) with `error`, before any command works with it; a
    path that does not exist is left to the command (a --dest it creates, a target it reports).
    paths_only: a value without a slash or a .whl ending is no path (wheel's VERSION) and not looked up."""

    def check(ctx: click.Context, param: click.Parameter, given: Any) -> Any:
        is_path = isinstance(given, str) and bool(given) and ("/" in given or given.endswith(".whl"))
        if isinstance(given, str) and given and (is_path or not paths_only):
            try:
                os.stat(given)
            except OSError as exc:
                if exc.errno in PATH_REFUSALS:
                    shown = given if len(given) <= SHOWN_PATH else f"{given[: SHOWN_PATH // 2]}...{given[-40:]}"
                    raise error(f"{what} {escaped(shown)}: {os.strerror(exc.errno)}") from None
            except ValueError:  # a NUL in the path: click's own
                pass
        return given

    return check


target = click.option(
    "--target",
    "target_dir",
    metavar="DIR",
    callback=os_refuses(TargetError, "target directory"),
    help="Directory containing the vllm/ package (site-packages, unpacked wheel, checkout).",
)
python = click.option(
    "--python",
    "python",
    metavar="PATH",
    help="Interpreter whose environment has vLLM (found without importing it; apply/verify import-test the patches).",
)
patches = click.option(
    "--patches",
    "library",
    metavar="DIR",
    callback=os_refuses(BadInput, "patch library"),
    help="A patch library root (default: $PATCHKIT_LIBRARY, else the installed library).",
)
patch = click.option(
    "--patch",
    "adhoc",
    metavar="FILE",
    multiple=True,
    help="Ad-hoc unified diff instead of the library's series (repeatable).",
)
# two texts (test_operations): the commands that act on every covering set, and port and
# workspace, which work on one set and need it named when the library holds several
SET_HELP = "Patch set in the library (default: every set that covers the vLLM version)."
ONE_SET_HELP = "The library's set to work on (needed when the library holds several)."


def _one_set(otherwise: str) -> Callable[[click.Context, click.Parameter, tuple[str, ...]], str | None]:
    """A command that acts on one set: click would keep only the last of several --set unsaid (a
    `revert --set a --set b` that reverts b alone), so several are a usage error."""

    def chosen(ctx: click.Context, param: click.Parameter, given: tuple[str, ...]) -> str | None:
        names = list(dict.fromkeys(given))
        if len(names) > 1:
            command = ctx.command_path.partition(" ")[2]
            raise click.UsageError(f"{command} takes one --set: {otherwise}", ctx)
        return names[0] if names else None

    return chosen


set_name = click.option(
    "--set",
    "set_name",
    metavar="NAME",
    multiple=True,
    callback=_one_set("run it once per set, or without --set for all"),
    help=SET_HELP,
)
set_names = click.option("--set", "set_name", metavar="NAME", multiple=True, help=SET_HELP)  # apply: repeatable
one_set = click.option(
    "--set", "set_name", metavar="NAME", multiple=True, callback=_one_set("run it once per set"), help=ONE_SET_HELP
)
quiet = click.option("-q", "--quiet", is_flag=True, help="Only errors and warnings.")
verbose = click.option("-v", "--verbose", count=True, help="More detail.")


def vllm_version(*, multiple: bool = False, help: str = VERSION_HELP) -> Callable[[F], F]:
    return click.option("--vllm-version", metavar="VERSION", multiple=multiple, help=help)


def compose(*options: Callable[[F], F]) -> Callable[[F], F]:
    """One decorator for several options, listed in `--help` in the order given."""

    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


library_options = compose(patches, set_name)  # fetch: which library and sets
one_set_options = compose(patches, one_set)  # port, workspace: which library and the one set
output_options = compose(quiet, verbose)


@overload
def target_options(
    func: Command,
    *,
    version_help: str = ...,
    versions_repeatable: bool = ...,
    sets_repeatable: bool = ...,
    without: Collection[str] = ...,
) -> Command: ...


@overload
def target_options(
    func: None = None,
    *,
    version_help: str = ...,
    versions_repeatable: bool = ...,
    sets_repeatable: bool = ...,
    without: Collection[str] = ...,
) -> Callable[[Command], Command]: ...


def target_options(
    func: Command | None = None,
    *,
    version_help: str = VERSION_HELP,
    versions_repeatable: bool = False,
    sets_repeatable: bool = False,
    without: Collection[str] = (),
) -> Command | Callable[[Command], Command]:
    """--target/--python/--vllm-version/--patches/--patch/--set and -q/-v, on every target command;
    the command gets them as `opts` (an Options), `quiet` and `verbose`.

    versions_repeatable: --vllm-version may be given several times (verify: several releases).
    sets_repeatable: --set may be given several times (apply: several sets; one is also `set_name`).
    without: the options the command would ignore, by parameter name (target_dir, python,
    vllm_version, library, adhoc, set_name, quiet, verbose): not offered (the command sees None,
    or False or 0)."""
    if func is None:
        return functools.partial(
            target_options,
            version_help=version_help,
            versions_repeatable=versions_repeatable,
            sets_repeatable=sets_repeatable,
            without=without,
        )
    offered = {
        "target_dir": target,
        "python": python,
        "vllm_version": vllm_version(multiple=versions_repeatable, help=version_help),
        "library": patches,
        "adhoc": patch,
        "set_name": set_names if sets_repeatable else set_name,
        "quiet": quiet,
        "verbose": verbose,
    }
    assert set(without) <= set(offered), set(without) - set(offered)

    @functools.wraps(func)
    def wrapper(
        *,
        target_dir: str | None = None,
        python: str | None = None,
        vllm_version: str | tuple[str, ...] | None = None,  # with versions_repeatable, a tuple
        library: str | None = None,
        adhoc: Iterable[str] = (),
        set_name: str | tuple[str, ...] | None = None,  # with sets_repeatable, a tuple
        quiet: bool = False,
        verbose: int = 0,
        **kwargs: Any,
    ) -> Any:
        names = tuple(dict.fromkeys(set_name)) if isinstance(set_name, tuple) else ()  # each once, as given
        one = (names[0] if len(names) == 1 else None) if isinstance(set_name, tuple) else set_name
        if isinstance(vllm_version, tuple):
            opts = Options.given(target_dir, python, vllm_version, library, tuple(adhoc), one, names)
        else:
            opts = Options(target_dir, python, vllm_version, library, tuple(adhoc), one, set_names=names)
        # every hint names commands with the user's selection; the tree's bytecode is scanned once
        with hints.selected(opts), scanned_once():
            return func(opts=opts, quiet=quiet, verbose=verbose, **kwargs)

    return compose(*(option for name, option in offered.items() if name not in without))(wrapper)


@overload
def format_option(func: F, *, formats: tuple[OutputFormat, ...] = ..., help: str = ...) -> F: ...


@overload
def format_option(
    func: None = None, *, formats: tuple[OutputFormat, ...] = ..., help: str = ...
) -> Callable[[F], F]: ...


def format_option(
    func: F | None = None, *, formats: tuple[OutputFormat, ...] = FORMATS, help: str = "Output format."
) -> F | Callable[[F], F]:
    # the choices are the values (click shows an Enum's names); the callback reads them into the enum
    choice = click.Choice([str(f) for f in formats])
    option = click.option(
        "--format", "fmt", type=choice, default="text", show_default=True, help=help, callback=_output_format
    )
    return option(func) if func else option


def _output_format(ctx: click.Context, _param: click.Parameter, value: str) -> OutputFormat:
    chosen = ctx.meta[CHOSEN_FORMAT] = OutputFormat(value)
    return chosen


def dry_run_option(help: str) -> Callable[[F], F]:
    return click.option("--dry-run", is_flag=True, help=help)


def force_option(help: str) -> Callable[[F], F]:
    return click.option("--force", is_flag=True, help=help)


def all_python_option(help: str = "Every vllm/**/*.py, not only the files the series touches.") -> Callable[[F], F]:
    return click.option("--all", "all_python", is_flag=True, help=help)


def no_import_option(help: str = "Do not import the patched modules (probe check).") -> Callable[[F], F]:
    return click.option("--no-import", is_flag=True, help=help)
