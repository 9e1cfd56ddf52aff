"""gridgraph:habitatnetwork through processing.run and qgis_process: the
engine (gridgraph.core.habitat_network) as the reference for every output,
parameter checks, the tiled path, and nothing written on a failure."""

import numpy as np
import pytest
from qgis.core import NULL

from conftest import (CELL, GEOGRAPHIC_CRS, cell_centre, read_features,
                      read_raster, write_geotiff)
from gridgraph.core import habitat_network

ALG = "gridgraph:habitatnetwork"
pytestmark = pytest.mark.usefixtures("gridgraph_provider")


def landscape():
    """Three patches in a row (ids 1, 2, 3), a resistance of 1 to 4."""
    habitat = np.zeros((5, 15), dtype=np.uint8)
    habitat[:, 0:2] = 1
    habitat[0:3, 6:9] = 1
    habitat[:, 13:15] = 1
    resistance = 1.0 + (np.arange(75).reshape(5, 15) % 4)
    return habitat, resistance


def write_inputs(tmp_path):
    habitat, resistance = landscape()
    return (write_geotiff(tmp_path / "habitat.tif", habitat,
                          data_type="Byte"),
            write_geotiff(tmp_path / "resistance.tif", resistance))


def every_output(tmp_path, prefix=""):
    return {"OUTPUT_PATCHES": str(tmp_path / f"{prefix}patches.tif"),
            "OUTPUT_PATCH_POLYGONS": str(tmp_path / f"{prefix}polygons.gpkg"),
            "OUTPUT_LINKS": str(tmp_path / f"{prefix}links.gpkg"),
            "OUTPUT_ALLOCATION": str(tmp_path / f"{prefix}allocation.tif"),
            "OUTPUT_COST": str(tmp_path / f"{prefix}cost.tif"),
            "OUTPUT_CORRIDORS": str(tmp_path / f"{prefix}corridors.tif")}


def check_against_engine(result, engine):
    """Every output of a run equals the engine's result."""
    assert result["PATCHES"] == engine.patch_count
    assert result["LINKS"] == len(engine.links)
    assert result["COMPONENTS"] == engine.components
    assert result["IIC"] == engine.iic
    assert result["PC"] == engine.pc
    for name, array, nodata in (
            ("OUTPUT_PATCHES", engine.patches, 0),
            ("OUTPUT_ALLOCATION", engine.allocation, 0),
            ("OUTPUT_COST", engine.accumulated, None),
            ("OUTPUT_CORRIDORS", engine.corridors, None)):
        written, written_nodata, _, projection = read_raster(result[name])
        np.testing.assert_array_equal(written, array)
        assert "32633" in projection
        if nodata is not None:
            assert written_nodata == nodata
        else:
            assert np.isnan(written_nodata)
    links = read_features(result["OUTPUT_LINKS"])
    assert len(links) == len(engine.links)
    for k, (attributes, line) in enumerate(links):
        attributes.pop("fid", None)  # the GeoPackage's own key
        assert attributes == {
            "from_id": engine.links.from_id[k], "to_id": engine.links.to_id[k],
            "cost": engine.links.cost[k], "length": engine.links.length[k],
            "in_mst": bool(engine.links.in_mst[k])}
        path = engine.links.path(k)
        vertices = [(v.x(), v.y()) for v in line.vertices()]
        assert vertices == [cell_centre(r, c) for r, c in path]
    polygons = {a["id"]: (a, g) for a, g in
                read_features(result["OUTPUT_PATCH_POLYGONS"])}
    assert sorted(polygons) == list(range(1, engine.patch_count + 1))
    for patch, (attributes, geometry) in polygons.items():
        k = patch - 1
        assert attributes["area"] == engine.patch_area[k]
        assert geometry.area() == pytest.approx(engine.patch_area[k])
        assert attributes["degree"] == engine.patch_degree[k]
        assert attributes["component"] == engine.patch_component[k]
        assert attributes["dIIC"] == engine.d_iic[k]
        assert attributes["dPC"] == engine.d_pc[k]


def test_three_patches_every_output_equals_the_engine(run_algorithm,
                                                      tmp_path):
    habitat_path, resistance_path = write_inputs(tmp_path)
    result = run_algorithm(ALG, {
        "HABITAT": habitat_path, "RESISTANCE": resistance_path,
        "CONNECTIVITY": 0, "DISTANCE_P05": 6.0, **every_output(tmp_path)})
    habitat, resistance = landscape()
    engine = habitat_network(
        habitat, resistance, connectivity=4, distance_p05=6.0,
        cell_size=(CELL, CELL), backend="cpu",
        outputs=("patches", "accumulated", "allocation", "corridors"))
    assert result["PATCHES"] == 3 and result["LINKS"] == 2
    check_against_engine(result, engine)
    # the middle patch matters most
    dIIC = {a["id"]: a["dIIC"] for a, _ in
            read_features(result["OUTPUT_PATCH_POLYGONS"])}
    assert max(dIIC, key=dIIC.get) == 2


