"""Typed exceptions of the GridGraph engine.

The Processing adapters in ``algorithms/`` turn these into
``QgsProcessingException``; plain-Python callers catch them directly.  Every
message says what is wrong and how to fix it.
"""


class GridGraphError(Exception):
    """Base class of every error the engine raises on purpose."""


class InvalidInputError(GridGraphError, ValueError):
    """The input raster, sources or parameters cannot be processed as given."""


class BackendUnavailableError(GridGraphError, RuntimeError):
    """The requested backend (e.g. ``cuda``) cannot run on this machine."""


class CancelledError(GridGraphError):
    """The progress callback asked to stop; no output was produced."""
