import torch

from simulator.client_store import ClientStateStore, dumps, loads


def test_states_round_trip_and_overwrite_without_growth(tmp_path):
    store = ClientStateStore(tmp_path / "s")
    assert store.get([1, 2]) == {}
    store.put({1: dumps({"w": torch.ones(3)}), 2: dumps({"w": torch.zeros(3)})})
    got = {cid: loads(blob) for cid, blob in store.get([1, 2, 3]).items()}
    assert sorted(got) == [1, 2] and torch.equal(got[1]["w"], torch.ones(3))
    size = store.nbytes()
    for step in range(5):
        store.put({1: dumps({"w": torch.full((3,), float(step))})})
    assert store.nbytes() == size
    assert torch.equal(loads(store.get([1])[1])["w"], torch.full((3,), 4.0))
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["client_000001.pt", "client_000002.pt"]
