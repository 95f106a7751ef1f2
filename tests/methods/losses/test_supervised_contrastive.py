import math

import torch

from methods.losses import nt_xent
from methods.losses.supervised_contrastive import within_class_loss


def test_within_class_nt_xent_matches_a_hand_computation():
    # class 0 = samples 0 and 2, class 1 = sample 1 alone
    z1 = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    z2 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    labels = torch.tensor([0, 1, 0])
    loss = within_class_loss(lambda rows: nt_xent(z1[rows], z2[rows], 1.0), labels)
    # class 0, rows a=(1,0), b=(0,1), a'=(1,0), b'=(1,0); cosines a.b=0, a.a'=1, a.b'=1, b.a'=0, b.b'=0, a'.b'=1
    e = math.e
    class_0 = (-math.log(e / (1 + e + e))      # a: positive a', negatives b, b'
               - math.log(1 / (1 + 1 + 1))     # b: positive b', negatives a, a'
               - math.log(e / (e + 1 + e))     # a': positive a, negatives b, b'
               - math.log(1 / (e + 1 + e))) / 4  # b': positive b, negatives a, a'
    class_1 = 0.0  # a lone sample has no negatives: -log(exp(s) / exp(s))
    assert math.isclose(loss.item(), class_0 + class_1, rel_tol=1e-6)


def test_within_class_loss_sums_one_term_per_class_present():
    labels = torch.tensor([3, 1, 3, 3, 1])
    seen = []

    def rows_loss(rows):
        seen.append(rows.tolist())
        return torch.tensor(float(len(rows)))

    assert within_class_loss(rows_loss, labels).item() == 5.0
    assert sorted(seen) == [[0, 2, 3], [1, 4]]
    # three classes (with two, a class's rows and the rest of the batch are the same two sets): one term
    # on each class's own rows, 3 + 2 + 1 rows (the rows of the other classes would give 3 + 4 + 5)
    seen.clear()
    assert within_class_loss(rows_loss, torch.tensor([3, 1, 3, 3, 1, 0])).item() == 6.0
    assert sorted(seen) == [[0, 2, 3], [1, 4], [5]]
