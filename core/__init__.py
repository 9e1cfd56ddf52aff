"""GridGraph engine: graph algorithms on raster grids (every valid cell a vertex).

Plain Python: never imports qgis, and imports GDAL only to read raster paths
(:mod:`gridgraph.core.io`).  Progress and cancellation arrive as a callable.
"""

from .components import (ComponentsResult, component_summary,
                         connected_components)
from .costdistance import CostDistanceResult, cost_distance, least_cost_path
from .habitat import HabitatNetworkResult, habitat_network
from .errors import (BackendUnavailableError, CancelledError, DiskFullError,
                     GridGraphError, InvalidInputError, RasterReadError)
from .mst import (MSTResult, minimum_spanning_tree, segment_by_threshold,
                  segments_by_threshold)

__all__ = [
    "connected_components", "ComponentsResult", "component_summary",
    "cost_distance", "CostDistanceResult", "least_cost_path",
    "habitat_network", "HabitatNetworkResult",
    "minimum_spanning_tree", "MSTResult", "segment_by_threshold",
    "segments_by_threshold",
    "GridGraphError", "InvalidInputError", "BackendUnavailableError",
    "CancelledError", "DiskFullError", "RasterReadError",
]

# numba's cache checks a kernel against its own file only: after the
# engine's sources change, its cached kernels are emptied once; and the
# cache's writes and reads are locked across processes
from . import numba_cache as _numba_cache  # noqa: E402

_numba_cache.lock_cache()
_numba_cache.refresh()
