"""An option vLLM knows, given after a `--` in the launch: argparse reads every word after `--` as
positional, so vLLM refuses it as unrecognized; the fix is to remove the `--`, not to spell it so."""

from __future__ import annotations

import pytest

from patchkit.base.errors import BadInput
from patchkit.launch.command import parse

SPEC = '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}'


@pytest.mark.parametrize(
    "argv",
    [
        ["vllm", "serve", "--", "/m", "--speculative-config", SPEC],
        ["vllm", "serve", "/m", "--", "--max-model-len=4096"],
        ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "--", "/m", "-tp", "8", "--port", "9"],
    ],
)
def test_a_known_option_after_dashes_is_said_positional_and_removing_the_dashes_reads_it(argv):
    with pytest.raises(BadInput) as refused:
        parse(argv, "0.16.0")
    assert "unrecognized arguments" in refused.value.message
    hint = refused.value.hint or ""
    assert hint.startswith("everything after `--` is positional") and "remove the `--`" in hint, hint
    assert "did you mean" not in hint, hint
    followed = parse([w for w in argv if w != "--"], "0.16.0")
    assert followed.model == "/m"


def test_a_misspelled_option_without_dashes_still_gets_the_option_it_looks_like():
    with pytest.raises(BadInput) as refused:
        parse(["vllm", "serve", "/m", "--speculative-confg", SPEC], "0.16.0")
    assert (refused.value.hint or "").startswith("did you mean --speculative-config?"), refused.value.hint
