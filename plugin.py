"""The QGIS plugin object: registers the GridGraph Processing provider."""

from qgis.core import Qgis, QgsApplication, QgsMessageLog

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
        """Called by the desktop application: the provider, and the kernels
        compiled in a background thread when numba's cache is still empty
        (the first run after installing would otherwise wait ~20 s).

        Only in the desktop: qgis_process has no GUI to keep responsive, and
        a compile racing its one run would only slow that run down; there
        the install step (``make setup``) or the run itself compiles.
        """
        self.initProcessing()
        try:
            from .core import warmup
            warmup.start_in_background(log=_log)
        except Exception as error:  # the plugin works without it
            _log(f"GridGraph: no background warm-up ({error})")

    def unload(self):
        """Remove the provider when the plugin is unloaded or reloaded."""
        if self.provider is not None:
            QgsApplication.processingRegistry().removeProvider(self.provider)
            self.provider = None


def _log(message):
    """A line in the GridGraph tab of the log panel (safe from any thread)."""
    QgsMessageLog.logMessage(message, "GridGraph", Qgis.Info)
