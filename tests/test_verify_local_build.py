"""verify on a build with a local label of its own (0.16.0+corp) whose RECORD lists files that hold
a set's change: its files are its builder's, so "upstream may have fixed this in 0.16.0+corp: close
the set's range" and, on a failing check, "upstream regression: the stock files fail" were untrue.
A public release's stock files still get those words (issue 20 residuals, words30 item 4)."""

from __future__ import annotations

import pytest
from helpers import BEHAVIOUR_JUDGE, FAILING_JUDGE, PARSER, PARSER_FIXED, judged_library, pip_install


@pytest.mark.parametrize(("judge", "code"), [(BEHAVIOUR_JUDGE, 0), (FAILING_JUDGE, 1)])
def test_a_local_build_is_never_told_upstream_fixed_or_broke_it(run, tmp_path, scratch, judge, code):
    library = judged_library(scratch, judge)
    site = tmp_path / "corp"
    pip_install(site, "0.16.0+corp7", {PARSER: PARSER_FIXED})
    done = run("verify", "--target", site, "--patches", library)
    said = " ".join(done.output.split())
    assert done.exit_code == code, said
    assert "upstream may have fixed" not in said and "close the set's range" not in said, said
    assert "upstream regression" not in said and "the stock files fail" not in said, said
    if code == 0:
        assert said.endswith("; this build (+corp7) holds the change itself"), said
        return
    assert "verify: FAILED: this build's files fail the set's checks (vLLM 0.16.0+corp7's own files" in said, said
    fix = "this build differs from vLLM 0.16.0: put the release's files back with "
    assert fix in said and f"`patchkit wheel --patches {library} 0.16.0 --local-label corp7`" in said, said


def test_a_public_releases_stock_files_still_say_upstream(run, tmp_path, scratch):
    library = judged_library(scratch, BEHAVIOUR_JUDGE)
    site = tmp_path / "release"
    pip_install(site, "0.17.0", {PARSER: PARSER_FIXED})
    done = run("verify", "--target", site, "--patches", library)
    assert "upstream may have fixed this in 0.17.0: close the set's range" in done.output, done.output
