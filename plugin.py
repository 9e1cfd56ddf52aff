"""The QGIS plugin object: registers the GridGraph Processing provider."""

from qgis.core import QgsApplication

from .provider.provider import GridGraphProvider


class GridGraphPlugin:
    """Adds the GridGraph provider to the Processing registry.

    QGIS calls :meth:`initProcessing` on its own for plugins with
    ``hasProcessingProvider=yes`` (qgis_process does that too), and
    :meth:`initGui` in the desktop application.
    """

    def __init__(self, iface):
        self.iface = iface
        self.provider = None

    def initProcessing(self):  # noqa: N802 - QGIS plugin API
        """Create and register the provider (once)."""
        if self.provider is not None:
            return
        provider = GridGraphProvider()
        # The registry refuses a second provider with the id "gridgraph";
        # keep ours only when registered, so unload never removes another.
        if QgsApplication.processingRegistry().addProvider(provider):
            self.provider = provider

    def initGui(self):  # noqa: N802 - QGIS plugin API
        """Called by the desktop application; the provider is all there is."""
        self.initProcessing()

    def unload(self):
        """Remove the provider when the plugin is unloaded or reloaded."""
        if self.provider is not None:
            QgsApplication.processingRegistry().removeProvider(self.provider)
            self.provider = None
