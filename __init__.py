"""GridGraph: graph algorithms on raster layers, as a QGIS Processing provider.

``import gridgraph.core`` works without QGIS; QGIS itself only calls
:func:`classFactory`.
"""


def classFactory(iface):  # noqa: N802 - QGIS's required name
    """Entry point QGIS calls to load the plugin."""
    from .plugin import GridGraphPlugin
    return GridGraphPlugin(iface)
