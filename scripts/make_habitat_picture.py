"""Render docs/images/habitatnetwork.png: the habitat network over a small
demo land-cover raster (the README's worked example, in plain Python).

    .venv/bin/python scripts/make_habitat_picture.py [--size 160]

The land cover is made from two fractal surfaces (tests/rasters.py): classes
1 water, 2 grassland, 3 cropland, 4 broadleaf forest, 5 conifer forest,
6 built-up.  Habitat = the forest classes 4 and 5; resistance from a lookup
table per class (water a barrier).  gridgraph.core.habitat_network computes
the network; matplotlib draws three panels: the land cover, the least-cost
regions (allocation) with the accumulated cost, and the network (links,
spanning tree in red, patches sized by dPC).
"""

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from rasters import fractal_surface  # noqa: E402

# The lookup table of the worked example: class -> resistance (NaN barrier).
CLASSES = {1: ("water", np.nan, "#4f7fbf"),
           2: ("grassland", 5.0, "#d8e6a0"),
           3: ("cropland", 20.0, "#f0d58c"),
           4: ("broadleaf forest", 1.0, "#3c9a3c"),
           5: ("conifer forest", 1.0, "#1f5f2f"),
           6: ("built-up", 100.0, "#b0b0b0")}
FOREST = (4, 5)
CELL = 30.0  # metres


def demo_land_cover(size, seed=3):
    """A land-cover raster of CLASSES from two fractal surfaces."""
    relief = fractal_surface((size, size), seed=seed, beta=3.2)
    mosaic = fractal_surface((size, size), seed=seed + 10, beta=2.2)
    land = np.full((size, size), 2, dtype=np.uint8)        # grassland
    land[mosaic > np.quantile(mosaic, 0.55)] = 3             # cropland
    land[mosaic > np.quantile(mosaic, 0.87)] = 4             # broadleaf
    land[(relief > np.quantile(relief, 0.91))] = 5           # conifer
    land[(mosaic < np.quantile(mosaic, 0.04))] = 6           # built-up
    land[relief < np.quantile(relief, 0.06)] = 1             # water
    return land


def resistance_from(land):
    """The lookup table applied: resistance per cell."""
    table = np.full(256, np.nan)
    for value, (_, resistance, _) in CLASSES.items():
        table[value] = resistance
    return table[land]


def _label(resistance):
    return "barrier" if np.isnan(resistance) else f"{resistance:g}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=160)
    parser.add_argument("--output", default=os.path.join(
        ROOT, "docs", "images", "habitatnetwork.png"))
    args = parser.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from gridgraph.core import habitat_network

    land = demo_land_cover(args.size)
    resistance = resistance_from(land)
    net = habitat_network(land, resistance, habitat_values=FOREST,
                          connectivity=8, min_area=6 * CELL * CELL,
                          distance_p05=60.0, cell_size=(CELL, CELL),
                          backend="cpu")
    print(f"{net.patch_count} patches, {len(net.links)} links, "
          f"{net.components} component(s), IIC {net.iic:.4g}, "
          f"PC {net.pc:.4g}")

    figure, axes = plt.subplots(1, 3, figsize=(15, 5.4), dpi=110)
    colours = ListedColormap([CLASSES[v][2] for v in sorted(CLASSES)])
    axes[0].imshow(land, cmap=colours, vmin=0.5, vmax=6.5,
                   interpolation="nearest")
    axes[0].set_title("Land cover (forest = habitat)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=CLASSES[v][2])
               for v in sorted(CLASSES)]
    axes[0].legend(handles, [f"{CLASSES[v][0]} ({_label(CLASSES[v][1])})"
                             for v in sorted(CLASSES)],
                   loc="lower left", fontsize=7, framealpha=0.85,
                   title="class (resistance)", title_fontsize=7)

    rng = np.random.default_rng(1)
    region_colours = ListedColormap(rng.uniform(0.35, 0.95,
                                                (net.patch_count + 1, 3)))
    allocation = np.ma.masked_equal(net.allocation, 0)
    axes[1].imshow(allocation, cmap=region_colours, vmin=0,
                   vmax=net.patch_count, interpolation="nearest")
    axes[1].imshow(np.ma.masked_invalid(net.accumulated), cmap="magma_r",
                   alpha=0.45, interpolation="nearest")
    axes[1].imshow(np.ma.masked_equal(net.patches, 0) * 0, cmap="Greens_r",
                   vmin=0, vmax=1, interpolation="nearest")
    axes[1].set_title("Least-cost regions and accumulated cost")

    axes[2].imshow(np.where(np.isnan(resistance), np.nan, np.log10(
        resistance)), cmap="Greys", alpha=0.35, interpolation="nearest")
    axes[2].imshow(np.ma.masked_equal(net.patches, 0) * 0, cmap="Greens_r",
                   vmin=0, vmax=1, alpha=0.9, interpolation="nearest")
    for k in range(len(net.links)):
        path = net.links.path(k)
        tree = bool(net.links.in_mst[k])
        axes[2].plot(path[:, 1], path[:, 0],
                     color="#c0392b" if tree else "#555555",
                     linewidth=1.8 if tree else 0.7,
                     alpha=1.0 if tree else 0.6)
    rows, cols = np.nonzero(net.patches)
    ids = net.patches[rows, cols]
    counts = np.bincount(ids, minlength=net.patch_count + 1)[1:]
    centre_r = np.bincount(ids, weights=rows)[1:] / counts
    centre_c = np.bincount(ids, weights=cols)[1:] / counts
    importance = net.d_pc if net.d_pc is not None else np.ones(
        net.patch_count)
    axes[2].scatter(centre_c, centre_r, s=8 + 6 * importance,
                    c="#f1c40f", edgecolors="black", linewidths=0.6,
                    zorder=3)
    axes[2].set_title("Links (spanning tree in red), patches sized by dPC")
    for axis in axes:
        axis.set_xticks([])
        axis.set_yticks([])
        axis.set_xlim(-0.5, args.size - 0.5)
        axis.set_ylim(args.size - 0.5, -0.5)
    figure.tight_layout()
    figure.savefig(args.output)
    print("wrote", args.output)


if __name__ == "__main__":
    main()
