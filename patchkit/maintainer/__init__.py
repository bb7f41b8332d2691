"""Maintainer tools (`workspace`, `refresh`, `port`): a git workspace of a release with its series applied, refresh, port.

A workspace is a git repository (GitPython):

    commit 1  "stock vllm V"       the release's stock files the series touches (or every .py),
                                   tagged `stock`
    commit 2  the series applied   by patchkit's own engine (plan_apply, planned contents written)
    .patchkit-workspace.json       untracked and excluded in .git/info/exclude: the set, version,
                                   series directory, each patch's DEP-3 header, diff and files

`refresh` diffs the stock commit against the working tree (committed or not) and writes the
changes back as the series' diffs, split by file: each patch keeps the files it touched; a file no
patch touched goes to the last patch (or to a new one with --new-patch). A file several patches
change keeps the earlier patches' parts (when they still apply) and the rest goes to the last.

`port` carries a set from one release to another by a three-way merge per file and patch
(`git merge-file`: base V1 before the patch, ours V1 after it, theirs V2 so far).

Diffs are git's own (`git diff --no-index`, 3 lines of context, myers), rewritten to the library's
form: `diff --git a/P b/P`, `--- a/P`, `+++ b/P`, no `index` line.

The modules: `workspace`, `refresh` and `port` (one command each) share `meta` (the workspace's
record), `reports` (what the commands report), `patchtext` (a patch's header and diff), `gitrepo`
(the repository and git's diff), `merge` (git merge-file), `stock` (a release's stock files),
`series` (the library's series and set.toml entries), `workdir` (the directories they fill) and
`states` (the names of what they did).
"""
