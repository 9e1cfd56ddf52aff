"""Run in a fresh process by tests/test_tile_warm_up.py: an operation's
tile warm-up (what a Dask worker's preflight runs), then a tiled run with
many tiles and hierarchy levels through a thread pool writing its outputs
into a folder (the path of tile tasks); prints, as JSON, the numba kernels
of gridgraph.core that the run compiled or loaded after the warm-up
(``{name: [signatures]}``; empty when the warm-up covered them all).

    python tile_warm_up_probe.py OPERATION DTYPE CONNECTIVITY
"""

import concurrent.futures
import json
import os
import sys
import tempfile

import numpy as np


def kernels():
    """Every numba dispatcher of the engine's modules imported so far, by
    name (cached or not)."""
    from gridgraph.core.numba_cache import engine_kernels
    return engine_kernels(import_all=False)


def raster(dtype, shape=(70, 90)):
    """Few distinct values with a band of zeros (components' background)
    and, for floats, NaN cells (not vertices) and a smooth part."""
    rng = np.random.default_rng(1)
    values = rng.integers(1, 4, size=shape).astype(dtype)
    values[5:9, 3:40] = 0
    if values.dtype.kind == "f":
        values[30:, :] = np.cumsum(rng.random((shape[0] - 30, shape[1])),
                                   axis=1)
        values[40, 10:20] = np.nan
    return values


def main():
    operation, dtype, connectivity = sys.argv[1], np.dtype(sys.argv[2]), \
        int(sys.argv[3])
    from gridgraph.core import components, costdistance, mst
    from gridgraph.core.components import tiled as components_tiled
    from gridgraph.core.costdistance import rounds
    from gridgraph.core.mst import tiled as mst_tiled
    warm_up = {"components": lambda: components_tiled.warm_up(dtype),
               "mst": lambda: mst_tiled.warm_up(dtype, connectivity),
               "costdistance": lambda: rounds.warm_up(dtype, connectivity)}
    warm_up[operation]()
    before = {name: len(kernel.overloads)
              for name, kernel in kernels().items()}
    with tempfile.TemporaryDirectory() as folder, \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        path = os.path.join(folder, "values.npy")
        np.save(path, raster(dtype))
        values = np.load(path, mmap_mode="r")
        out_dir = os.path.join(folder, "out")
        os.mkdir(out_dir)
        if operation == "components":
            for mode in ("nonzero", "equal"):
                components.connected_components(
                    values, connectivity=connectivity, mode=mode,
                    tile_size=16, out_dir=out_dir, executor=pool)
        elif operation == "mst":
            for edges in (False, True):
                mst.minimum_spanning_tree(
                    values, connectivity=connectivity, weight="max",
                    tile_size=8, out_dir=out_dir, executor=pool,
                    edges=edges)
        else:
            costdistance.cost_distance(
                values, [(60, 45), (2, 2)], connectivity=connectivity,
                tile_size=16, out_dir=out_dir, executor=pool)
    compiled = {name: [str(s) for s in kernel.signatures[before.get(name, 0):]]
                for name, kernel in kernels().items()
                if len(kernel.overloads) != before.get(name, 0)}
    print(json.dumps(compiled))


if __name__ == "__main__":
    main()
