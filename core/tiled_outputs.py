"""Outputs derived from tiled (out-of-core) results, computed a strip of
rows at a time: each lives in its operation's folder and is named here for
the callers that import it from this module.

- :func:`component_summary_streamed` (:mod:`.components.summary_streamed`):
  :func:`gridgraph.core.component_summary` of a label raster on disk.
- :func:`segment_by_threshold_streamed` (:mod:`.mst.segments_streamed`):
  :func:`gridgraph.core.segment_by_threshold` of a tiled spanning forest.
"""

from .components.summary_streamed import (  # noqa: F401
    STRIP_CELLS, component_summary_streamed)
from .mst.segments_streamed import (  # noqa: F401
    default_strip_rows, segment_by_threshold_streamed)
