"""Every phase of a run is announced (setProgressText) and the bar moves
through it, monotone up to 100 %; result counts are logged in plain words."""

import numpy as np
import pytest

from conftest import cell_centre, write_geotiff, write_points

pytestmark = pytest.mark.usefixtures("gridgraph_provider")


class Recorder:
    """A QgsProcessingFeedback recording texts, progress and log lines."""

    def __new__(cls):
        from qgis.core import QgsProcessingFeedback

        class Feedback(QgsProcessingFeedback):
            def __init__(self):
                super().__init__()
                self.events = []  # ("text", str) / ("progress", float)
                self.info = []

            def setProgressText(self, text):  # noqa: N802 - QGIS API
                self.events.append(("text", text))
                super().setProgressText(text)

            def setProgress(self, value):  # noqa: N802 - QGIS API
                self.events.append(("progress", float(value)))
                super().setProgress(value)

            def pushInfo(self, text):  # noqa: N802 - QGIS API
                self.info.append(text)
                super().pushInfo(text)
        return Feedback()


def phases_of(feedback):
    """[(text, [progress values reported during that phase])]."""
    phases = []
    for kind, value in feedback.events:
        if kind == "text":
            phases.append((value, []))
        elif phases:
            phases[-1][1].append(value)
    return phases


def check_bar(feedback, expected_texts):
    texts = [text for text, _ in phases_of(feedback)]
    assert texts == expected_texts
    values = [value for kind, value in feedback.events if kind == "progress"]
    assert values == sorted(values), "the bar went backwards"
    assert values[-1] == 100
    # each phase starts further along than the previous one
    starts = [values_[0] for _, values_ in phases_of(feedback)]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)


def test_components_phases(run_algorithm, tmp_path):
    values = np.array([[1, 1, 0, 2], [0, 0, 0, 2], [3, 0, 4, 0]])
    path = write_geotiff(tmp_path / "v.tif", values, data_type="Byte")
    feedback = Recorder()
    run_algorithm("gridgraph:connectedcomponents", {
        "INPUT": path, "MODE": 1, "OUTPUT": str(tmp_path / "labels.tif"),
        "OUTPUT_POLYGONS": str(tmp_path / "polygons.gpkg")}, feedback)
    check_bar(feedback, ["Reading the raster", "Labelling the components",
                         "Making the component polygons",
                         "Writing the component labels",
                         "Writing the component polygons"])
    assert "Found 4 connected component(s) (nonzero, 4-connected)" in \
        feedback.info


def test_cost_distance_phases(run_algorithm, tmp_path):
    cost = np.ones((4, 5))
    cost[1, 1] = np.nan
    path = write_geotiff(tmp_path / "cost.tif", cost)
    points = write_points(tmp_path / "s.gpkg", [cell_centre(0, 0)])
    feedback = Recorder()
    run_algorithm("gridgraph:costdistance", {
        "INPUT": path, "SOURCES": points, "DESTINATIONS": points,
        "OUTPUT": str(tmp_path / "acc.tif"),
        "OUTPUT_ALLOCATION": str(tmp_path / "alloc.tif"),
        "OUTPUT_PATHS": str(tmp_path / "paths.gpkg")}, feedback)
    check_bar(feedback, ["Reading the cost raster and the sources",
                         "Computing the accumulated cost",
                         "Tracing the least-cost paths",
                         "Writing Accumulated cost", "Writing Allocation",
                         "Writing the least-cost paths"])
    assert "Reached 19 of 20 cells; the highest accumulated cost is " \
        "5.24264" in feedback.info  # (3, 4): three diagonals and a step
    assert "Traced 1 least-cost path(s) for 1 destination point(s)" in \
        feedback.info


def test_minimum_spanning_tree_phases(run_algorithm, tmp_path):
    values = np.array([[1.0, 2.0, 5.0], [4.0, 3.0, 9.0]])
    path = write_geotiff(tmp_path / "v.tif", values)
    feedback = Recorder()
    run_algorithm("gridgraph:minimumspanningtree", {
        "INPUT": path, "THRESHOLD": 3.5,
        "OUTPUT_DIRECTION": str(tmp_path / "dir.tif"),
        "OUTPUT_LINES": str(tmp_path / "lines.gpkg"),
        "OUTPUT_SEGMENTS": str(tmp_path / "segments.tif")}, feedback)
    check_bar(feedback, ["Reading the raster",
                         "Building the minimum spanning tree",
                         "Cutting the tree into segments",
                         "Making the tree edge lines",
                         "Writing the parent direction",
                         "Writing the segments", "Writing the tree edges"])
    # max weights of the tree: 2 (1-2), 3 (2-3), 4 (1-4), 5 (2-5), 9
    assert any(line.startswith("The tree has 5 edge(s) in 1 tree(s)")
               and line.endswith("total weight 23") for line in feedback.info)
    # segments: {1, 2, 3} joined by steps 2 and 3; 4, 5 and 9 alone
    assert "4 segment(s) with no step heavier than 3.5" in feedback.info
