"""What a launch check says (Finding) and what vLLM itself answered (VllmVerdict): the data the
launch checks, vLLM's own validation and a set's launch script share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from patchkit.base.values import Value

PASS, FAIL, CANNOT_JUDGE = "pass", "fail", "cannot judge"

# a speculative "quantization" vLLM reads for a drafter whose config.json has none (get_quant_config, 0.12-0.17)
UNREAD_FIX = 'drop "quantization" from --speculative-config (vLLM reads the drafter\'s own from its config.json)'


@dataclass(eq=False, repr=False)
class Finding(Value):
    """One preflight finding: its check, whether it passed, what was found and the fix."""

    check: str
    ok: bool  # False fails the launch
    message: str
    fix: str | None = None  # what to do; for a check that could not judge, what gives it what it lacks
    judged: bool = True  # False: the check lacked what it needs; not a failure (ok), and never a pass
    note: bool = False  # a pass preflight and run say as a note too (a needed set --set left out, applied)
    # the guard's fix is the apply that records the tree as it is, of these sets (empty: every set);
    # None: another fix (TreeStatus.restores)
    restores: tuple[str, ...] | None = None

    @property
    def result(self) -> str:
        if not self.judged:
            return CANNOT_JUDGE
        return PASS if self.ok else FAIL

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "ok": self.ok, "result": self.result, "message": self.message, "fix": self.fix}


def cannot_judge(check: str, reason: str, gives: str | None) -> Finding:
    """A check that lacks what it needs (`reason`), and what gives it that (`gives`)."""
    return Finding(check, True, f"cannot judge: {reason}", gives, judged=False)


@dataclass(eq=False, repr=False)
class VllmVerdict(Value):
    """What vLLM itself answered, imported in the target's interpreter; None: not asked or no answer."""

    result: bool | None
    message: str
    fix: str | None = None  # when vLLM's answer itself says what to do (a general plugin's doing)
