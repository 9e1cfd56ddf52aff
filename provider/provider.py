"""Processing provider ``gridgraph``: an explicit list of the algorithms."""

import os

from qgis.core import QgsProcessingProvider
from qgis.PyQt.QtGui import QIcon

from ..algorithms.connected_components import ConnectedComponents
from ..algorithms.cost_distance import CostDistance
from ..algorithms.habitat_network import HabitatNetwork
from ..algorithms.minimum_spanning_tree import MinimumSpanningTree

ICON_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)),
                         "icons", "gridgraph.svg")


class GridGraphProvider(QgsProcessingProvider):
    """Graph algorithms on raster layers (every valid cell a vertex)."""

    def loadAlgorithms(self):  # noqa: N802 - QGIS API
        for algorithm in (ConnectedComponents(), CostDistance(),
                          MinimumSpanningTree(), HabitatNetwork()):
            self.addAlgorithm(algorithm)

    def id(self):
        return "gridgraph"

    def name(self):
        return "GridGraph"

    def longName(self):  # noqa: N802 - QGIS API
        return "GridGraph: graph algorithms on rasters"

    def icon(self):
        return QIcon(ICON_PATH)

    def svgIconPath(self):  # noqa: N802 - QGIS API
        return ICON_PATH

    def supportedOutputRasterLayerExtensions(self):  # noqa: N802 - QGIS API
        # Outputs are written by gridgraph.core.io through GDAL's Create();
        # these drivers support it and keep Float64/Int32 bands and nodata.
        return ["tif", "img"]
