"""The names of what `refresh` and `port` did: to a patch file, to a release sharing a series, to a port."""

from __future__ import annotations

from patchkit.base.enums import StrEnum


class PatchChange(StrEnum):
    """What `refresh` or `port` did to one patch file of a series."""

    UNCHANGED = "unchanged"
    UPDATED = "updated"
    NEW = "new"
    REMOVED = "removed"


class SharedState(StrEnum):
    """A release that shares the refreshed series, as `refresh` checked it."""

    APPLIES = "applies"
    CONFLICT = "conflict"
    NOT_VERIFIED = "not-verified"


class PortOutcome(StrEnum):
    """How `port` ended."""

    PORTED = "ported"
    CONFLICTS = "conflicts"
    UPSTREAM = "upstream"  # the new release has the change itself: nothing written
    IDENTICAL = "identical"  # the series applies to the new release as it is
