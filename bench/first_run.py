"""First run of each algorithm in a fresh QGIS process, after install.

    .venv/bin/python bench/first_run.py [--size 256] [--skip-cold]

What a user meets right after installing: every algorithm run once through
``scripts/qgis-process`` (a new QGIS process each time, as a first run from
the desktop or the command line is) on scripts/demo.py's data, with
numba's on-disk cache

- *cold*: empty (what a plugin-manager install gave before the warm-up);
- *installed*: filled by ``python -m gridgraph.core.warmup`` (the install
  step of ``make setup``, and the plugin's background warm-up).

Each case gets its own empty NUMBA_CACHE_DIR, so the caches of the checkout
are neither used nor touched.  Reports wall and CPU seconds (user + system,
all threads) of the qgis_process run (QGIS start-up included), the engine
seconds the algorithm logs, and how many kernels the run had to compile
(cache files it added).  Prints a
Markdown table; ``--json PATH`` writes the results for bench/plot.py.

QGIS's own start-up is measured in the same run, to tell it from ours:
``qgis_process --version`` (the binary alone) and a run of
``native:rasterlayerstatistics`` on the same DEM (start-up with every
plugin loaded, GridGraph's included, and a trivial algorithm).  With
``--repeat N`` the installed case and these references run N times,
interleaved (one round = each of them once), and medians are reported: the
cold case runs once (its first run fills the cache).
"""

import argparse
import importlib.util
import json
import os
import platform
import resource
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QGIS_PROCESS = os.path.join(ROOT, "scripts", "qgis-process")
PYTHON = sys.executable
PLUGINS = os.path.expanduser(
    "~/.local/share/QGIS/QGIS3/profiles/default/python/plugins")


