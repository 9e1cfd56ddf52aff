"""The in-memory path's memory check (core/tiling.py): without a limit, a
cheap lower bound of the available memory (free pages less the kernel's
reserves) decides when it can, and the exact figure (MemAvailable, slow to
read right after a large free) only when it cannot."""

import numpy as np
import pytest

from gridgraph.core import tiling
from gridgraph.core.components import tiled as components_tiled

BYTES_PER_CELL = components_tiled.IN_MEMORY_BYTES_PER_CELL
GIB = 1 << 30

# /proc/zoneinfo's shape (Linux 6.x), per-CPU "high:" lines included
ZONEINFO = """\
Node 0, zone      DMA
  pages free     3840
        min      11
        low      14
        high     49
        protection: (0, 3018, 7626, 7626)
  pagesets
    cpu: 0
              count:    0
              high:     0
Node 0, zone    DMA32
        high     10010
        protection: (0, 0, 4608, 4608)
    cpu: 0
              high:     4171
Node 0, zone   Normal
        high     15282
        protection: (0, 0, 0, 0)
"""


def plan(values, memory_limit_mb=None):
    return components_tiled.plan(values, 1, None, memory_limit_mb, None)


def machine(monkeypatch, free, total, reserve):
    """Free and total RAM as ``sysinfo`` reports them, and the kernel's
    reserves (None: unknown)."""
    monkeypatch.setattr(tiling, "_free_and_total_bytes",
                        lambda: (free, total))
    monkeypatch.setattr(tiling, "_kernel_reserve_bytes", lambda: reserve)


def test_the_reserves_are_each_zones_high_mark_and_largest_protection():
    assert tiling.zone_reserve_pages(ZONEINFO.splitlines()) == \
        (49 + 7626) + (10010 + 4608) + 15282
    assert tiling.zone_reserve_pages([]) is None


@pytest.mark.parametrize("reserve, bound", [
    (GIB // 4, 10 * GIB - GIB),  # a sixteenth of the RAM: more
    (2 * GIB, 8 * GIB),  # the reserves: more
    (None, 0),  # not known (or /proc/meminfo describes other RAM)
])
def test_the_bound_is_the_free_pages_less_the_larger_margin(
        monkeypatch, reserve, bound):
    machine(monkeypatch, 10 * GIB, 16 * GIB, reserve)
    assert tiling.surely_available_bytes() == bound


def test_the_bound_is_not_above_the_available_memory_here():
    bound = tiling.surely_available_bytes()
    available = tiling.available_memory_bytes()
    if bound == 0:
        pytest.skip("no cheap bound on this machine (reserves unknown, "
                    "little free memory, or a container's /proc/meminfo)")
    # another process may free memory between the two readings
    assert bound <= available + (256 << 20)


def test_a_small_array_does_not_read_the_available_memory(monkeypatch):
    machine(monkeypatch, 10 * GIB, 16 * GIB, GIB // 4)

    def exact():
        raise AssertionError("MemAvailable read for a small array")
    monkeypatch.setattr(tiling, "available_memory_bytes", exact)
    assert plan(np.zeros((256, 256), np.float32)) is None


@pytest.mark.parametrize("available, tiled", [(1 << 40, False),
                                              (1 << 20, True)])
def test_the_exact_figure_decides_when_the_bound_cannot(monkeypatch,
                                                       available, tiled):
    """No bound: MemAvailable decides, half of it the budget (a 256²
    raster needs 1.5 MiB in memory)."""
    machine(monkeypatch, 10 * GIB, 16 * GIB, None)
    monkeypatch.setattr(tiling, "available_memory_bytes", lambda: available)
    assert (plan(np.zeros((256, 256), np.float32)) is not None) == tiled


def test_a_given_limit_is_kept_whatever_is_free(monkeypatch):
    machine(monkeypatch, 1 << 40, 1 << 41, GIB)
    values = np.zeros((256, 256), np.float32)
    needed_mb = values.size * BYTES_PER_CELL / 2**20
    assert plan(values, memory_limit_mb=needed_mb / 2) is not None
    assert plan(values, memory_limit_mb=needed_mb * 2) is None
