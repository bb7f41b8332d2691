"""The drafter and proposer rules (parallel_drafting, drafter_embedding, drafter_load, proposer_start) read
their marks from the real releases' files, fetched from the package index: each mark is found exactly in
the releases whose code has the rule (0.13.0-0.17.0), so a rule judges where vLLM refuses, and nowhere else."""

from __future__ import annotations

import pytest
from helpers import lay_out_release

from patchkit.launch import drafter_embedding, drafter_load, parallel_drafting, proposer_start
from patchkit.launch.model_files import EAGLE3_DRAFTER

pytestmark = pytest.mark.release

RELEASES = ["0.13.0", "0.14.0", "0.15.0", "0.15.1", "0.16.0", "0.17.0"]
FILES = {
    "drafter": EAGLE3_DRAFTER,
    "proposer": drafter_load.EAGLE_PROPOSER,
    "draft_model": drafter_load.DRAFT_MODEL_PROPOSER,
    "v2": drafter_load.V2_SPECULATOR,
}
# mark -> (the file it is read in, the releases whose file holds it)
MARKS = {
    "mask_hidden required": ("drafter", parallel_drafting.MASK_REQUIRED, {"0.16.0", "0.17.0"}),
    "mask_hidden sized": ("drafter", parallel_drafting.MASK_SIZED, {"0.16.0", "0.17.0"}),
    "widths asserted": ("drafter", drafter_embedding.WIDTHS_ASSERTED, set(RELEASES)),
    "embedding shared": ("proposer", drafter_embedding.SHARED_UNLESS_OWN, set(RELEASES)),
    "own load config": ("proposer", drafter_load.OWN_LOAD, {"0.17.0"}),
    "own load config, draft_model": ("draft_model", drafter_load.OWN_LOAD, set()),
    "own load config, V2": ("v2", drafter_load.OWN_LOAD, set()),
    "pard_token required": ("proposer", proposer_start.TOKEN_REQUIRED, {"0.16.0", "0.17.0"}),
    "multimodal refused": ("proposer", proposer_start.MULTIMODAL_REFUSED, {"0.16.0", "0.17.0"}),
    "extra slots": ("proposer", proposer_start.EXTRA_SLOTS, {"0.16.0", "0.17.0"}),
    "padding refused": ("proposer", proposer_start.PADDING_REFUSED, {"0.16.0", "0.17.0"}),
    "draft -tp refused": ("draft_model", proposer_start.TP_REFUSED, {"0.15.0", "0.15.1", "0.16.0", "0.17.0"}),
    "multimodal refused, draft_model": ("draft_model", proposer_start.MULTIMODAL_REFUSED, {"0.15.0", "0.15.1"}),
}


@pytest.mark.parametrize("version", RELEASES)
def test_each_mark_is_in_the_releases_whose_code_has_the_rule(tmp_path, version):
    tree = lay_out_release(version, sorted(FILES.values()), tmp_path / "site")
    read = {name: (tree / path).read_bytes() if (tree / path).is_file() else b"" for name, path in FILES.items()}
    assert read["drafter"] and read["proposer"], version
    found = {mark for mark, (name, text, _) in MARKS.items() if text in read[name]}
    assert found == {mark for mark, (_, _, releases) in MARKS.items() if version in releases}, version
