#!/usr/bin/env python3
"""What a reshard between hosts must move between nodes, from the two folders' indexes.

Usage: internode_bytes.py SOURCE_INDEX TARGET_INDEX NODES
NODES is a JSON list, the node of each rank (e.g. [0, 1, 1, 2]); both folders are on a
1-D mesh of that many ranks. Prints two numbers: the bytes that enter each node once
(an element some rank of a node needs and no rank of it holds crosses into that node
once, however many of its ranks need it: sdrt's once-per-node forwarding), and the bytes
every such rank would receive by itself (what a plan without node ids moves).
Shard(d) pieces follow torch.chunk (ceil(n / ranks) per rank, the last ones short).
"""
import itertools
import json
import sys

ITEM_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "U8": 1, "I8": 1}


def holders(placements, shape, ranks):
    """A function from an element's index to the bitmask of the ranks that hold it."""
    p = placements.strip("[]")
    if p == "R":
        everyone = (1 << ranks) - 1
        return lambda index: everyone
    if not (p.startswith("S(") and p.endswith(")")):
        raise SystemExit(f"unsupported placements {placements} (1-D mesh, S(d) or R)")
    dim = int(p[2:-1])
    chunk = -(-shape[dim] // ranks)
    return lambda index: 1 << (index[dim] // chunk)


def main():
    source = json.load(open(sys.argv[1]))
    target = json.load(open(sys.argv[2]))
    nodes = json.loads(sys.argv[3])
    ranks = len(nodes)
    node_ranks = {}
    for rank, node in enumerate(nodes):
        node_ranks[node] = node_ranks.get(node, 0) | (1 << rank)
    source_tensors = {t["name"]: t for t in source["tensors"]}
    once = every_rank = 0
    for t in target["tensors"]:
        held = holders(source_tensors[t["name"]]["placements"], t["shape"], ranks)
        needed = holders(t["placements"], t["shape"], ranks)
        item = ITEM_BYTES[t["dtype"]]
        for index in itertools.product(*(range(n) for n in t["shape"])):
            h, n = held(index), needed(index)
            for members in node_ranks.values():
                if n & members and not h & members:
                    once += item
                    every_rank += item * bin(n & members).count("1")
    print(once, every_rank)


if __name__ == "__main__":
    main()
