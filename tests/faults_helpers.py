"""Helpers of the fault tests (tests/test_faults*.py): folders watched for
leftovers, file hashes, a small tmpfs for a real full disk."""

import hashlib
import os
import subprocess

import pytest

CC, CD, MST = ("gridgraph:connectedcomponents", "gridgraph:costdistance",
               "gridgraph:minimumspanningtree")


def snapshot(folder):
    """{relative path: sha256} of every file under ``folder``."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, folder)] = hashlib.sha256(
                    handle.read()).hexdigest()
    return found


def entries(folder):
    """Names of everything (files and folders, hidden too) in ``folder``."""
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


class Watched:
    """An inputs folder, an outputs folder and a scratch folder
    ($GRIDGRAPH_SCRATCH_DIR) whose contents a test asserts afterwards."""

    def __init__(self, tmp_path, monkeypatch):
        self.inputs = tmp_path / "inputs"
        self.outputs = tmp_path / "outputs"
        self.scratch = tmp_path / "scratch"
        for folder in (self.inputs, self.outputs, self.scratch):
            folder.mkdir()
        monkeypatch.setenv("GRIDGRAPH_SCRATCH_DIR", str(self.scratch))
        self._before = None

    def input(self, name):
        return str(self.inputs / name)

    def output(self, name):
        return str(self.outputs / name)

    def mark(self):
        """Remember the inputs' and outputs' bytes (call before the run)."""
        self._before = (snapshot(self.inputs), snapshot(self.outputs))

    def assert_untouched(self):
        """Inputs and outputs byte for byte as marked, no scratch left."""
        assert_inputs_unchanged(self._before[0], snapshot(self.inputs))
        assert snapshot(self.outputs) == self._before[1], (
            "the outputs folder changed: "
            f"{sorted(set(snapshot(self.outputs)) ^ set(self._before[1]))}")
        assert entries(self.scratch) == [], "scratch was left behind"


def assert_inputs_unchanged(before, now):
    """Every input file has its old bytes; the only new files allowed are
    the statistics QGIS itself computes when it loads a raster layer and
    GDAL keeps in a new ``<input>.aux.xml``."""
    qgis_statistics = {name for name in set(now) - set(before)
                       if name.endswith(".aux.xml")
                       and name[:-len(".aux.xml")] in before}
    assert {name: now[name] for name in set(now) - qgis_statistics} == \
        before, "an input was modified"


def run_qgis_process(algorithm_id, parameters, environment=None,
                     timeout=300):
    """(returncode, text) of ``scripts/qgis-process run``."""
    from conftest import QGIS_PROCESS, qgis_process_environment
    arguments = [QGIS_PROCESS, "run", algorithm_id, "--"]
    arguments += [f"{name}={value}" for name, value in parameters.items()]
    completed = subprocess.run(
        arguments, capture_output=True, text=True, timeout=timeout,
        env={**qgis_process_environment(), **(environment or {})})
    return completed.returncode, completed.stdout + completed.stderr


def can_mount_tmpfs():
    return hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs folder (a real disk that fills up), unmounted after."""
    if not can_mount_tmpfs():
        pytest.skip("a real full disk needs a tmpfs mount, which needs root "
                    "(the disk-full handling is then untested here)")
    folder = tmp_path / "small-disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
        capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): "
                    "the disk-full handling is untested here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
