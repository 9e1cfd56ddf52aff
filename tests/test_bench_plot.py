"""bench/plot.py draws each kind of bench result JSON into a PNG."""

import importlib.util
import json
import os

import pytest

pytest.importorskip("matplotlib")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def plot_module():
    spec = importlib.util.spec_from_file_location(
        "bench_plot", os.path.join(ROOT, "bench", "plot.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RESULTS = {
    # bench/cpu.py's own layout (no "bench" key)
    "cpu": {"rows": [["cost distance", "skimage MCP_Geometric", 64, 0.5, 2.0,
                      "ok"],
                     ["components", "OpenCV Spaghetti", 64, 0.2, 0.1, "ok"]],
            "scaling": [{"threads": 1, "ours": 2.0},
                        {"threads": 2, "ours": 1.1}],
            "header": "## CPU, test"},
    "dask": {"bench": "dask", "header": "test",
             "rows": [{"operation": "mst", "workers": w, "seconds": s}
                      for w, s in ((1, 10.0), (2, 6.0), (4, 4.0))]},
    # bench/gpu.py's own layout; the parity row is not plotted
    "gpu": {"header": "test", "results": [
        {"operation": "mst", "device_s": 0.2, "end_to_end_s": 0.3,
         "cpu_s": 8.0, "goal_s": 1.0},
        {"operation": "mst (parity)", "end_to_end_s": 0.1, "cpu_s": 0.2}]},
    "first_run": {"bench": "first_run", "header": "test", "startup_s": 1.8,
                  "rows": {"costdistance": {
                      "cold": {"wall_s": 5.0, "engine_s": 3.0, "compiled": 4},
                      "installed": {"wall_s": 2.2, "engine_s": 0.3,
                                    "cpu_s": 2.0, "compiled": 0}}}},
}


@pytest.mark.parametrize("kind", sorted(RESULTS))
def test_renders_png(tmp_path, kind):
    plot = plot_module()
    source = tmp_path / f"{kind}-run.json"
    source.write_text(json.dumps(RESULTS[kind]))
    made = plot.render(str(source), str(tmp_path / "images"))
    expected = [str(tmp_path / "images" / f"bench-{kind}-run.png")]
    if kind == "cpu":  # the thread-scaling table gets its own picture
        expected.append(str(tmp_path / "images" / f"bench-{kind}-run-threads.png"))
    assert made == expected
    import matplotlib.image
    for path in made:
        with open(path, "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
        pixels = matplotlib.image.imread(path)
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
        assert pixels.std() > 0.01  # something was drawn


def test_kinds_without_a_plot(tmp_path):
    plot = plot_module()
    source = tmp_path / "net.json"
    source.write_text(json.dumps({"bench": "network"}))
    assert plot.render(str(source), str(tmp_path / "images")) == []
    assert not (tmp_path / "images").exists()


def test_unknown_json_is_refused(tmp_path):
    plot = plot_module()
    source = tmp_path / "other.json"
    source.write_text(json.dumps({"something": 1}))
    with pytest.raises(ValueError, match="not a bench result"):
        plot.render(str(source), str(tmp_path / "images"))
