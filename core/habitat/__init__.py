"""Habitat connectivity network: patches, least-cost links, the minimum
spanning tree of the patch graph and the connectivity indices IIC and PC."""

import math
import os
import shutil
from dataclasses import dataclass

import numpy as np

from .. import tiling
from .._common import (as_progress, check_connectivity)
from ..tiling import check_unsupported_scale_options, load_raster
from ..components import connected_components
from ..costdistance import _step_lengths, cost_distance
from ..costdistance import tiled as costdistance_tiled
from ..errors import InvalidInputError
from . import _graph, _raster, _scan

OUTPUTS = ("patches", "accumulated", "allocation", "corridors")
DEFAULT_OUTPUTS = ("patches", "accumulated", "allocation")
# dIIC and dPC cost about n * (sum of shortest-path tree depths) per index
# (see _importance.py); with importance=None they are computed up to this
# many patches (1600 patches, 3929 links: dIIC 33 s, dPC 50 s on the 2-core
# box under a load of 12).
IMPORTANCE_AUTO_LIMIT = 2000
# Bytes per cell of one strip of the crossing scan: accumulated (8),
# allocation (8), resistance (up to 8), and the numpy temporaries of the
# other strip passes (mask, labels, validity).
STRIP_BYTES_PER_CELL = 48
# Share of the memory limit the strips may take.
STRIP_SHARE = 0.25
# Progress bar shares of the phases.
PHASES = {"patches": (0.0, 0.2), "relabel": (0.2, 0.25),
          "cost": (0.25, 0.75), "scan": (0.75, 0.85), "paths": (0.85, 0.9),
          "graph": (0.9, 1.0)}


@dataclass
class Links:
    """The links of the patch graph, one per pair of patches whose
    least-cost regions touch, sorted by (from_id, to_id).

    Attributes
    ----------
    from_id, to_id : (k,) int64
        The two patches, ``from_id < to_id``.
    cost : (k,) float64
        Cost of the cheapest crossing d(x) + step(x, y) + d(y).
    length : (k,) float64
        Euclidean length of the path through cell centres (map units when a
        cell size was given, else cells).
    in_mst : (k,) bool
        In the minimum spanning forest of the patch graph.
    crossing : (k, 2, 2) int64
        The crossing cells ((row, col) of the cell on from_id's side, then
        on to_id's side).
    path_offsets, path_rows, path_cols : int64 arrays
        Link k's cells, from a cell of ``from_id`` to a cell of ``to_id``,
        are ``path_rows[path_offsets[k]:path_offsets[k + 1]]`` (and cols).
    """

    from_id: np.ndarray
    to_id: np.ndarray
    cost: np.ndarray
    length: np.ndarray
    in_mst: np.ndarray
    crossing: np.ndarray
    path_offsets: np.ndarray
    path_rows: np.ndarray
    path_cols: np.ndarray

    def __len__(self):
        return int(self.from_id.size)

    def path(self, k):
        """(m, 2) int64 (row, col) cells of link ``k``'s path."""
        piece = slice(self.path_offsets[k], self.path_offsets[k + 1])
        return np.stack([self.path_rows[piece], self.path_cols[piece]], axis=1)


