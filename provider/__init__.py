"""The GridGraph Processing provider."""

from .provider import GridGraphProvider

__all__ = ["GridGraphProvider"]
