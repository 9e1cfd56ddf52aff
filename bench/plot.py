"""Turn the bench scripts' JSON results into the PNGs of docs/benchmarks.md.

    .venv/bin/python bench/plot.py bench/results/*.json [--out docs/images]

Measuring and plotting are separate: the GPU machine has no matplotlib, so
every bench script writes its results with ``--json PATH`` and this script,
run where matplotlib is (the 2-core box's ``.venv``), draws them.  Each JSON
file gives one or two images named after it: ``X.json`` ->
``<out>/bench-X.png`` (``bench-X-threads.png`` for a CPU run's thread
scaling).  The kind of result is the file's ``"bench"`` key, or for the
files ``bench/cpu.py`` and ``bench/gpu.py`` write, the keys they hold:

- ``cpu`` (bench/cpu.py): peer ÷ GridGraph per operation, peer and size,
  with lines at 1 (as fast as the peer) and at each row's goal;
- ``dask`` (bench/dask.py): parallel efficiency T1 / (k Tk) against the
  worker count per operation, with the 70 % goal;
- ``gpu`` (bench/gpu.py): device-only, end-to-end and CPU-backend seconds
  per operation, log scale;
- ``first_run`` (bench/first_run.py): wall seconds of each algorithm's
  first run, cold and after install, beside QGIS's own start-up, and the
  3 s goal.

``network`` and ``scale`` results have no plot (their tables read well).
"""

import argparse
import json
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Goals (peer ÷ GridGraph) from the issues, matched against the peer's name:
# issue 13 (CPU kernels) and issue 10 (qgis_process against GRASS).
PEER_GOALS = (("OpenCV", 1.5), ("whitebox", 3.0), ("MCP", 4.0),
              ("scipy csgraph labelling", 2.0), ("r.cost", 4.0),
              ("r.clump", 3.0))
DASK_EFFICIENCY_GOAL = 0.70
FIRST_RUN_GOAL_S = 3.0


def kind_of(data):
    """Which bench script wrote ``data``."""
    if "bench" in data:
        return data["bench"]
    if "rows" in data and "scaling" in data:
        return "cpu"
    if "results" in data:
        return "gpu"
    raise ValueError("not a bench result: no 'bench' key")


def subtitle(data):
    """The run's machine and date, as the JSON says them (first line)."""
    text = data.get("header", "").strip().lstrip("#").strip()
    lines = [text.splitlines()[0]] if text else []
    if data.get("source"):
        lines.append(f"({data['source']})")
    return "\n".join(textwrap.fill(line, 130) for line in lines)


def _finish(figure, path, title, data):
    figure.suptitle(title, fontsize=11, x=0.01, ha="left")
    note = subtitle(data)
    if note:
        figure.text(0.01, -0.01, note, fontsize=7, ha="left", va="top")
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path


def goal_for(peer, goals):
    for key, goal in goals:
        if key.lower() in peer.lower():
            return goal
    return None


def plot_cpu(data, path):
    """Horizontal bars of peer ÷ GridGraph, one per row, coloured by size."""
    rows = data["rows"]
    goals = [tuple(g) for g in data.get("goals", PEER_GOALS)]
    labels, ratios, sizes, row_goals = [], [], [], []
    for name, peer, size, ours, theirs, _check in rows:
        labels.append(f"{name}\nvs {peer}, {size}²")
        ratios.append(theirs / ours)
        sizes.append(size)
        row_goals.append(goal_for(peer, goals))
    palette = plt.get_cmap("tab10")
    colour = {s: palette(i) for i, s in enumerate(sorted(set(sizes)))}
    figure, axes = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.6))
    positions = range(len(rows))[::-1]
    axes.barh(list(positions), ratios, color=[colour[s] for s in sizes])
    axes.set_xscale("log")
    axes.axvline(1.0, color="black", linewidth=1)
    for y, ratio, goal in zip(positions, ratios, row_goals):
        axes.text(ratio, y, f" {ratio:.2f}×", va="center", fontsize=7)
        if goal is not None:
            axes.plot([goal, goal], [y - 0.4, y + 0.4], color="crimson",
                      linewidth=2)
    axes.set_yticks(list(positions))
    axes.set_yticklabels(labels, fontsize=7)
    axes.set_xlabel("peer time ÷ GridGraph time (log; > 1: GridGraph faster)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[s])
               for s in sorted(colour)]
    handles.append(plt.Line2D([], [], color="crimson", linewidth=2))
    axes.legend(handles, [f"{s}²" for s in sorted(colour)] + ["goal"],
                fontsize=7, loc="lower right")
    axes.set_xlim(min(ratios + [1.0]) / 1.5,
                  max(ratios + [g or 1 for g in row_goals]) * 2)
    return _finish(figure, path, "CPU: GridGraph against its peers", data)


