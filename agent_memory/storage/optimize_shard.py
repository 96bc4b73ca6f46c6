"""Build a Qdrant Edge shard's HNSW index in a child process: `python -m agent_memory.storage.optimize_shard DIR DIM`.

Measured: `EdgeShard.optimize()` holds the GIL for the whole build (15k points: 16 s in which the event loop ran
once), so it cannot run on a thread of the daemon. `EdgeVectors.optimize_offline` copies the shard, runs this on
the copy, and swaps the result in. Imports only qdrant_edge, so the child starts in well under a second.
"""

from __future__ import annotations

import json
import sys
import time

from qdrant_edge import Distance, EdgeConfig, EdgeShard, EdgeVectorParams


def main(argv: list[str]) -> int:
    path, dimension = argv[0], int(argv[1])
    started = time.perf_counter()
    shard = EdgeShard.load(path, EdgeConfig(vectors=EdgeVectorParams(size=dimension, distance=Distance.Cosine)))
    changed = shard.optimize()
    info = shard.info()
    shard.flush()
    shard.close()
    result = {"changed": changed, "points": info.points_count, "indexed": info.indexed_vectors_count}
    sys.stdout.write(json.dumps({**result, "seconds": round(time.perf_counter() - started, 2)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
