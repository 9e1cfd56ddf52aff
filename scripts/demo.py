"""GridGraph demo: the three algorithms headless through qgis_process.

Generates a deterministic fractal DEM (tests/rasters.fractal_surface) as a
GeoTIFF in UTM zone 33N, derives an elevation-class raster and a few points,
runs gridgraph:connectedcomponents, gridgraph:costdistance and
gridgraph:minimumspanningtree through ``scripts/qgis-process --json``, and
prints a short summary.  Everything lands in the ``--output`` folder.

    .venv/bin/python scripts/demo.py --output demo-output     (make demo)
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
from osgeo import gdal, ogr, osr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QGIS_PROCESS = os.path.join(ROOT, "scripts", "qgis-process")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from rasters import fractal_surface  # noqa: E402

gdal.UseExceptions()
ogr.UseExceptions()

CRS = "EPSG:32633"
CELL = 30.0  # metres
ORIGIN = (500000.0, 5100000.0)  # top-left corner (x, y)
THRESHOLD = 15.0  # MST segmentation: cut edges with |elevation step| > 15 m


def geotransform():
    return (ORIGIN[0], CELL, 0.0, ORIGIN[1], 0.0, -CELL)


def spatial_reference():
    reference = osr.SpatialReference()
    reference.SetFromUserInput(CRS)
    reference.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    return reference


def write_geotiff(path, array, gdal_type, nodata=None):
    rows, cols = array.shape
    dataset = gdal.GetDriverByName("GTiff").Create(
        path, cols, rows, 1, gdal_type, ["COMPRESS=DEFLATE"])
    dataset.SetGeoTransform(geotransform())
    dataset.SetProjection(spatial_reference().ExportToWkt())
    band = dataset.GetRasterBand(1)
    if nodata is not None:
        band.SetNoDataValue(nodata)
    band.WriteArray(array)
    dataset = None
    return path


def write_points(path, cells, layer_name):
    """Points at the centres of (row, col) cells; feature ids 1..n."""
    if os.path.exists(path):
        os.remove(path)
    source = ogr.GetDriverByName("GPKG").CreateDataSource(path)
    layer = source.CreateLayer(layer_name, spatial_reference(), ogr.wkbPoint)
    for fid, (row, col) in enumerate(cells, start=1):
        feature = ogr.Feature(layer.GetLayerDefn())
        feature.SetFID(fid)
        point = ogr.Geometry(ogr.wkbPoint)
        point.AddPoint_2D(ORIGIN[0] + (col + 0.5) * CELL,
                          ORIGIN[1] - (row + 0.5) * CELL)
        feature.SetGeometry(point)
        layer.CreateFeature(feature)
    source = None
    return path


def read_band(path):
    dataset = gdal.Open(path)
    band = dataset.GetRasterBand(1)
    array = band.ReadAsArray().astype(np.float64)
    nodata = band.GetNoDataValue()
    if nodata is not None and not np.isnan(nodata):
        array[array == nodata] = np.nan
    return array


def qgis_process(algorithm, parameters):
    """Run one algorithm: (results, {"qgis_process": wall seconds of the
    whole run, QGIS start-up included, "engine": seconds in gridgraph.core
    as the algorithm logs them})."""
    arguments = [QGIS_PROCESS, "--json", "run", algorithm, "--"]
    arguments += [f"{key}={value}" for key, value in parameters.items()]
    environment = dict(os.environ)
    environment.pop("QGIS_CUSTOM_CONFIG_PATH", None)
    environment.setdefault("QT_QPA_PLATFORM", "offscreen")
    start = time.perf_counter()
    completed = subprocess.run(arguments, capture_output=True, text=True,
                               env=environment)
    seconds = time.perf_counter() - start
    if completed.returncode != 0:
        sys.exit(f"{algorithm} failed (exit {completed.returncode}):\n"
                 f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}\n"
                 "Is the plugin enabled for qgis_process? Run `make link`.")
    answer = json.loads(completed.stdout)
    engine = [float(line.split()[2]) for line in answer["log"].get("info", [])
              if line.startswith("engine time:")]
    return answer["results"], {"qgis_process": seconds,
                               "engine": engine[0] if engine else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=os.path.join(ROOT, "demo-output"),
                        help="folder for the inputs and outputs")
    parser.add_argument("--size", type=int, default=256,
                        help="raster side in cells (default 256)")
    parser.add_argument("--seed", type=int, default=7)
    options = parser.parse_args()
    output = os.path.abspath(options.output)
    os.makedirs(output, exist_ok=True)

    def out(name):
        return os.path.join(output, name)

    size = options.size
    dem = fractal_surface((size, size), seed=options.seed)  # 1..1000, Float32
    write_geotiff(out("dem.tif"), dem, gdal.GDT_Float32)
    # elevation classes of 100 m: clumps of equal class are the components
    write_geotiff(out("classes.tif"), (dem // 100).astype(np.uint8),
                  gdal.GDT_Byte)
    step = size // 4
    write_points(out("sources.gpkg"), [(step, step), (3 * step, 2 * step),
                                       (step, 3 * step)], "sources")
    write_points(out("destinations.gpkg"),
                 [(size - 1, 0), (0, size - 1), (size - 1, size - 1),
                  (size // 2, 0), (0, size // 2)], "destinations")
    print(f"inputs: {size} x {size} fractal DEM ({CRS}, {CELL:g} m cells), "
          f"elevation classes, 3 sources, 5 destinations in {output}")

    timings = {}
    components, timings["connectedcomponents"] = qgis_process(
        "gridgraph:connectedcomponents", {
            "INPUT": out("classes.tif"), "MODE": 0, "CONNECTIVITY": 1,
            "OUTPUT": out("class_clumps.tif"),
            "OUTPUT_POLYGONS": out("class_clumps.gpkg")})
    distance, timings["costdistance"] = qgis_process(
        "gridgraph:costdistance", {
            "INPUT": out("dem.tif"), "SOURCES": out("sources.gpkg"),
            "DESTINATIONS": out("destinations.gpkg"), "CONNECTIVITY": 2,
            "MAP_UNITS": "true",
            "OUTPUT": out("accumulated_cost.tif"),
            "OUTPUT_DIRECTION": out("direction.tif"),
            "OUTPUT_ALLOCATION": out("allocation.tif"),
            "OUTPUT_PATHS": out("least_cost_paths.gpkg")})
    tree, timings["minimumspanningtree"] = qgis_process(
        "gridgraph:minimumspanningtree", {
            "INPUT": out("dem.tif"), "WEIGHT": 3, "CONNECTIVITY": 0,
            "THRESHOLD": THRESHOLD,
            "OUTPUT_DIRECTION": out("mst_parent_direction.tif"),
            "OUTPUT_LINES": out("mst_edges.gpkg"),
            "OUTPUT_SEGMENTS": out("mst_segments.tif")})

    accumulated = read_band(distance["OUTPUT"])
    segments = read_band(tree["OUTPUT_SEGMENTS"])
    paths_dataset = ogr.Open(distance["OUTPUT_PATHS"])  # keep: owns the layer
    paths = paths_dataset.GetLayer().GetFeatureCount()
    paths_dataset = None
    summary = {
        "raster": {"rows": size, "cols": size, "crs": CRS, "cell_m": CELL},
        "components": int(components["COMPONENTS"]),
        "accumulated_cost": {"min": float(np.nanmin(accumulated)),
                             "max": float(np.nanmax(accumulated))},
        "least_cost_paths": paths,
        "mst_total_weight": float(tree["TOTAL_WEIGHT"]),
        "mst_trees": int(tree["TREES"]),
        "mst_threshold": THRESHOLD,
        "mst_segments": int(np.nanmax(segments)),
        "seconds": {name: {kind: None if value is None else round(value, 3)
                           for kind, value in timing.items()}
                    for name, timing in timings.items()},
    }
    with open(out("summary.json"), "w") as handle:
        json.dump(summary, handle, indent=2)

    print(f"connected components (elevation classes, 8-connected): "
          f"{summary['components']}")
    print(f"accumulated cost (DEM as friction, 16-connected, map units): "
          f"{summary['accumulated_cost']['min']:.6g} .. "
          f"{summary['accumulated_cost']['max']:.6g}; {paths} least-cost paths")
    print(f"minimum spanning tree (|difference| weights, 4-connected): total "
          f"weight {summary['mst_total_weight']:.6g}, {summary['mst_trees']} "
          f"tree(s), {summary['mst_segments']} segments at threshold "
          f"{THRESHOLD:g}")
    for name, timing in timings.items():
        engine = ("?" if timing["engine"] is None
                  else f"{timing['engine']:.3f} s")
        print(f"  {name}: engine {engine}, qgis_process run "
              f"{timing['qgis_process']:.1f} s")
    print("  (each run is a fresh process: the engine time includes loading "
          "numba's cached kernels, the run time QGIS's start-up and writing "
          "the outputs)")
    print(f"outputs and summary.json in {output}")


if __name__ == "__main__":
    main()
