"""Deterministic test and benchmark rasters (shared by tests/ and bench/)."""

import numpy as np


def fractal_surface(shape, seed=0, beta=3.0, dtype=np.float32):
    """A fractal (1/f^beta spectrum) surface scaled to [1, 1000]: DEM- or cost-like.

    Spectral synthesis with numpy's FFT; the same (shape, seed, beta) always
    gives the same raster.
    """
    rows, cols = shape
    rng = np.random.default_rng(seed)
    fy = np.fft.fftfreq(rows)[:, None]
    fx = np.fft.rfftfreq(cols)[None, :]
    radius = np.hypot(fy, fx)
    radius[0, 0] = 1.0
    amplitude = radius ** (-beta / 2.0)
    amplitude[0, 0] = 0.0
    phase = rng.uniform(0, 2 * np.pi, size=amplitude.shape)
    spectrum = amplitude * np.exp(1j * phase)
    surface = np.fft.irfft2(spectrum, s=shape)
    low, high = surface.min(), surface.max()
    if high == low:
        return np.ones(shape, dtype=dtype)
    return (1.0 + 999.0 * (surface - low) / (high - low)).astype(dtype)


def maze_cost(shape, seed=0, wall=np.nan):
    """A cost raster of corridors and walls (NaN by default): high-diameter paths.

    Built as a randomized depth-first maze on odd cells, so every corridor cell
    is reachable from every other and shortest paths wind through the grid.
    """
    rows, cols = shape
    rng = np.random.default_rng(seed)
    cost = np.full(shape, wall, dtype=np.float64)
    cell_rows, cell_cols = (rows + 1) // 2, (cols + 1) // 2
    seen = np.zeros((cell_rows, cell_cols), dtype=bool)
    stack = [(0, 0)]
    seen[0, 0] = True
    cost[0, 0] = 1.0
    while stack:
        r, c = stack[-1]
        options = [(r + dr, c + dc) for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0))
                   if 0 <= r + dr < cell_rows and 0 <= c + dc < cell_cols
                   and not seen[r + dr, c + dc]]
        if not options:
            stack.pop()
            continue
        nr, nc = options[rng.integers(len(options))]
        seen[nr, nc] = True
        cost[2 * nr, 2 * nc] = rng.uniform(1, 10)
        cost[r + nr, c + nc] = rng.uniform(1, 10)  # the wall cell between them
        stack.append((nr, nc))
    return cost


def spiral_mask(size):
    """A square boolean raster holding one long spiral arm (one 4-component).

    The arm turns clockwise inward with one background cell between turns, so
    it crosses every tile of any tiling many times.
    """
    mask = np.zeros((size, size), dtype=bool)
    headings = ((0, 1), (1, 0), (0, -1), (-1, 0))
    r = c = heading = 0
    mask[0, 0] = True

    def free(row, col):
        return 0 <= row < size and 0 <= col < size and not mask[row, col]

    turns_without_step = 0
    while turns_without_step < 2:
        dr, dc = headings[heading]
        # step while the cell ahead and the one after it are free, which keeps
        # a one-cell gap to the previous turn of the arm
        if free(r + dr, c + dc) and (free(r + 2 * dr, c + 2 * dc) or not (
                0 <= r + 2 * dr < size and 0 <= c + 2 * dc < size)):
            r, c = r + dr, c + dc
            mask[r, c] = True
            turns_without_step = 0
        else:
            heading = (heading + 1) % 4
            turns_without_step += 1
    return mask