def test_one_raster_two_bands_values_and_min_area(run_algorithm, tmp_path):
    habitat, resistance = landscape()
    land = habitat * 7
    land[4, 0:2] = 3          # class 3 is not habitat here
    land[0, 10] = 7           # a one-cell patch under the minimum area
    stack = write_geotiff(tmp_path / "stack.tif", None,
                          bands=[land.astype(np.float64), resistance])
    result = run_algorithm(ALG, {
        "HABITAT": stack, "HABITAT_BAND": 1, "HABITAT_VALUES": "7, 9",
        "RESISTANCE": stack, "RESISTANCE_BAND": 2, "MIN_AREA": 300,
        "MAX_LINK_COST": 8, "OUTPUT_PATCHES": str(tmp_path / "p.tif"),
        "OUTPUT_LINKS": str(tmp_path / "links.gpkg")})
    engine = habitat_network(
        land, resistance, habitat_values=[7, 9], min_area=300,
        max_link_cost=8, cell_size=(CELL, CELL), backend="cpu")
    assert result["PATCHES"] == engine.patch_count == 3
    assert result["PC"] is None
    assert result["COMPONENTS"] == engine.components
    assert result["IIC"] == engine.iic
    np.testing.assert_array_equal(read_raster(result["OUTPUT_PATCHES"])[0],
                                  engine.patches)
    assert read_raster(result["OUTPUT_PATCHES"])[0][0, 10] == 0


def test_tiled_run_gives_the_in_memory_outputs(run_algorithm, tmp_path):
    habitat_path, resistance_path = write_inputs(tmp_path)
    common = {"HABITAT": habitat_path, "RESISTANCE": resistance_path,
              "DISTANCE_P05": 6.0}
    memory = run_algorithm(ALG, {**common, **every_output(tmp_path, "m-")})
    tiled = run_algorithm(ALG, {**common, "TILE_SIZE": 8,
                                **every_output(tmp_path, "t-")})
    for name in ("PATCHES", "LINKS", "COMPONENTS", "IIC", "PC"):
        assert memory[name] == tiled[name], name
    for name in ("OUTPUT_PATCHES", "OUTPUT_ALLOCATION", "OUTPUT_COST",
                 "OUTPUT_CORRIDORS"):
        np.testing.assert_array_equal(read_raster(memory[name])[0],
                                      read_raster(tiled[name])[0])
    for name in ("OUTPUT_LINKS", "OUTPUT_PATCH_POLYGONS"):
        a = read_features(memory[name])
        b = read_features(tiled[name])
        assert [x for x, _ in a] == [x for x, _ in b]
        assert [g.asWkt() for _, g in a] == [g.asWkt() for _, g in b]


def test_checks_refuse_other_grids_bad_values_and_bands(check_parameters,
                                                        tmp_path):
    habitat_path, resistance_path = write_inputs(tmp_path)
    habitat, resistance = landscape()
    other_size = write_geotiff(tmp_path / "small.tif", resistance[:, :-1])
    shifted = write_geotiff(tmp_path / "shifted.tif", resistance,
                            geotransform=(500010.0, 10.0, 0, 5000000.0, 0,
                                          -10.0))
    geographic = write_geotiff(tmp_path / "geo.tif", resistance,
                               crs=GEOGRAPHIC_CRS,
                               geotransform=(15.0, 0.001, 0, 45.0, 0, -0.001))
    base = {"HABITAT": habitat_path, "RESISTANCE": resistance_path}
    assert check_parameters(ALG, base) == (True, "")
    for other in (other_size, shifted, geographic):
        ok, message = check_parameters(ALG, {**base, "RESISTANCE": other})
        assert not ok and "not on the same grid" in message
    ok, message = check_parameters(ALG, {**base, "HABITAT_VALUES": "3,x"})
    assert not ok and "'x' is not a number" in message
    ok, message = check_parameters(ALG, {**base, "RESISTANCE_BAND": 2})
    assert not ok and "Band 2 does not exist" in message


def test_a_failure_writes_nothing(run_algorithm, tmp_path):
    from qgis.core import QgsProcessingException
    habitat, resistance = landscape()
    resistance[1, 7] = -9999
    habitat_path = write_geotiff(tmp_path / "h.tif", habitat,
                                 data_type="Byte")
    resistance_path = write_geotiff(tmp_path / "r.tif", resistance,
                                    nodata=-9999)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(QgsProcessingException,
                       match="no valid resistance.*row 1, column 7"):
        run_algorithm(ALG, {"HABITAT": habitat_path,
                            "RESISTANCE": resistance_path,
                            **every_output(out)})
    assert list(out.iterdir()) == []


def test_importance_fields_are_null_when_skipped(run_algorithm, tmp_path,
                                                 monkeypatch):
    from gridgraph.core import habitat as habitat_module
    monkeypatch.setattr(habitat_module, "IMPORTANCE_AUTO_LIMIT", 2)
    habitat_path, resistance_path = write_inputs(tmp_path)
    result = run_algorithm(ALG, {
        "HABITAT": habitat_path, "RESISTANCE": resistance_path,
        "DISTANCE_P05": 5.0,
        "OUTPUT_PATCH_POLYGONS": str(tmp_path / "p.gpkg")})
    for attributes, _ in read_features(result["OUTPUT_PATCH_POLYGONS"]):
        assert attributes["dIIC"] == NULL and attributes["dPC"] == NULL
    assert result["PC"] > 0


