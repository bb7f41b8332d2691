"""`patchkit fleet`: status, apply, verify and revert on every node of a Ray cluster.

Only `cluster` imports Ray (an optional extra: `pip install '.[ray]'` from a clone, or Ray installed beside patchkit); `node` is what a
node runs (its patchkit agent, which runs patchkit's own CLI in its process against that node's
vLLM); `protocol` is the two-phase apply and the fleet's result, with nothing of Ray in it (the
tests drive it with fake nodes too); `states` names a node's states."""

DEFAULT_TIME_LIMIT = 600.0  # seconds: fleet's --timeout default, and a node's step's when a request has none
LEASE = 10.0  # seconds without a fleet apply driver's heartbeat after which its nodes give up on it
ROLLED_BACK_BY_ITS_NODE = "rolled back by its node"  # a revert answered by the node's own rollback
HEARTBEAT = 1.0  # seconds between a fleet apply driver's heartbeats
