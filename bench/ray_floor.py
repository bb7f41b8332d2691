"""Ray's own cost of what `patchkit fleet` must do at the least, with no patchkit in it: connect
to the cluster at argv[1] (as fleet connects), run a trivial task on each alive node (num_cpus=0,
hard node affinity: a new Ray worker per node, as a cold fleet run starts its agents), and
disconnect. bench.py times it beside `fleet apply` (row 12)."""

import sys

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
def answer() -> int:
    return 1


def main(address: str) -> None:
    ray.init(address=address, namespace="patchkit-bench", log_to_driver=False, logging_level="ERROR")
    try:
        nodes = [node["NodeID"] for node in ray.nodes() if node.get("Alive")]
        pinned = [answer.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)) for n in nodes]
        if sum(ray.get([task.remote() for task in pinned])) != len(nodes):
            raise SystemExit("a node gave no answer")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