def test_qgis_process_run(qgis_process, tmp_path):
    habitat_path, resistance_path = write_inputs(tmp_path)
    code, answer, text = qgis_process(
        "run", ALG, "--", f"HABITAT={habitat_path}",
        f"RESISTANCE={resistance_path}", "CONNECTIVITY=0",
        "DISTANCE_P05=6", f"OUTPUT_PATCHES={tmp_path / 'patches.tif'}",
        f"OUTPUT_LINKS={tmp_path / 'links.gpkg'}")
    assert code == 0, text
    results = answer["results"]
    habitat, resistance = landscape()
    engine = habitat_network(habitat, resistance, connectivity=4,
                             distance_p05=6.0, backend="cpu")
    assert results["PATCHES"] == 3 and results["LINKS"] == 2
    assert results["IIC"] == pytest.approx(engine.iic, rel=1e-15)
    assert results["PC"] == pytest.approx(engine.pc, rel=1e-15)
    np.testing.assert_array_equal(read_raster(results["OUTPUT_PATCHES"])[0],
                                  engine.patches)
    links = read_features(results["OUTPUT_LINKS"])
    assert [a["cost"] for a, _ in links] == engine.links.cost.tolist()


def test_help_is_for_a_gis_user_and_has_its_page():
    import os
    import re

    from qgis.core import QgsApplication
    from test_alg_help import DEVELOPER_WORDS, ROOT
    algorithm = QgsApplication.processingRegistry().algorithmById(ALG)
    text = algorithm.shortHelpString()
    lowered = text.lower()
    assert not [word for word in DEVELOPER_WORDS if word in lowered]
    for words in ("<b>Example</b>", "nodata", "scale and offset"):
        assert words.lower() in lowered
    for parameter in algorithm.parameterDefinitions():
        if not parameter.flags() & parameter.FlagAdvanced:
            label = parameter.description().split(" (")[0].split(",")[0]
            assert f"<b>{label}</b>" in text, label
    assert algorithm.helpUrl().endswith("/docs/habitatnetwork.md")
    with open(os.path.join(ROOT, "docs", "habitatnetwork.md"),
              encoding="utf-8") as page:
        pictures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", page.read())
    assert pictures == ["images/habitatnetwork.png"]
    assert os.path.getsize(os.path.join(ROOT, "docs", pictures[0])) > 10000


def test_in_a_model(run_algorithm, tmp_path):
    """The modeler: one raster input feeding both HABITAT and RESISTANCE
    (bands 1 and 2); the model validates, runs, and equals the engine."""
    from qgis.core import (QgsProcessingModelAlgorithm,
                           QgsProcessingModelChildAlgorithm,
                           QgsProcessingModelChildParameterSource,
                           QgsProcessingModelOutput,
                           QgsProcessingModelParameter,
                           QgsProcessingParameterRasterLayer)

    def static(value):
        return [QgsProcessingModelChildParameterSource.fromStaticValue(value)]

    model = QgsProcessingModelAlgorithm("network", "tests")
    model.addModelParameter(
        QgsProcessingParameterRasterLayer("stack", "Habitat and resistance"),
        QgsProcessingModelParameter("stack"))
    child = QgsProcessingModelChildAlgorithm(ALG)
    child.setChildId("network")
    stack = [QgsProcessingModelChildParameterSource.fromModelParameter(
        "stack")]
    for name, value in (("HABITAT", stack), ("HABITAT_BAND", static(1)),
                        ("RESISTANCE", stack), ("RESISTANCE_BAND", static(2)),
                        ("CONNECTIVITY", static(0)),
                        ("DISTANCE_P05", static(6.0))):
        child.addParameterSources(name, value)
    outputs = {}
    for name, output_name in (("links", "OUTPUT_LINKS"),
                              ("patches", "OUTPUT_PATCHES")):
        output = QgsProcessingModelOutput(name, name)
        output.setChildId("network")
        output.setChildOutputName(output_name)
        outputs[name] = output
    child.setModelOutputs(outputs)
    model.addChildAlgorithm(child)
    model.updateDestinationParameters()
    ok, issues = model.validate()
    assert ok, issues

    habitat, resistance = landscape()
    path = write_geotiff(tmp_path / "stack.tif", None,
                         bands=[habitat.astype(np.float64), resistance])
    result = run_algorithm(model, {
        "stack": path, "network:links": str(tmp_path / "links.gpkg"),
        "network:patches": str(tmp_path / "patches.tif")})
    engine = habitat_network(habitat, resistance, connectivity=4,
                             distance_p05=6.0, cell_size=(CELL, CELL),
                             backend="cpu")
    np.testing.assert_array_equal(
        read_raster(result["network:patches"])[0], engine.patches)
    links = read_features(result["network:links"])
    assert [a["cost"] for a, _ in links] == engine.links.cost.tolist()
