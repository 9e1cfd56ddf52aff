"""Force one of the CPU cost-distance searches for a benchmark call.

``costdistance._cpu.solve`` picks the search itself: the parallel block
search from ``BLOCKS_MIN_CELLS`` cells on with ``BLOCKS_MIN_THREADS``
threads when the machine is not oversubscribed, else one heap on one
thread.  Every search gives the same rasters bit for bit, so the
benchmarks time each one by setting those module constants for the call
and putting them back after; this is the one place that knows how.
Not thread-safe (module constants): for benchmark scripts only.
"""

import contextlib

from gridgraph.core.costdistance import _cpu as cost_cpu

# mode -> (BLOCKS_MIN_THREADS, BLOCK_SEARCH, OVERSUBSCRIBED_LOAD); None
# keeps the module's value.  "blocks" and "small-blocks" run whatever the
# load; "auto" is what solve picks by itself.
_SETTINGS = {
    "heap": (1 << 30, None, None),
    "blocks": (1, "heaps", float("inf")),
    "small-blocks": (1, "small", float("inf")),
    "auto": (None, None, None),
}
MODES = tuple(_SETTINGS)


@contextlib.contextmanager
def cost_search(mode):
    """Within the block, ``cost_distance(backend="cpu")`` runs ``mode``'s
    search (one of :data:`MODES`)."""
    names = ("BLOCKS_MIN_THREADS", "BLOCK_SEARCH", "OVERSUBSCRIBED_LOAD")
    saved = {name: getattr(cost_cpu, name) for name in names}
    try:
        for name, value in zip(names, _SETTINGS[mode]):
            if value is not None:
                setattr(cost_cpu, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(cost_cpu, name, value)