@dataclass
class HabitatNetworkResult:
    """Outputs of :func:`habitat_network`.

    Attributes
    ----------
    patches : 2-D int32 (int64 past 2**31 cells) raster or None
        Patch ids 1..patch_count in scan order of each patch's first cell;
        0 elsewhere.  A read-only memmap of ``out_dir/patches.npy`` on the
        tiled path with ``out_dir``.
    accumulated : 2-D float64 raster or None
        Least cost from the nearest patch (0 on patches, NaN unreached).
    allocation : 2-D int32 raster (int64 past 2**31 - 1 patches) or None
        The patch each cell is cheapest to reach from (0 unreached): the
        resistance Voronoi regions (the dtype of
        ``costdistance.allocation_dtype``).
    corridors : 2-D float64 raster or None
        On each cell of a minimum spanning tree link's path, that link's
        cost (the least of them where paths meet); NaN elsewhere.
    patch_count : int
    patch_cells, patch_area : (n,) int64, (n,) float64
        Cells and area (map units squared) of patch ``i + 1``.
    patch_degree : (n,) int64
        Number of links of each patch.
    patch_component : (n,) int64
        Component of each patch (1..components, numbered in order of each
        component's lowest patch id) in the graph of the links whose cost
        is at most ``max_link_cost``.
    components : int
    links : Links
    mst_cost : float
        Total cost of the spanning forest (exact sum rounded once).
    landscape_area : float
        A_L of the indices: the area of the cells with a valid resistance.
    iic : float
    pc : float or None
        None without ``distance_p05``.
    d_iic, d_pc : (n,) float64 or None
        Each patch's importance in percent, 100 (I - I_without) / I; None
        when not computed (see ``importance``).
    """

    patches: object
    accumulated: object
    allocation: object
    corridors: object
    patch_count: int
    patch_cells: np.ndarray
    patch_area: np.ndarray
    patch_degree: np.ndarray
    patch_component: np.ndarray
    components: int
    links: Links
    mst_cost: float
    landscape_area: float
    iic: float
    pc: object
    d_iic: object
    d_pc: object


