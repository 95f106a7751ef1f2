import numpy as np
import pytest
import torch

from simulator.context import RoundContext, derive_seed, freeze


def test_client_randomness_depends_on_seed_round_and_client_only():
    ctx = RoundContext(round=3, num_rounds=10, cohort=(1, 2), seed=7, hparams=freeze({}))
    same = RoundContext(round=3, num_rounds=99, cohort=(2, 5, 9), seed=7, hparams=freeze({"a": 1}))
    draw = lambda c, cid: torch.rand(4, generator=c.client_generator(cid))
    assert torch.equal(draw(ctx, 2), draw(same, 2))
    assert not torch.equal(draw(ctx, 2), draw(ctx, 1))
    other_round = RoundContext(round=4, num_rounds=10, cohort=(2,), seed=7, hparams=freeze({}))
    assert not torch.equal(draw(ctx, 2), draw(other_round, 2))
    other_seed = RoundContext(round=3, num_rounds=10, cohort=(1, 2), seed=8, hparams=freeze({}))
    assert not torch.equal(draw(ctx, 2), draw(other_seed, 2))
    # named streams (e.g. Orchestra's "local-clustering", FedSC's "correlation") are independent
    # of the default "train" stream and of each other
    streams = [torch.rand(4, generator=ctx.client_generator(2, name)) for name in ("train", "correlation", "rad")]
    assert torch.equal(streams[0], draw(ctx, 2))
    assert not torch.equal(streams[0], streams[1]) and not torch.equal(streams[1], streams[2])
    assert derive_seed(1, 2) != derive_seed(2, 1)


def test_a_numpy_scalar_derives_the_seed_of_the_python_number_it_equals():
    """A client id or round read from an array (``np.int64(3)`` prints differently from ``3``) or a
    label fraction from one (``np.float64(0.1)``) gives the seed, and the client's draws, of its Python
    value; a Python value's seed is the one it always had (the digest of the parts' ``repr``)."""
    import hashlib
    assert derive_seed(7, np.int64(3), np.int32(2), "train") == derive_seed(7, 3, 2, "train")
    assert derive_seed(7, "finetune", np.float64(0.1), np.uint8(4)) == derive_seed(7, "finetune", 0.1, 4)
    digest = hashlib.blake2b(repr((7, 3, 2, "train")).encode(), digest_size=8).digest()
    assert derive_seed(7, 3, 2, "train") == int.from_bytes(digest, "little") >> 1
    ctx = RoundContext(round=np.int64(3), num_rounds=10, cohort=(2,), seed=7, hparams=freeze({}))
    plain = RoundContext(round=3, num_rounds=10, cohort=(2,), seed=7, hparams=freeze({}))
    assert torch.equal(torch.rand(4, generator=ctx.client_generator(np.int64(2))),
                       torch.rand(4, generator=plain.client_generator(2)))


def test_context_and_hparams_are_frozen():
    ctx = RoundContext(round=1, num_rounds=2, cohort=(0,), seed=0, hparams=freeze({"training": {"lr": 0.1}}))
    with pytest.raises(AttributeError):
        ctx.round = 2
    with pytest.raises(TypeError):
        ctx.hparams["training"]["lr"] = 1.0
    assert ctx.progress == 0.0


@pytest.mark.parametrize("round_, num_rounds, progress", [(0, 10, 0.0), (1, 10, 0.0), (6, 10, 0.5), (10, 10, 0.9),
                                                          (1, 0, 0.0)])
def test_progress_is_the_fraction_of_rounds_done_before_this_one(round_, num_rounds, progress):
    ctx = RoundContext(round=round_, num_rounds=num_rounds, cohort=(0,), seed=0, hparams=freeze({}))
    assert ctx.progress == progress


def test_a_context_is_a_training_pass_with_nobody_unreported_unless_told():
    """The defaults a single-pass method's rounds and the tests rely on: ``phase`` "train" (the server
    counts the broadcast's bytes in a method's first pass, and FedAvg's only pass is "train"),
    ``unreported`` empty."""
    ctx = RoundContext(round=2, num_rounds=4, cohort=(0, 3), seed=1, hparams=freeze({}))
    assert ctx.phase == "train" and ctx.unreported == ()


def test_a_client_s_stream_is_seeded_by_the_digest_of_seed_round_client_and_stream_in_that_order():
    """Every run's client randomness comes from this seed: the blake2b digest (8 bytes, little-endian,
    halved to 63 bits) of ``repr((seed, round, client, stream))``; reordering the parts would give
    every scenario other numbers."""
    import hashlib
    ctx = RoundContext(round=3, num_rounds=10, cohort=(2,), seed=7, hparams=freeze({}))
    for stream in ("train", "correlation"):
        digest = hashlib.blake2b(repr((7, 3, 2, stream)).encode(), digest_size=8).digest()
        seed = int.from_bytes(digest, "little") >> 1
        assert ctx.client_seed(2, stream) == seed
        assert torch.equal(torch.rand(4, generator=ctx.client_generator(2, stream)),
                           torch.rand(4, generator=torch.Generator().manual_seed(seed)))
