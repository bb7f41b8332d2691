"""The version a patched wheel carries: the stock one with a local label (PEP 440 `+local`).

Default `+patchkit.<set>`, and for a wheel of several sets `+patchkit.<set>.<set>...` in the order
applied (packaging spells each `-` as `.`: the wheel's patchkit.json names every set exactly); one
longer than LABEL_LIMIT is the short form `+patchkit.<n>sets.<8 hex digits of the names' sha256>`.
`--local-label L` instead of `patchkit.<set>`; a version that already has
a local label (`0.16.0+cu129`) keeps it and is extended with `.` (`0.16.0+cu129.patchkit.eagle3`).
packaging judges and normalizes (lower case, `-` and `_` become `.`): a pin `vllm==0.16.0` still
matches the result, since a public specifier ignores the local label.
"""

from __future__ import annotations

import hashlib

from packaging.version import Version

from patchkit.base.errors import BadInput

PREFIX = "patchkit"
# The label is in the wheel's file name and its dist-info directory's: both must stay under 255 bytes.
LABEL_LIMIT = 128


def default_label(set_names: list[str]) -> str:
    """patchkit.<each set, in the order applied>; the short form when that is too long."""
    joined = ".".join([PREFIX, *set_names])
    if len(joined) <= LABEL_LIMIT:
        return joined
    digest = hashlib.sha256("\n".join(set_names).encode()).hexdigest()[:8]
    return f"{PREFIX}.{len(set_names)}sets.{digest}"


def normalized_label(label: str) -> str:
    """`label` as packaging spells a local segment; BadInput when it is not one."""
    text = label[1:] if label.startswith("+") else label
    try:
        local = Version(f"0+{text}").local
    except ValueError:
        local = None
    if not text or not local:
        raise BadInput(
            f"local label {label!r} is not a PEP 440 local version label",
            hint="letters and digits, separated by '.', '-' or '_' (e.g. patchkit.eagle3)",
        )
    if len(local) > LABEL_LIMIT:
        raise BadInput(
            f"local label {label[:40]!r}... is longer than {LABEL_LIMIT} characters",
            hint="the label is part of the wheel's file name: use a shorter one",
        )
    return local


def labelled_version(stock: Version, label: str) -> Version:
    """The stock version with `label` added: after an existing local label, joined by '.'."""
    added = normalized_label(label)
    local = f"{stock.local}.{added}" if stock.local else added
    return Version(f"{stock.public}+{local}")
