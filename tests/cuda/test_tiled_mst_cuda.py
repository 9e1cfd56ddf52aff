"""Tiled minimum spanning forest with the CUDA kernel per tile (simulator on
CI), tiles run in threads: the same directions, total and tree count as the
in-memory CPU run, with and without the edge list; the edges, their order
and the weights' bits too when they are kept."""

import concurrent.futures

import numpy as np

from gridgraph.core import minimum_spanning_tree

from rasters import fractal_surface


def test_threads_cuda_tiles_equal_cpu_in_memory():
    # tiny: every simulated tile solve takes about a second
    connectivity, weight = 8, "mean"
    values = fractal_surface((17, 12), seed=3)
    values[np.random.default_rng(1).random(values.shape) < 0.15] = np.nan
    expected = minimum_spanning_tree(values, connectivity=connectivity,
                                     weight=weight, backend="cpu")
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        full = minimum_spanning_tree(values, connectivity=connectivity,
                                     weight=weight, backend="cuda",
                                     tile_size=8, executor=pool)
        lean = minimum_spanning_tree(values, connectivity=connectivity,
                                     weight=weight, backend="cuda",
                                     tile_size=8, executor=pool, edges=False)
    np.testing.assert_array_equal(full.edges, expected.edges)
    np.testing.assert_array_equal(full.weights.view(np.uint8),
                                  expected.weights.view(np.uint8))
    for result in (full, lean):
        assert result.total_weight == expected.total_weight
        assert result.trees == expected.trees
        np.testing.assert_array_equal(result.parent_direction,
                                      expected.parent_direction)
    assert lean.edges is None and lean.weights is None
