"""`patchkit fleet`: status, apply, verify and revert on every node of a Ray cluster.

Only `cluster` imports Ray (an optional extra, `pip install 'patchkit[ray]'`); `node` is what a
node runs (patchkit's own CLI in a subprocess, against that node's vLLM); `protocol` is the
two-phase apply and the fleet's result, with nothing of Ray in it (the tests drive it with fake
nodes too)."""
