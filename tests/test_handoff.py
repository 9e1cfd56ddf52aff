"""The handoff of a second round's answers through a file
(core/handoff.py): nothing before it is published, each task's own part
after, and a waiting task stops once the driver removes the folder."""

import os
import threading
import time

import numpy as np
import pytest

from gridgraph.core import handoff


def test_parts_handed_off_once_published(tmp_path):
    board = handoff.HandoffBoard(str(tmp_path))
    assert os.path.dirname(board.folder) == str(tmp_path)
    tasks = [board.handoff(k) for k in range(3)]
    assert [task.fetch() for task in tasks] == [None] * 3
    parts = [{"k": 0}, np.arange(5), "third"]
    board.publish(parts)
    assert os.listdir(board.folder) == [handoff.ANSWERS_NAME]
    assert tasks[0].fetch() == {"k": 0}
    np.testing.assert_array_equal(tasks[1].fetch(wait=True), np.arange(5))
    import pickle
    assert pickle.loads(pickle.dumps(tasks[2])).fetch() == "third"
    with pytest.raises(IndexError):
        board.handoff(3).fetch()
    board.close()
    assert os.listdir(tmp_path) == []


def test_a_waiting_task_gets_its_part_when_it_comes(tmp_path):
    board = handoff.HandoffBoard(str(tmp_path))
    got = []
    waiter = threading.Thread(
        target=lambda: got.append(board.handoff(1).fetch(wait=True)))
    waiter.start()
    time.sleep(0.05)
    assert waiter.is_alive() and got == []
    board.publish(["a", "b"])
    waiter.join(5)
    assert got == ["b"]
    board.close()


def test_a_waiting_task_stops_when_the_folder_goes(tmp_path):
    board = handoff.HandoffBoard(str(tmp_path))
    errors = []

    def wait():
        try:
            board.handoff(0).fetch(wait=True)
        except handoff.HandoffStopped as error:
            errors.append(str(error))

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.05)
    board.close()
    waiter.join(5)
    assert not waiter.is_alive()
    assert len(errors) == 1 and "stopped" in errors[0]
    # a task started after the stop fails at once, without waiting
    with pytest.raises(handoff.HandoffStopped):
        board.handoff(0).fetch()


def test_a_wait_without_a_driver_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(handoff, "WAIT_SECONDS", 0.05)
    board = handoff.HandoffBoard(str(tmp_path))
    with pytest.raises(handoff.HandoffStopped, match="after 0 s"):
        board.handoff(0).fetch(wait=True)
    board.close()


def test_label_runs_hold_ahead_within_the_process_budget(monkeypatch):
    from gridgraph.core.components import tiled
    monkeypatch.setattr(tiled, "LABEL_AHEAD_BYTES", 100)
    assert tiled._held_ahead == [0]
    assert tiled._hold_ahead(60)
    assert not tiled._hold_ahead(41)  # nothing taken
    assert tiled._hold_ahead(40)
    assert not tiled._hold_ahead(1)
    tiled._hold_ahead(-100)
    assert tiled._held_ahead == [0]
