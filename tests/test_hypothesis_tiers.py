"""make test-fast tries each property test on a quarter of its examples (the `fast` Hypothesis profile,
helpers.examples); make test tries all of them. No property keeps a count the tier cannot scale."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import FAST_PROFILE, FAST_SHARE, examples
from hypothesis import settings

TESTS = Path(__file__).parent
MAKEFILE = (TESTS.parent / "Makefile").read_text()


def _recipe(target: str) -> str:
    found = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, re.MULTILINE)
    assert found, target
    return found.group(1)


def _counts(profile: str) -> list[int]:
    before = settings.get_current_profile_name()
    settings.load_profile(profile)
    try:
        return [examples(n) for n in (1500, 60, 12, 4)]
    finally:
        settings.load_profile(before)


def test_the_fast_profile_tries_a_share_of_each_propertys_examples_and_the_default_all():
    assert _counts("default") == [1500, 60, 12, 4]
    assert _counts(FAST_PROFILE) == [1500 // FAST_SHARE, 60 // FAST_SHARE, 10, 4]  # 10 at least where there were more


def test_make_test_fast_loads_the_fast_profile_and_make_test_does_not():
    assert "--hypothesis-profile=fast" in MAKEFILE.replace("$(FAST_PROFILE)", "--hypothesis-profile=fast")
    assert "$(FAST_PROFILE)" in _recipe("test-fast")
    assert "hypothesis-profile" not in _recipe("test") and "FAST_PROFILE" not in _recipe("test")
    assert re.search(rf"^FAST_PROFILE := --hypothesis-profile={FAST_PROFILE}$", MAKEFILE, re.MULTILINE)


def test_every_propertys_count_goes_through_the_tier():
    raw = [
        f"{path.name}:{number}"
        for path in sorted(TESTS.glob("*.py"))  # the suite make runs (vllm_import/ is make test-vllm's)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"max_examples\s*=\s*(?!examples\()", line)
    ]
    assert not raw, raw
