"""The kept output array (core/kept_output.py) and the components kernels'
use of it: an array is handed out again only when nothing refers to it."""

import sys
import threading

import numpy as np
import pytest
import scipy.ndimage as ndi

from gridgraph.core._common import Progress
from gridgraph.core.components import _cpu
from gridgraph.core.kept_output import KeptOutput


def test_a_free_array_of_the_same_shape_and_type_is_handed_out_again():
    kept = KeptOutput(max_bytes=2**20)
    first = kept.empty((4, 5), np.int32)
    address = first.ctypes.data
    del first
    again = kept.empty((4, 5), np.int32)
    assert again.ctypes.data == address
    assert again.shape == (4, 5) and again.dtype == np.int32


@pytest.mark.parametrize("hold", ["array", "view", "transpose", "memoryview",
                                  "reshaped"])
def test_an_array_still_referred_to_is_never_handed_out(hold):
    kept = KeptOutput(max_bytes=2**20)
    first = kept.empty((4, 5), np.int32)
    first[:] = 7
    holder = {"array": lambda a: a, "view": lambda a: a[1:, 2:],
              "transpose": lambda a: a.T, "memoryview": memoryview,
              "reshaped": lambda a: a.reshape(-1)}[hold](first)
    address = first.ctypes.data
    del first
    second = kept.empty((4, 5), np.int32)
    assert second.ctypes.data != address
    second[:] = 9
    assert (np.asarray(holder) == 7).all()
    # the new array is the kept one now: free once let go
    address = second.ctypes.data
    del second
    assert kept.empty((4, 5), np.int32).ctypes.data == address


def test_an_array_made_read_only_by_its_last_user_is_writable_again():
    kept = KeptOutput(max_bytes=2**20)
    first = kept.empty((4, 5), np.int32)
    first.flags.writeable = False
    address = first.ctypes.data
    del first
    again = kept.empty((4, 5), np.int32)
    assert again.ctypes.data == address and again.flags.writeable
    again[:] = 1


def test_the_free_reference_count_is_measured_for_this_python():
    """The count a free kept array reads is measured at import (CPython
    3.14 borrows a local's reference in a call: one fewer than 3.13)."""
    from gridgraph.core import kept_output
    holder = [np.empty(3)]
    array = holder[0]
    assert kept_output._FREE_REFERENCES == sys.getrefcount(array)
    user = array  # noqa: F841 - a second holder
    assert sys.getrefcount(array) == kept_output._FREE_REFERENCES + 1


def test_other_shapes_types_and_large_arrays_get_new_arrays():
    kept = KeptOutput(max_bytes=80)
    first = kept.empty((4, 5), np.int32)
    address = first.ctypes.data
    del first
    other = kept.empty((5, 4), np.int32)
    assert other.ctypes.data != address
    del other
    wider = kept.empty((4, 5), np.int64)  # 160 bytes: over max_bytes
    assert wider.shape == (4, 5) and wider.dtype == np.int64
    del wider
    assert kept._kept == []  # nothing over max_bytes is kept
    small = kept.empty((2, 2), np.int32)
    del small
    assert len(kept._kept) == 1
    kept.release()
    assert kept._kept == []


def scipy_labels(mask):
    return ndi.label(mask, ndi.generate_binary_structure(2, 2))[0]


def test_labels_kept_by_a_caller_survive_the_next_call():
    """A labelling the caller keeps (or a view of it) is not overwritten by
    the next call of the same shape; one it let go is reused."""
    rng = np.random.default_rng(5)
    masks = [rng.random((300, 200)) < 0.6 for _ in range(3)]
    first, _ = _cpu.label(masks[0], None, 8, "nonzero", Progress())
    window = first[100:, 50:]
    address = first.ctypes.data
    del first
    second, _ = _cpu.label(masks[1], None, 8, "nonzero", Progress())
    assert second.ctypes.data != address
    np.testing.assert_array_equal(window, scipy_labels(masks[0])[100:, 50:])
    np.testing.assert_array_equal(second, scipy_labels(masks[1]))
    address = second.ctypes.data
    del second
    third, _ = _cpu.label(masks[2], None, 8, "nonzero", Progress())
    assert third.ctypes.data == address
    np.testing.assert_array_equal(third, scipy_labels(masks[2]))
    np.testing.assert_array_equal(window, scipy_labels(masks[0])[100:, 50:])


def test_concurrent_calls_get_their_own_labels():
    rng = np.random.default_rng(6)
    masks = [rng.random((256, 256)) < 0.6 for _ in range(8)]
    results = [None] * len(masks)

    def run(index):
        for _ in range(5):
            results[index] = _cpu.label(masks[index], None, 8, "nonzero",
                                        Progress())[0]

    threads = [threading.Thread(target=run, args=(index,))
               for index in range(len(masks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for mask, labels in zip(masks, results):
        np.testing.assert_array_equal(labels, scipy_labels(mask))
