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


class RasterReadError(InvalidInputError):
    """A raster could not be read (damaged, truncated or changed while being
    read); the message names the file and the band."""


class DiskFullError(GridGraphError, OSError):
    """A disk filled up (or was too full to start); the message names the
    folder and how much was needed."""
