"""The options every command shares (kept import-light: `patchkit --help` loads this)."""

from __future__ import annotations

from patchkit.base.values import FrozenValue, frozen

# ctx.meta (shared by a run's click contexts): the --format click read for the command, so that the
# run's end (cli.main) need not parse the command line a second time to learn it
CHOSEN_FORMAT = "patchkit.chosen-format"


@frozen
class Options(FrozenValue):
    """What the command line chose: the target, the library, the sets, the versions."""

    target_dir: str | None = None
    python: str | None = None
    vllm_version: str | None = None  # with several --vllm-version (verify), None: no one release
    library: str | None = None
    adhoc: tuple[str, ...] = ()
    set_name: str | None = None
    vllm_versions: tuple[str, ...] = ()  # verify's repeated --vllm-version, as given
    set_names: tuple[str, ...] = ()  # apply's repeated --set, as given (one: also `set_name`)
    # `python` is a launch command's interpreter (preflight, run), not a --python given: where it finds
    # vllm is asked from / (the launch's own directory is the launch-target finding's question)
    python_of_launch: bool = False

    @classmethod
    def given(
        cls,
        target_dir: str | None,
        python: str | None,
        versions: tuple[str, ...],
        library: str | None,
        adhoc: tuple[str, ...],
        set_name: str | None,
        set_names: tuple[str, ...] = (),
    ) -> Options:
        """The options of a command whose --vllm-version repeats: one release named is also `vllm_version`."""
        one = versions[0] if len(versions) == 1 else None
        return cls(target_dir, python, one, library, adhoc, set_name, vllm_versions=versions, set_names=set_names)
