"""The in-memory path's memory check (core/tiling.py): without a limit, a
cheap lower bound of the available memory decides when it can, and the
exact figure (MemAvailable, slow to read right after a large free) only
when it cannot; the decision is the same either way."""

import numpy as np
import pytest

from gridgraph.core import tiling
from gridgraph.core.components import tiled as components_tiled

BYTES_PER_CELL = components_tiled.IN_MEMORY_BYTES_PER_CELL


def plan(values, memory_limit_mb=None):
    return components_tiled.plan(values, 1, None, memory_limit_mb, None)


def test_the_cheap_bound_is_below_the_available_memory():
    assert 0 < tiling.surely_available_bytes() <= \
        tiling.available_memory_bytes()


def test_a_small_array_does_not_read_the_available_memory(monkeypatch):
    def exact():
        raise AssertionError("MemAvailable read for a small array")
    monkeypatch.setattr(tiling, "available_memory_bytes", exact)
    assert plan(np.zeros((256, 256), np.float32)) is None


@pytest.mark.parametrize("available, tiled", [(1 << 40, False),
                                              (1 << 20, True)])
def test_the_exact_figure_decides_when_the_bound_cannot(monkeypatch,
                                                       available, tiled):
    """A bound of 0 (not known): MemAvailable decides, half of it the
    budget (a 256² raster needs 1.5 MiB in memory)."""
    monkeypatch.setattr(tiling, "surely_available_bytes", lambda: 0)
    monkeypatch.setattr(tiling, "available_memory_bytes", lambda: available)
    result = plan(np.zeros((256, 256), np.float32))
    assert (result is not None) == tiled


def test_a_given_limit_is_kept_whatever_is_free(monkeypatch):
    monkeypatch.setattr(tiling, "surely_available_bytes", lambda: 1 << 40)
    values = np.zeros((256, 256), np.float32)
    needed_mb = values.size * BYTES_PER_CELL / 2**20
    assert plan(values, memory_limit_mb=needed_mb / 2) is not None
    assert plan(values, memory_limit_mb=needed_mb * 2) is None