def plot_cpu_threads(data, path):
    """Seconds against threads (log-log) for the thread-scaling table."""
    scaling = data["scaling"]
    keys = [k for k in scaling[0] if k != "threads"]
    threads = [row["threads"] for row in scaling]
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for key in keys:
        axes.plot(threads, [row.get(key, float("nan")) for row in scaling],
                  marker="o", label=key)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(threads)
    axes.set_xticklabels([str(t) for t in threads])
    axes.set_xlabel("threads")
    axes.set_ylabel("seconds (log)")
    axes.legend(fontsize=7)
    axes.grid(True, which="both", alpha=0.3)
    return _finish(figure, path, "CPU: thread scaling", data)


def plot_dask(data, path):
    """Parallel efficiency against workers, one line per operation."""
    by_operation = {}
    for row in data["rows"]:
        by_operation.setdefault(row["operation"], []).append(
            (row["workers"], row["seconds"]))
    figure, axes = plt.subplots(figsize=(7, 4.2))
    ticks = set()
    for operation, points in by_operation.items():
        points.sort()
        base_workers, base_seconds = points[0]
        workers = [w for w, _ in points]
        efficiency = [100 * base_seconds * base_workers / (w * s)
                      for w, s in points]
        ticks.update(workers)
        axes.plot(workers, efficiency, marker="o", label=operation)
    axes.axhline(100 * DASK_EFFICIENCY_GOAL, color="crimson", linestyle="--",
                 label=f"goal {DASK_EFFICIENCY_GOAL:.0%}")
    axes.set_xscale("log", base=2)
    axes.set_xticks(sorted(ticks))
    axes.set_xticklabels([str(t) for t in sorted(ticks)])
    axes.set_ylim(0, 110)
    axes.set_xlabel("Dask workers (one thread each)")
    axes.set_ylabel("parallel efficiency T1 / (k Tk), %")
    axes.legend(fontsize=7)
    axes.grid(True, alpha=0.3)
    return _finish(figure, path, "Dask executor: parallel efficiency", data)


def plot_gpu(data, path):
    """Device, end-to-end and CPU-backend seconds (log) per operation."""
    rows = [r for r in data["results"]
            if r.get("end_to_end_s") is not None
            and "(parity)" not in r.get("operation", "")
            and (r.get("device_s") is not None or r.get("cpu_s") is not None)]
    series = (("device only", "device_s", "tab:green"),
              ("end to end", "end_to_end_s", "tab:blue"),
              ("end to end before", "before_s", "tab:gray"),
              ("CPU backend", "cpu_s", "tab:orange"))
    series = [s for s in series if any(r.get(s[1]) is not None for r in rows)]
    height = 0.8 / len(series)
    figure, axes = plt.subplots(figsize=(9, 0.7 * len(rows) + 1.6))
    top = len(rows) - 1
    for k, (label, key, colour) in enumerate(series):
        ys = [top - i - 0.4 + (k + 0.5) * height for i in range(len(rows))]
        values = [r.get(key) for r in rows]
        axes.barh([y for y, v in zip(ys, values) if v is not None],
                  [v for v in values if v is not None], height=height,
                  color=colour, label=label)
        for y, value in zip(ys, values):
            if value is not None:
                axes.text(value, y, f" {value:.3g} s", va="center",
                          fontsize=6)
    for i, row in enumerate(rows):
        if row.get("goal_s") is not None:
            y = top - i
            axes.plot([row["goal_s"]] * 2, [y - 0.45, y + 0.45],
                      color="crimson", linewidth=2)
    if any(r.get("goal_s") is not None for r in rows):
        axes.plot([], [], color="crimson", linewidth=2,
                  label="goal (end to end)")
    axes.set_xscale("log")
    axes.set_yticks(range(len(rows))[::-1])
    axes.set_yticklabels([r["operation"] for r in rows], fontsize=7)
    axes.set_xlabel("seconds (log)")
    axes.legend(fontsize=7, loc="lower right")
    return _finish(figure, path, "GPU: device only, end to end, CPU backend",
                   data)