def demo_module():
    spec = importlib.util.spec_from_file_location(
        "demo", os.path.join(ROOT, "scripts", "demo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(folder, size):
    """scripts/demo.py's rasters and points, written into ``folder``."""
    from osgeo import gdal
    demo = demo_module()
    dem = demo.fractal_surface((size, size), seed=7)

    def out(name):
        return os.path.join(folder, name)

    demo.write_geotiff(out("dem.tif"), dem, gdal.GDT_Float32)
    demo.write_geotiff(out("classes.tif"), (dem // 100).astype("uint8"),
                       gdal.GDT_Byte)
    step = size // 4
    demo.write_points(out("sources.gpkg"), [(step, step), (3 * step, 2 * step),
                                            (step, 3 * step)], "sources")
    demo.write_points(out("destinations.gpkg"),
                      [(size - 1, 0), (0, size - 1), (size // 2, 0)],
                      "destinations")
    return {
        "connectedcomponents": {
            "INPUT": out("classes.tif"), "MODE": 0, "CONNECTIVITY": 1,
            "OUTPUT": out("clumps.tif"), "OUTPUT_POLYGONS": out("clumps.gpkg")},
        "costdistance": {
            "INPUT": out("dem.tif"), "SOURCES": out("sources.gpkg"),
            "DESTINATIONS": out("destinations.gpkg"), "CONNECTIVITY": 2,
            "MAP_UNITS": "true", "OUTPUT": out("accumulated.tif"),
            "OUTPUT_DIRECTION": out("direction.tif"),
            "OUTPUT_ALLOCATION": out("allocation.tif"),
            "OUTPUT_PATHS": out("paths.gpkg")},
        "minimumspanningtree": {
            "INPUT": out("dem.tif"), "WEIGHT": 3, "CONNECTIVITY": 0,
            "THRESHOLD": 25, "OUTPUT_DIRECTION": out("mst_direction.tif"),
            "OUTPUT_LINES": out("mst_edges.gpkg"),
            "OUTPUT_SEGMENTS": out("mst_segments.tif")},
        # what the dialog makes when the user only picks the layer: the
        # direction raster (tree edges and segments are off by default)
        "minimumspanningtree (default outputs)": {
            "INPUT": out("dem.tif"), "WEIGHT": 3, "CONNECTIVITY": 0,
            "OUTPUT_DIRECTION": out("mst_direction_default.tif")},
    }


def cache_files(folder):
    return sum(name.endswith(".nbc") for _, _, names in os.walk(folder)
               for name in names)


def environment(cache):
    env = dict(os.environ)
    env.pop("QGIS_CUSTOM_CONFIG_PATH", None)
    env["QT_QPA_PLATFORM"] = "offscreen"
    env["NUMBA_CACHE_DIR"] = cache
    return env


def children_cpu():
    """CPU seconds (user + system) of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_algorithm(name, parameters, cache):
    """(wall seconds, engine seconds, kernels compiled, CPU seconds) of one
    fresh run; CPU time (all threads of the run) is steadier than wall time
    on a shared machine."""
    algorithm = name.split()[0]      # "minimumspanningtree (default outputs)"
    arguments = [QGIS_PROCESS, "--json", "run", f"gridgraph:{algorithm}", "--"]
    arguments += [f"{key}={value}" for key, value in parameters.items()]
    before = cache_files(cache)
    cpu = children_cpu()
    start = time.perf_counter()
    completed = subprocess.run(arguments, capture_output=True, text=True,
                               env=environment(cache))
    wall = time.perf_counter() - start
    cpu = children_cpu() - cpu
    if completed.returncode != 0:
        sys.exit(f"{name} failed:\n{completed.stdout[-2000:]}\n"
                 f"{completed.stderr[-2000:]}")
    log = json.loads(completed.stdout)["log"].get("info", [])
    engine = sum(float(line.split()[2]) for line in log
                 if line.startswith("engine time:"))
    return wall, engine, cache_files(cache) - before, cpu


def run_reference(arguments):
    """(wall, CPU) seconds of a qgis_process command that is not ours."""
    cpu = children_cpu()
    start = time.perf_counter()
    completed = subprocess.run([QGIS_PROCESS] + arguments,
                               capture_output=True, text=True,
                               env=environment(tempfile.gettempdir()))
    wall = time.perf_counter() - start
    cpu = children_cpu() - cpu
    if completed.returncode != 0:
        sys.exit(f"{arguments} failed:\n{completed.stdout[-2000:]}\n"
                 f"{completed.stderr[-2000:]}")
    return wall, cpu


def references(folder):
    return {
        "qgis_process --version": ["--version"],
        "native:rasterlayerstatistics": [
            "--json", "run", "native:rasterlayerstatistics", "--",
            f"INPUT={os.path.join(folder, 'dem.tif')}", "BAND=1"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--skip-cold", action="store_true",
                        help="only the installed (warmed) case")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of the installed case and references")
    parser.add_argument("--json", help="write the results to this file")
    options = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="gridgraph-first-run-")
    try:
        jobs = inputs(scratch, options.size)
        runs = {}        # name -> case -> [(wall, engine, compiled)]
        reference_runs = {name: [] for name in references(scratch)}
        cases = ["installed"] if options.skip_cold else ["cold", "installed"]
        install_seconds = None
        loads = [os.getloadavg()[0]]
        for case in cases:
            cache = os.path.join(scratch, f"numba-cache-{case}")
            os.makedirs(cache)
            if case == "installed":
                # import gridgraph from where QGIS loads the plugin: numba's
                # NUMBA_CACHE_DIR entries are keyed by the source's path
                env = environment(cache)
                env["PYTHONPATH"] = PLUGINS
                start = time.perf_counter()
                subprocess.run([PYTHON, "-m", "gridgraph.core.warmup"],
                               check=True, env=env,
                               stdout=subprocess.DEVNULL)
                install_seconds = time.perf_counter() - start
            rounds = options.repeat if case == "installed" else 1
            for _ in range(rounds):
                if case == "installed":
                    for name, arguments in references(scratch).items():
                        reference_runs[name].append(
                            run_reference(arguments))
                        print(name, reference_runs[name][-1], flush=True)
                for name, parameters in jobs.items():
                    result = run_algorithm(name, parameters, cache)
                    runs.setdefault(name, {}).setdefault(case, []).append(
                        result)
                    print(name, case, result, flush=True)
                loads.append(os.getloadavg()[0])
        rows = {name: {case: tuple(statistics.median(values)
                                   for values in zip(*results))
                       for case, results in by_case.items()}
                for name, by_case in runs.items()}
        startup = {name: tuple(statistics.median(v) for v in zip(*values))
                   for name, values in reference_runs.items() if values}
        header = (f"{platform.node()}, {os.cpu_count()} cores, "
                  f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                  f"{options.size}² demo raster, load average "
                  f"{min(loads):.1f}-{max(loads):.1f}; warm-up at install "
                  f"{install_seconds:.0f} s; installed case and references: "
                  f"median of {options.repeat} interleaved rounds")
        print(f"\n{header}\n")
        table = "| algorithm |"
        rule = "|---|"
        for case in cases:
            table += (f" {case}: run s | {case}: CPU s | {case}: engine s | "
                      f"{case}: kernels compiled |")
            rule += "---:|---:|---:|---:|"
        print(table)
        print(rule)
        for name, results in rows.items():
            line = f"| {name} |"
            for case in cases:
                wall, engine, compiled, cpu = results[case]
                line += (f" {wall:.1f} | {cpu:.1f} | {engine:.2f} | "
                         f"{compiled:g} |")
            print(line)
        for name, (wall, cpu) in startup.items():
            print(f"| {name} (QGIS, not GridGraph) |"
                  + " – | – | – | – |" * (len(cases) - 1)
                  + f" {wall:.1f} | {cpu:.1f} | – | – |")
        if options.json:
            with open(options.json, "w") as handle:
                json.dump({
                    "bench": "first_run", "header": header,
                    "size": options.size,
                    "rows": {name: {case: dict(zip(
                        ("wall_s", "engine_s", "compiled", "cpu_s"), result))
                        for case, result in results.items()}
                        for name, results in rows.items()},
                    "runs": runs, "references_s": reference_runs,
                    "startup_s": startup.get(
                        "native:rasterlayerstatistics", (None,))[0],
                    "startup_cpu_s": startup.get(
                        "native:rasterlayerstatistics", (None, None))[1],
                    "load_average": loads}, handle, indent=1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
