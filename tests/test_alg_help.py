"""What a GIS user reads: help written for them, a help page per algorithm
(with its picture) behind the Help button, labels that say what is needed."""

import os
import re

import pytest

pytestmark = pytest.mark.usefixtures("gridgraph_provider")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGORITHMS = ("connectedcomponents", "costdistance", "minimumspanningtree")
DEVELOPER_WORDS = ("row-major", "mcp_geometric", "float32", "float64",
                   "int32", "scikit", "scipy", "ndarray", "design.md",
                   "the thesis", "kernel", "memmap", "dtype", "index =")


def algorithm(name):
    from qgis.core import QgsApplication
    found = QgsApplication.processingRegistry().algorithmById(
        "gridgraph:" + name)
    assert found is not None, name
    return found


@pytest.mark.parametrize("name", ALGORITHMS)
def test_help_is_for_a_gis_user(name):
    text = algorithm(name).shortHelpString()
    lowered = text.lower()
    assert not [word for word in DEVELOPER_WORDS if word in lowered]
    assert "<b>Example</b>" in text
    assert "nodata" in lowered
    assert "scale and offset" in lowered  # packed rasters are unpacked
    # every visible parameter is explained under the label the user sees
    for parameter in algorithm(name).parameterDefinitions():
        if parameter.flags() & parameter.FlagAdvanced:
            continue
        label = parameter.description().split(" (")[0].split(",")[0]
        assert f"<b>{label}</b>" in text, (name, label)


def test_threshold_help_covers_each_weight():
    text = algorithm("minimumspanningtree").shortHelpString()
    for option in algorithm("minimumspanningtree").parameterDefinition(
            "WEIGHT").options():
        assert f"<i>{option}</i>" in text, option
    assert "+inf" in algorithm("costdistance").shortHelpString()


@pytest.mark.parametrize("name", ALGORITHMS)
def test_help_button_opens_the_algorithms_page(name):
    url = algorithm(name).helpUrl()
    with open(os.path.join(ROOT, "metadata.txt"), encoding="utf-8") as meta:
        homepage = re.search(r"^homepage=(\S+)", meta.read(), re.M).group(1)
    assert url == f"{homepage}/blob/main/docs/{name}.md"
    page = os.path.join(ROOT, "docs", f"{name}.md")
    with open(page, encoding="utf-8") as handle:
        text = handle.read()
    pictures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert f"images/{name}.png" in pictures
    for picture in pictures:
        path = os.path.join(ROOT, "docs", picture)
        assert os.path.getsize(path) > 10000, path  # a real rendered PNG


def test_labels_say_what_is_required():
    from gridgraph.algorithms.base import gpu_usable
    cost = algorithm("costdistance")
    for name in ("SOURCES", "SOURCE_RASTER"):
        assert "one of the two is required" in \
            cost.parameterDefinition(name).description()
    for name in ALGORITHMS:
        options = algorithm(name).parameterDefinition("BACKEND").options()
        expected = "cuda" if gpu_usable() else "cuda (no usable GPU found)"
        assert options[2] == expected


def test_band_does_not_look_optional_yet_qgis_process_accepts_it_missing(
        qgis_process, tmp_path):
    """"Band number" carries no "[optional]" in the dialog (not flagged
    optional), and qgis_process still runs without BAND (band 1): its
    mandatory-parameter check asks the parameter itself."""
    import numpy as np

    from conftest import read_raster, write_geotiff
    for name in ALGORITHMS:
        band = algorithm(name).parameterDefinition("BAND")
        assert not band.flags() & band.FlagOptional
    path = write_geotiff(tmp_path / "v.tif", np.array([[1, 0], [0, 1]]),
                         data_type="Byte", bands=[np.array([[1, 0], [0, 1]]),
                                                  np.array([[1, 1], [1, 1]])])
    code, answer, text = qgis_process(
        "run", "gridgraph:connectedcomponents", "--", f"INPUT={path}",
        "MODE=1", f"OUTPUT={tmp_path / 'labels.tif'}")
    assert code == 0, text
    assert answer["results"]["COMPONENTS"] == 2  # band 1, not band 2
    np.testing.assert_array_equal(read_raster(answer["results"]["OUTPUT"])[0],
                                  [[1, 0], [0, 2]])
