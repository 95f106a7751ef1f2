import torch

from simulator.client_store import ClientStateStore, dumps, loads


def test_states_round_trip_and_overwrite_without_growth(tmp_path):
    store = ClientStateStore(tmp_path / "s")
    assert store.get([1, 2]) == {}
    store.put({1: dumps({"w": torch.ones(3)}), 2: dumps({"w": torch.zeros(3)})})
    store.commit()
    got = {cid: loads(blob) for cid, blob in store.get([1, 2, 3]).items()}
    assert sorted(got) == [1, 2] and torch.equal(got[1]["w"], torch.ones(3))
    nbytes = lambda: sum(p.stat().st_size for p in (tmp_path / "s").glob("client_*.pt"))  # noqa: E731
    size = nbytes()
    for step in range(5):
        store.put({1: dumps({"w": torch.full((3,), float(step))})})
        store.commit()
    assert nbytes() == size
    assert torch.equal(loads(store.get([1])[1])["w"], torch.full((3,), 4.0))
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["client_000001.pt", "client_000002.pt", "staged"]


def test_a_put_is_read_back_only_after_commit_and_a_second_put_replaces_it(tmp_path):
    store = ClientStateStore(tmp_path / "s")
    store.put({1: dumps({"w": torch.zeros(3)})})
    store.commit()
    store.put({1: dumps({"w": torch.ones(3)})})  # a worker that then dies: not committed
    assert torch.equal(loads(store.get([1])[1])["w"], torch.zeros(3))
    store.put({1: dumps({"w": torch.full((3,), 2.0)})})  # the client simulated again
    store.commit()
    assert torch.equal(loads(store.get([1])[1])["w"], torch.full((3,), 2.0))
    assert not list((tmp_path / "s" / "staged").iterdir())


def test_a_state_of_any_picklable_objects_round_trips_not_only_tensors():
    """A method's client state is whatever it keeps (``Any``): numpy arrays, fractions, nested
    containers come back equal, as a state written by ``torch.save`` is read in full, not weights only."""
    import numpy as np
    from fractions import Fraction
    state = {"centroids": np.arange(6, dtype=np.float32).reshape(2, 3), "share": Fraction(1, 3),
             "seen": (4, "rounds"), "w": torch.arange(3.0)}
    back = loads(dumps(state))
    assert sorted(back) == ["centroids", "seen", "share", "w"]
    assert back["centroids"].dtype == np.float32 and back["centroids"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert back["share"] == Fraction(1, 3) and back["seen"] == (4, "rounds")
    assert torch.equal(back["w"], torch.tensor([0.0, 1.0, 2.0]))
