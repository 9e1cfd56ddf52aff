"""Cost distance with only the accumulated costs asked for
(``outputs=("accumulated",)``, what a qgis_process run writing one raster
asks): the CPU backend skips the predecessor pass, and the costs are those
of a run with every output, bit for bit, NaN exactly where unreached."""

import numpy as np
import pytest

from gridgraph.core import InvalidInputError, cost_distance
from gridgraph.core._common import Progress
from gridgraph.core.costdistance import _cpu, _step_lengths
from gridgraph.tests.test_costdistance_blocks import make_cost

KINDS = ["ties", "zero plateaus", "rounding", "random", "maze"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("connectivity", [4, 8, 16])
@pytest.mark.parametrize("blocks", [False, 8])
def test_accumulated_only_equals_the_full_run(kind, connectivity, blocks):
    rng = np.random.default_rng(len(kind) * 31 + connectivity)
    cost = make_cost(kind, (37, 45), rng)
    valid = np.argwhere(~np.isnan(cost))
    sources = valid[rng.integers(0, len(valid), 4)].astype(np.int64)
    ids = np.array([1, 2, 2, 3])
    step_lengths = _step_lengths(connectivity, (1.0, 1.0))
    for max_cost in (np.inf, 3.5):
        full = _cpu.solve(cost, ~np.isnan(cost), sources, ids, connectivity,
                          step_lengths, max_cost, Progress(), blocks=blocks)
        only = _cpu.solve(cost, ~np.isnan(cost), sources, ids, connectivity,
                          step_lengths, max_cost, Progress(), blocks=blocks,
                          predecessors=False)
        assert only[1] is None and only[2] is None
        np.testing.assert_array_equal(only[0].view(np.uint64),
                                      full[0].view(np.uint64))
        assert np.array_equal(np.isnan(only[0]),
                              full[1] == _cpu.PREDECESSOR_UNREACHED)


def test_public_api_with_the_accumulated_only():
    cost = make_cost("ties", (30, 33), np.random.default_rng(5))
    cost[0, 0] = 1.0
    full = cost_distance(cost, [(0, 0)], backend="cpu")
    only = cost_distance(cost, [(0, 0)], backend="cpu",
                         outputs=("accumulated",))
    assert only.direction is None and only.allocation is None
    np.testing.assert_array_equal(only.accumulated, full.accumulated)


@pytest.mark.parametrize("cost", [np.full((1, 5), 1e308),
                                  np.full((4, 4), 1e308)])
def test_overflow_is_still_an_error_without_predecessors(cost):
    with pytest.raises(InvalidInputError, match="largest float64"):
        cost_distance(cost, [(0, 0)], backend="cpu",
                      outputs=("accumulated",))