def habitat_network(habitat, resistance, habitat_values=None, connectivity=8,
                    min_area=0.0, max_link_cost=None, distance_p05=None,
                    cell_size=None, habitat_nodata=None,
                    resistance_nodata=None, habitat_band=1, resistance_band=1,
                    backend="auto", tile_size=None, memory_limit_mb=None,
                    executor=None, progress=None, out_dir=None, outputs=None,
                    importance=None):
    """Patch-based habitat connectivity network of a landscape.

    1. **Patches**: connected components of the habitat cells (the valid
       non-zero cells of ``habitat``, or those whose value is in
       ``habitat_values``), ``connectivity``-connected.  Patches smaller
       than ``min_area`` are dropped first (their cells become ordinary
       cells of the matrix); the others are numbered 1..n in raster scan
       order of their first cell.
    2. **Least-cost regions**: one multi-source cost distance
       (:func:`gridgraph.core.cost_distance`, same ``connectivity``) from
       every patch cell at once over ``resistance``, with the patch ids as
       allocation ids.  Patch cells are sources, so they cost 0 to reach
       and to leave: a patch cell's own resistance enters only the step
       out of it, by half, as every step (c_x + c_y) / 2 * L.  Every patch
       cell must have a valid resistance.
    3. **Links** (the minimum planar graph of Fall et al. 2007): for every
       pair of neighbouring cells x, y allocated to patches a != b, the
       crossing cost is ``(d(x) + (c_x + c_y) * 0.5 * L) + d(y)``; each
       patch pair keeps its least crossing (ties: the crossing whose first
       cell in scan order comes first, then the neighbour listed first in
       ``NEIGHBOUR_OFFSETS``).  Its path is traced back through the cost
       distance's directions from both cells to both patches.
    4. **The network**: the minimum spanning forest of the patch graph by
       Kruskal's algorithm with ties broken by (cost, lower id, higher id);
       the graph components of the links costing at most
       ``max_link_cost`` (the grains of connectivity); IIC over those links
       and PC over every link with p = exp(-theta * cost), theta = ln 2 /
       ``distance_p05`` (so p = 0.5 at that cost); with ``importance``,
       each patch's dIIC and dPC.  Costs are in resistance x cells (L = 1
       for a rook step, sqrt 2 for a diagonal), as
       :func:`gridgraph.core.cost_distance` without ``cell_size``.

    Parameters
    ----------
    habitat : 2-D ndarray, memmap or str
        The habitat raster (or a path GDAL opens; ``habitat_band`` is read).
    resistance : 2-D ndarray, memmap or str
        Resistance (friction) per cell on the same grid; nodata and NaN
        cells are barriers, negative values an error.
    habitat_values : sequence of numbers, optional
        The values that are habitat; None: every valid non-zero cell.
    connectivity : {4, 8}
        For the patches and for movement.
    min_area : float
        Smallest patch area kept, in map units squared (cells when no
        ``cell_size`` is given).
    max_link_cost : float, optional
        Links costing more are left out of the components and of IIC
        (None: every link).
    distance_p05 : float, optional
        The link cost at which the dispersal probability is 0.5; PC and dPC
        need it (None: they are None).
    cell_size : (float, float), optional
        ``(xres, yres)`` of a cell: areas in map units squared and link
        lengths in map units.  Default: 1 x 1 (cells).
    habitat_nodata, resistance_nodata : number, optional
        Nodata values (a path's band nodata is used when None).
    habitat_band, resistance_band : int
        Bands read when the rasters are paths.
    backend, tile_size, memory_limit_mb, executor
        Passed to the engines (:func:`gridgraph.core.connected_components`,
        :func:`gridgraph.core.cost_distance`).  When the resistance raster
        does not fit the memory limit in memory, or ``tile_size`` is given,
        the run is tiled: the engines run on their tiled paths, and the
        passes of this function read the rasters a strip of rows at a time.
        Results are identical either way.
    progress : callable, optional
        ``progress(fraction)``; returning False cancels (CancelledError).
    out_dir : str, optional
        Tiled path only: the output rasters go to ``patches.npy``,
        ``accumulated.npy``, ``allocation.npy`` and ``corridors.npy`` there
        (read-only memmaps in the result); scratch files too.  Without it
        the tiled results must fit the memory limit.
    outputs : iterable of {"patches", "accumulated", "allocation", \
"corridors"}, optional
        The rasters wanted (default: the first three); the others are None.
    importance : bool, optional
        Compute dIIC and dPC (the index with each patch left out, from
        each patch's shortest-path tree: about n_c * (the sum of the tree
        depths) steps per component of n_c patches).  None: only when
        there are at most ``IMPORTANCE_AUTO_LIMIT`` patches.

    Returns
    -------
    HabitatNetworkResult

    Raises
    ------
    InvalidInputError
        Rasters on different grids, no patch left, a patch cell with no
        valid resistance, a negative resistance or a bad option.

    References
    ----------
    Urban & Keitt, Landscape connectivity: a graph-theoretic perspective,
    Ecology 82 (2001).
    Fall, Fortin, Manseau & O'Brien, Spatial graphs: principles and
    applications for habitat connectivity, Ecosystems 10 (2007).
    Pascual-Hortal & Saura, Comparison and development of new graph-based
    landscape connectivity indices: towards the priorization of habitat
    patches and corridors for conservation, Landscape Ecology 21 (2006).
    Saura & Pascual-Hortal, A new habitat availability index to integrate
    connectivity in landscape conservation planning: comparison with
    existing indices and application to a case study, Landscape and Urban
    Planning 83 (2007).

    Examples
    --------
    >>> import numpy as np
    >>> habitat = np.array([[1, 1, 0, 0, 0, 1, 1]])
    >>> resistance = np.array([[1., 1., 4., 4., 4., 1., 1.]])
    >>> net = habitat_network(habitat, resistance, connectivity=4,
    ...                       backend="cpu")
    >>> net.patch_count, len(net.links), float(net.links.cost[0])
    (2, 1, 13.0)
    >>> net.links.path(0)[:, 1]
    array([1, 2, 3, 4, 5])
    """
    connectivity = check_connectivity(connectivity, (4, 8))
    check_unsupported_scale_options(tile_size, memory_limit_mb, executor,
                                    tiled=True)
    progress = as_progress(progress)
    outputs = _check_outputs(outputs)
    min_area = _non_negative("min_area", min_area)
    if max_link_cost is not None:
        max_link_cost = _non_negative("max_link_cost", max_link_cost) or None
    if distance_p05 is not None:
        distance_p05 = float(distance_p05)
        if not distance_p05 > 0 or math.isinf(distance_p05):
            raise InvalidInputError(
                f"distance_p05 must be a positive cost (or None: no PC), got "
                f"{distance_p05!r}")
    xres, yres = (1.0, 1.0) if cell_size is None else _step_cell(cell_size)
    if habitat_values is not None:
        habitat_values = np.unique(np.asarray(habitat_values, np.float64))
        if habitat_values.size == 0:
            habitat_values = None

    plan = costdistance_tiled.plan(resistance, resistance_band, tile_size,
                                   memory_limit_mb, executor)
    tiled = plan is not None
    if tiled:
        plan.source.close()
    if out_dir is not None:
        out_dir = tiling.check_out_dir(out_dir, 0, 0)
    scale = dict(backend=backend, tile_size=tile_size,
                 memory_limit_mb=memory_limit_mb, executor=executor)
    with tiling.scratch_folder(out_dir if tiled else None) as scratch:
        store = _Store(scratch if tiled else None)
        habitat_in, resistance_in = _open_inputs(
            habitat, resistance, habitat_band, resistance_band, tiled)
        if habitat_nodata is None:
            habitat_nodata = habitat_in.nodata
        if resistance_nodata is None:
            resistance_nodata = resistance_in.nodata
        rows, cols = resistance_in.shape
        strip_rows = rows if not tiled else max(1, int(
            tiling.memory_limit_bytes(memory_limit_mb) * STRIP_SHARE
            // (cols * STRIP_BYTES_PER_CELL)))

        # 1. patches
        mask = store.new("habitat_mask", (rows, cols), np.uint8, fill=None)
        for top, block in _strips(habitat_in, strip_rows):
            _raster.habitat_mask(block, habitat_nodata, habitat_values,
                                 out=mask[top:top + block.shape[0]])
        components = connected_components(
            store.done(mask), connectivity, "nonzero",
            progress=progress.span(*PHASES["patches"]),
            out_dir=store.folder("components"), **scale)
        patches, patch_cells, valid_cells = _keep_large(
            components, resistance_in, resistance_nodata, min_area,
            xres * yres, strip_rows, store, progress.span(*PHASES["relabel"]))
        del mask, components
        patch_count = int(patch_cells.size)

        # 2. least-cost regions, seeded from the patch boundary cells only;
        # the patch cells are then set to cost 0 and their own patch (the
        # rasters are those of every patch cell seeded: _raster's docstring)
        cells, ids = _seeds(patches, strip_rows, connectivity)
        regions = cost_distance(
            resistance, cells, connectivity, nodata=resistance_nodata,
            source_ids=ids, band=resistance_band,
            progress=progress.span(*PHASES["cost"]),
            out_dir=store.folder("costdistance"), **scale)
        del cells, ids
        regions = _settle_patches(regions, patches, strip_rows)

        # 3. links
        def read_strip(top, n):
            window = tiling.Window(top, 0, n, cols)
            return (_read(regions.accumulated, window),
                    _read(regions.allocation, window),
                    _read(resistance_in, window))
        key, cost, cell, neighbour = _scan.scan_crossings(
            read_strip, rows, cols, strip_rows, patch_count, connectivity,
            _step_lengths(connectivity, None), progress.span(*PHASES["scan"]))
        links = _links(key, cost, cell, neighbour, patch_count, cols,
                       regions, (xres, yres), connectivity)
        progress(PHASES["paths"][1])

        # 4. the network
        network = _network(links, patch_count, patch_cells * (xres * yres),
                           valid_cells * (xres * yres), max_link_cost,
                           distance_p05, importance,
                           progress.span(*PHASES["graph"]))

        corridors = None
        if "corridors" in outputs:
            corridors = store.new("corridors", (rows, cols), np.float64,
                                  fill=np.nan)
            for top in range(0, rows, strip_rows):
                block = corridors[top:top + strip_rows]
                _scan.burn_corridors(block, top, links.path_offsets,
                                     links.path_rows, links.path_cols,
                                     links.cost, links.in_mst)
            corridors = store.done(corridors)
        rasters = {"patches": patches, "accumulated": regions.accumulated,
                   "allocation": regions.allocation, "corridors": corridors}
        rasters = {name: (rasters[name] if name in outputs else None)
                   for name in OUTPUTS}
        if tiled:
            rasters = _publish(rasters, out_dir, memory_limit_mb)
    progress(1.0)
    return HabitatNetworkResult(
        patches=rasters["patches"], accumulated=rasters["accumulated"],
        allocation=rasters["allocation"], corridors=rasters["corridors"],
        patch_count=patch_count, patch_cells=patch_cells,
        patch_area=patch_cells * (xres * yres), links=links, **network)


# --------------------------------------------------------------------------
# steps


def _keep_large(components, resistance_in, resistance_nodata, min_area,
                cell_area, strip_rows, store, progress):
    """Drop the patches under ``min_area``, renumber the others in scan
    order; check every patch cell has a valid resistance; count the cells
    of valid resistance.  Returns (patches raster, cells per patch, valid
    cell count)."""
    labels = components.labels
    rows, cols = labels.shape
    cells = np.zeros(components.count + 1, dtype=np.int64)
    for top, block in _strips(labels, strip_rows):
        cells += _raster.label_counts(block, components.count + 1)
    # a tolerance of one part in 1e12: an area typed as 3 x 0.1 x 0.1 is
    # not lost to rounding
    keep = cells * cell_area >= min_area * (1 - 1e-12)
    keep[0] = False
    renumber = np.zeros(components.count + 1, dtype=np.int64)
    renumber[keep] = np.arange(1, int(keep.sum()) + 1)
    if not keep.any():
        raise InvalidInputError(
            "no habitat patch" + (f" of at least {min_area:g} map units "
                                  "squared" if min_area > 0 else "")
            + " was found: check the habitat raster, its band and habitat "
            "values" + (", or lower the minimum area" if min_area > 0 else ""))
    dtype = np.int32 if renumber[-1] < 2**31 and rows * cols < 2**31 \
        else np.int64
    patches = store.new("patches", (rows, cols), dtype, fill=None)
    valid_cells = 0
    bad = None
    for (top, block), (_, resistance) in zip(
            _strips(labels, strip_rows),
            _strips(resistance_in, strip_rows)):
        valid, stranded, first = _raster.relabel(
            block, renumber, resistance, resistance_nodata,
            patches[top:top + block.shape[0]])
        valid_cells += valid
        if stranded:
            bad = (stranded, top + first[0], first[1]) if bad is None else \
                (bad[0] + stranded, bad[1], bad[2])
        progress((top + block.shape[0]) / rows)
    if bad is not None:
        raise InvalidInputError(
            f"{bad[0]} habitat patch cell(s) have no valid resistance "
            f"(nodata or NaN), first at row {bad[1]}, column {bad[2]}: give "
            "habitat cells a resistance (e.g. the lowest one), or exclude "
            "them from the habitat")
    return store.done(patches), cells[keep], valid_cells


def _seeds(patches, strip_rows, connectivity):
    """(row, col) cells and patch ids of the cost distance's sources: the
    patch boundary cells, a strip at a time (each read with the rows around
    it).  A patch without a boundary cell covers the whole raster (its
    cells have no other neighbours): its first cell is then the source."""
    rows, cols = patches.shape
    found = []
    for top in range(0, rows, strip_rows):
        n = min(strip_rows, rows - top)
        above = 1 if top > 0 else 0
        below = 1 if top + n < rows else 0
        block = _read(patches, tiling.Window(top - above, 0,
                                             n + above + below, cols))
        found.append(_raster.boundary_cells(block, above, above + n,
                                            connectivity, top - above))
    cells = np.concatenate([c for c, _ in found])
    ids = np.concatenate([i for _, i in found])
    if cells.size == 0:  # one patch, every cell: patch 1 from (0, 0)
        cells = np.zeros((1, 2), dtype=np.int64)
        ids = np.ones(1, dtype=np.int64)
    return cells, ids


def _settle_patches(regions, patches, strip_rows):
    """The cost distance's result with cost 0 and the own patch as
    allocation on every patch cell (files of the tiled path are reopened
    for writing, read-only arrays copied)."""
    accumulated = _writable(regions.accumulated)
    allocation = _writable(regions.allocation)
    rows = patches.shape[0]
    for top in range(0, rows, strip_rows):
        piece = slice(top, min(rows, top + strip_rows))
        block = _read(patches, tiling.Window(top, 0, piece.stop - top,
                                             patches.shape[1]))
        _raster.settle_patches(block, accumulated[piece], allocation[piece])
    return type(regions)(accumulated=_reopened(accumulated),
                         direction=regions.direction,
                         allocation=_reopened(allocation))


def _writable(array):
    if isinstance(array, np.memmap) and not array.flags.writeable:
        return np.load(array.filename, mmap_mode="r+")
    if not array.flags.writeable:
        return np.array(array)
    return array


def _reopened(array):
    """A memmap written to, flushed and reopened read-only (the tiled
    path's results are read-only); other arrays as they are."""
    if isinstance(array, np.memmap):
        array.flush()
        return np.load(array.filename, mmap_mode="r")
    return array


def _links(key, cost, cell, neighbour, patch_count, cols, regions,
           cell_size, connectivity):
    """The Links of the pair table's entries, their paths traced."""
    from ..costdistance import NEIGHBOUR_OFFSETS
    base = patch_count + 1
    from_id, to_id = key // base, key % base
    x = np.stack([cell // cols, cell % cols], axis=1)
    y = x + NEIGHBOUR_OFFSETS[neighbour]
    # orient every crossing from the lower patch id to the higher
    allocation = regions.allocation
    x_patch = np.asarray(allocation[x[:, 0], x[:, 1]], dtype=np.int64)
    swap = x_patch != from_id
    start = np.where(swap[:, None], y, x)
    end = np.where(swap[:, None], x, y)
    offsets, path_rows, path_cols = _scan.trace_links(
        regions.direction, start, end)
    length = _scan.path_lengths(offsets, path_rows, path_cols,
                                float(cell_size[0]), float(cell_size[1]))
    in_mst = _graph.spanning_forest(patch_count, from_id, to_id, cost)
    return Links(from_id=from_id, to_id=to_id, cost=cost, length=length,
                 in_mst=in_mst, crossing=np.stack([start, end], axis=1),
                 path_offsets=offsets, path_rows=path_rows,
                 path_cols=path_cols)


def _network(links, patch_count, patch_area, landscape_area, max_link_cost,
             distance_p05, importance, progress):
    """Degrees, components, indices (the graph keywords of the result)."""
    if importance is None:
        importance = patch_count <= IMPORTANCE_AUTO_LIMIT
    degree = np.bincount(np.concatenate([links.from_id, links.to_id]),
                         minlength=patch_count + 1)[1:].astype(np.int64)
    kept = np.ones(len(links), dtype=bool) if max_link_cost is None else \
        links.cost <= max_link_cost
    component, components = _graph.graph_components(
        patch_count, links.from_id, links.to_id, kept)
    iic, d_iic = _graph.connectivity_index(
        "iic", patch_count, links.from_id[kept], links.to_id[kept],
        links.cost[kept], patch_area, landscape_area, importance=importance)
    progress(0.5)
    pc = d_pc = None
    if distance_p05 is not None:
        pc, d_pc = _graph.connectivity_index(
            "pc", patch_count, links.from_id, links.to_id, links.cost,
            patch_area, landscape_area, theta=math.log(2.0) / distance_p05,
            importance=importance)
    progress(1.0)
    return dict(patch_degree=degree, patch_component=component,
                components=int(components),
                mst_cost=math.fsum(links.cost[links.in_mst].tolist()),
                landscape_area=float(landscape_area), iic=float(iic),
                pc=None if pc is None else float(pc), d_iic=d_iic, d_pc=d_pc)


# --------------------------------------------------------------------------
# storage: arrays in memory, or .npy files of the scratch folder (tiled)


class _Store:
    """New rasters as arrays, or (tiled) as .npy memmaps in ``folder``."""

    def __init__(self, scratch):
        self.scratch = scratch

    def new(self, name, shape, dtype, fill=0):
        """A raster of ``fill``; ``fill=None`` for one the caller writes
        whole (in memory its pages are then first touched by the parallel
        pass that writes it, not by a one-thread fill: 0.2 s a GB)."""
        if self.scratch is None:
            if fill is None:
                return np.empty(shape, dtype=dtype)
            return np.full(shape, fill, dtype=dtype)
        array = np.lib.format.open_memmap(
            os.path.join(self.scratch, name + ".npy"), mode="w+",
            dtype=dtype, shape=shape)
        if fill is not None and fill != 0:
            step = max(1, (16 << 20) // (shape[1] * np.dtype(dtype).itemsize))
            for top in range(0, shape[0], step):
                array[top:top + step] = fill
        return array

    def done(self, array):
        """The finished raster, read-only (a memmap reopened from its file)."""
        if isinstance(array, np.memmap):
            array.flush()
            return np.load(array.filename, mmap_mode="r")
        return array

    def folder(self, name):
        """An engine's ``out_dir`` in the scratch folder (None in memory)."""
        if self.scratch is None:
            return None
        path = os.path.join(self.scratch, name)
        os.makedirs(path, exist_ok=True)
        return path


class _Input:
    def __init__(self, values, band, tiled):
        if tiled:
            self.source = tiling.open_source(values, band)
            self.array = None
            self.nodata = self.source.nodata
            self.shape = self.source.shape
        else:
            self.array, self.nodata = load_raster(values, band)
            self.source = None
            self.shape = self.array.shape


def _open_inputs(habitat, resistance, habitat_band, resistance_band, tiled):
    habitat_in = _Input(habitat, habitat_band, tiled)
    resistance_in = _Input(resistance, resistance_band, tiled)
    if tuple(habitat_in.shape) != tuple(resistance_in.shape):
        raise InvalidInputError(
            f"the habitat raster ({habitat_in.shape[0]} x "
            f"{habitat_in.shape[1]} cells) and the resistance raster "
            f"({resistance_in.shape[0]} x {resistance_in.shape[1]}) are not "
            "on the same grid: resample one onto the other's grid first "
            "(e.g. gdal:warpreproject with the other as target extent and "
            "cell size)")
    return habitat_in, resistance_in


def _read(raster, window):
    """Rows of a raster: a view of an in-memory array, else a fresh read
    (memmaps and GDAL sources through :func:`tiling.open_source`)."""
    if isinstance(raster, _Input):
        if raster.array is not None:
            return raster.array[window.slices]
        return raster.source.read(window)
    if isinstance(raster, np.memmap):
        return np.array(raster[window.slices])
    return raster[window.slices]


def _strips(raster, strip_rows):
    rows, cols = raster.shape
    for top in range(0, rows, strip_rows):
        n = min(strip_rows, rows - top)
        yield top, _read(raster, tiling.Window(top, 0, n, cols))


def _publish(rasters, out_dir, memory_limit_mb):
    """Tiled results: moved into ``out_dir`` (memmaps), or read into memory
    when there is no ``out_dir`` (they must fit the memory limit)."""
    wanted = {name: array for name, array in rasters.items()
              if array is not None}
    if out_dir is None:
        total = sum(a.size * a.dtype.itemsize for a in wanted.values())
        tiling.check_out_dir(None, total,
                             tiling.memory_limit_bytes(memory_limit_mb))
        return {name: (np.array(a) if a is not None else None)
                for name, a in rasters.items()}
    published = {}
    for name, array in rasters.items():
        if array is None:
            published[name] = None
            continue
        target = os.path.join(out_dir, name + ".npy")
        if isinstance(array, np.memmap):
            shutil.move(array.filename, target)
        else:  # an engine that found the raster small enough for memory
            np.save(target, array)
        published[name] = np.load(target, mmap_mode="r")
    return published


def _check_outputs(outputs):
    if outputs is None:
        return DEFAULT_OUTPUTS
    if isinstance(outputs, str):
        outputs = (outputs,)
    outputs = tuple(outputs)
    unknown = [o for o in outputs if o not in OUTPUTS]
    if unknown:
        raise InvalidInputError(
            f"outputs must name some of {', '.join(OUTPUTS)}, got "
            f"{outputs!r}")
    return tuple(o for o in OUTPUTS if o in outputs)


def _non_negative(name, value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if not value >= 0 or math.isinf(value):
        raise InvalidInputError(
            f"{name} must be a number >= 0, got {value!r}")
    return value


def _step_cell(cell_size):
    try:
        xres, yres = (abs(float(v)) for v in cell_size)
    except (TypeError, ValueError):
        xres = yres = float("nan")
    if not (xres > 0 and yres > 0):
        raise InvalidInputError(
            f"cell_size must be two positive numbers, got {cell_size!r}")
    return xres, yres
