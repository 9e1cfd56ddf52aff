"""GridGraph: graph algorithms on raster layers, as a QGIS Processing provider.

``import gridgraph.core`` works without QGIS; QGIS itself only calls
:func:`classFactory`.
"""

import os
import sys


def _use_checkout_venv():
    """Let the QGIS desktop find numba in the checkout's ``.venv`` (``make demo``).

    Debian's QGIS runs the system Python, where pip may not install numba
    (PEP 668); the set-up puts it in ``.venv`` beside this file instead.  The
    folder is appended, so nothing QGIS ships is shadowed.
    """
    try:
        import numba  # noqa: F401
        return
    except ImportError:
        pass
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = os.path.join(os.path.dirname(os.path.realpath(__file__)), ".venv",
                        "lib", version, "site-packages")
    if os.path.isdir(site) and site not in sys.path:
        sys.path.append(site)


def classFactory(iface):  # noqa: N802 - QGIS's required name
    """Entry point QGIS calls to load the plugin."""
    _use_checkout_venv()
    from .plugin import GridGraphPlugin
    return GridGraphPlugin(iface)
