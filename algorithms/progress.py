"""The phases of a run as the user sees them: a line of text per phase
(``setProgressText``) and a share of the progress bar that fills while it
runs (reading, computing, polygons or lines, writing each output)."""

from .base import progress_callback


class Phases:
    """Consecutive phases, each a share of the bar.

    ``begin(text, share)`` announces a phase, moves the bar to where it
    starts, and returns the engine's ``progress(fraction)`` callback over the
    phase (returning False once the user cancelled).  Shares are fractions
    of the whole bar; the next phase starts where the previous one ends.
    """

    def __init__(self, feedback):
        self.feedback = feedback
        self.position = 0.0

    def begin(self, text, share):
        start = min(self.position, 1.0)
        stop = min(start + max(share, 0.0), 1.0)
        self.position = stop
        self.feedback.setProgressText(text)
        self.feedback.setProgress(100.0 * start)
        return progress_callback(self.feedback, start, stop)

    def remaining(self, count):
        """An equal share of what is left of the bar for ``count`` phases."""
        return (1.0 - self.position) / max(count, 1)
