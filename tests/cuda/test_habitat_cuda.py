"""The habitat network with the CUDA backend (simulator on CI): the engines
it calls (components, cost distance) run on the GPU, the crossing scan and
the patch graph on the CPU; the network must equal the CPU backend's bit
for bit (patches, regions, links with their paths, tree, indices)."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from test_habitat_network import (assert_same_network,  # noqa: E402
                                  random_landscape, three_in_a_row)

from gridgraph.core import habitat_network  # noqa: E402


@pytest.mark.parametrize("connectivity", [4, 8])
def test_cuda_equals_cpu(connectivity):
    habitat, resistance = random_landscape((11, 13), 6, density=0.15,
                                           integer=False)
    options = dict(connectivity=connectivity, distance_p05=8.0,
                   outputs=("patches", "accumulated", "allocation",
                            "corridors"))
    cpu = habitat_network(habitat, resistance, backend="cpu", **options)
    gpu = habitat_network(habitat, resistance, backend="cuda", **options)
    assert cpu.patch_count > 2 and len(cpu.links) > 2
    assert_same_network(cpu, gpu)


def test_cuda_on_the_literal_row_of_three():
    habitat, resistance = three_in_a_row()
    gpu = habitat_network(habitat, resistance, connectivity=4,
                          backend="cuda")
    assert gpu.links.cost.tolist() == [5.0, 5.0]
    assert np.argmax(gpu.d_iic) == 1
