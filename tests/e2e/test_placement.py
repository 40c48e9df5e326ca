"""Placement policy through the kube-scheduler model: binpack leaves whole nodes that spread breaks (docs/scoring.md).

The bench's driver (bench/bench_placement.py) on a cluster small enough for
CI: the model's asynchronous binds, random choice among the top scores and
the fake API server, once per policy, pods arriving and leaving in phases.
"""

from __future__ import annotations

from bench.bench_placement import run_policy


def test_binpack_leaves_more_whole_nodes_than_spread_and_places_the_whole_node_pods() -> None:
    binpack = run_policy("binpack", nodes=6, seed=3, settle=1.5)["phases"]
    spread = run_policy("spread", nodes=6, seed=3, settle=1.5)["phases"]
    for b, s in zip(binpack, spread, strict=True):
        assert b["failed_binds"] == 0 and s["failed_binds"] == 0, (b, s)
        assert b["whole_nodes_free"] > s["whole_nodes_free"], (b["phase"], b["whole_nodes_free"], s["whole_nodes_free"])
        assert b["unplaced_with_room"] == 0, b
    fill = binpack[0]
    assert fill["whole_nodes_free"] == fill["ideal"]["whole_nodes_free"], fill
    assert spread[-1]["unplaced_with_room_by_kind"].get("node"), "spread touches every node: the whole-node pod finds none"