def plot_first_run(data, path):
    """Wall seconds of each first run (cold, installed) with engine share."""
    names = list(data["rows"])
    cases = [c for c in ("cold", "installed")
             if any(c in data["rows"][n] for n in names)]
    width = 0.8 / len(cases)
    colours = {"cold": "tab:gray", "installed": "tab:blue"}
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for k, case in enumerate(cases):
        for i, name in enumerate(names):
            result = data["rows"][name].get(case)
            if result is None:
                continue
            x = i - 0.4 + (k + 0.5) * width
            axes.bar(x, result["wall_s"], width, color=colours[case],
                     label=f"{case}: whole run" if i == 0 else None)
            axes.bar(x, result["engine_s"], width * 0.5, color="black",
                     label="engine" if i == 0 and k == 0 else None)
            axes.text(x, result["wall_s"], f"{result['wall_s']:.1f}",
                      ha="center", va="bottom", fontsize=7)
            if result.get("cpu_s") is not None:
                axes.plot(x, result["cpu_s"], marker="D", color="white",
                          markeredgecolor="black", linestyle="none",
                          label="CPU time (all threads)"
                          if i == 0 and k == len(cases) - 1 else None)
    startup = data.get("startup_s")
    if startup is not None:
        axes.axhline(startup, color="tab:green", linestyle=":",
                     label=f"QGIS start-up and a trivial run ({startup:.1f} s)")
    axes.axhline(FIRST_RUN_GOAL_S, color="crimson", linestyle="--",
                 label=f"goal {FIRST_RUN_GOAL_S:.0f} s")
    if "cold" in cases:
        axes.set_yscale("log")
    axes.set_xticks(range(len(names)))
    # "minimumspanningtree (default outputs)" on two lines: no overlap
    axes.set_xticklabels([n.replace(" (", "\n(") for n in names],
                         fontsize=8)
    axes.set_ylabel("seconds" + (" (log)" if "cold" in cases else ""))
    axes.legend(fontsize=7)
    return _finish(figure, path, "First run in a fresh QGIS process", data)


PLOTS = {"cpu": plot_cpu, "dask": plot_dask, "gpu": plot_gpu,
         "first_run": plot_first_run}


def render(json_path, out_dir):
    """The PNGs made from one result file (none for kinds without a plot)."""
    with open(json_path) as handle:
        data = json.load(handle)
    kind = kind_of(data)
    stem = os.path.splitext(os.path.basename(json_path))[0]
    if kind not in PLOTS:
        return []
    os.makedirs(out_dir, exist_ok=True)
    made = [PLOTS[kind](data, os.path.join(out_dir, f"bench-{stem}.png"))]
    if kind == "cpu" and data.get("scaling"):
        made.append(plot_cpu_threads(
            data, os.path.join(out_dir, f"bench-{stem}-threads.png")))
    return made


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="JSON files")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "images"))
    args = parser.parse_args(argv)
    for path in args.results:
        made = render(path, args.out)
        print(f"{path}: " + (", ".join(made) if made else "no plot"),
              file=sys.stderr)


if __name__ == "__main__":
    main()
