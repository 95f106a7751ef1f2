"""The semi-supervised variant (``methods.semi_supervised``): the labelled subset (fixed per client,
rebuildable from the partition), Algorithm 2's loss terms as the client step composes them with the
objective and the UV term, their ablations, the label classifier's training, and its parameter rules."""
import numpy as np
import pytest
import torch

from methods.base import ClientData
from methods.losses import nt_xent
from methods.losses.supervised_contrastive import within_class_loss
from methods.semi_supervised import (labelled_mask, labelled_positions, labelled_train_indices,
                                     semi_supervised_loss)
from simulator.context import RoundContext, freeze
from simulator.data.partition import make_partition
from tests.methods.test_objectives import (BATCH, CLIENT, LABELS, VIEWS, assert_same_grads, assert_trained,
                                           method_loss, reference_objective, reference_uv, setup,
                                           value_and_grads)
from tests.methods.test_uv import DATA, client_round
from tests.methods.test_uv import setup as uv_setup


def labelled_batch():
    """(labelled rows of the batch, unlabelled rows, the batch's rows in the client, the client's mask):
    the batch is rows 11, 7, 3, ... of a client of 12 samples, whose mask at those rows labels batch
    rows 0, 1, 3, 4 (its first six entries are another mask: a batch must read the mask at its rows)."""
    labelled = torch.tensor([True, True, False, True, True, False])  # of the batch's rows
    rows = torch.tensor([11, 7, 3, 5, 9, 1])
    client_mask = torch.zeros(12, dtype=torch.bool)
    client_mask[rows] = labelled
    assert not torch.equal(client_mask[:BATCH], labelled)
    return labelled.nonzero().squeeze(1), (~labelled).nonzero().squeeze(1), rows, client_mask


def test_semi_supervised_terms_inside_the_method(synthetic_raw):
    # Algorithm 2: plain loss on unlabelled rows, loss within each class on labelled rows,
    # + CE(y | h1) + CE(y | h2) of the label classifier on the labelled rows (and the UV term)
    method, workspace, _ = setup(synthetic_raw, objective="simsiam", uv=True, uv_weight=0.5,
                                 labelled_fraction=0.5)
    online, head = workspace.online, workspace.parts["uv"]
    lab, unl, rows, client_mask = labelled_batch()
    got, got_grads = value_and_grads(workspace, lambda: method_loss(method, workspace, VIEWS, client_mask, rows))

    def reference():
        loss = reference_objective("simsiam", online, None, VIEWS, unl, method.config)
        loss = loss + within_class_loss(
            lambda r: reference_objective("simsiam", online, None, VIEWS, lab[r], method.config), LABELS[lab])
        for v in VIEWS:  # both views
            logits = online["label_classifier"](online["encoder"](v[lab]))
            loss = loss - logits.log_softmax(1)[torch.arange(len(lab)), LABELS[lab]].mean()
        return loss + 0.5 * reference_uv(online, head.own_row, head.rows, VIEWS, CLIENT)

    expected, expected_grads = value_and_grads(workspace, reference)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert_same_grads(got_grads, expected_grads)
    assert_trained(got_grads, ["label_classifier", "encoder", "projector", "predictor", "uv_projector"])


@pytest.mark.parametrize("within_class, label_loss", [(False, True), (True, False), (False, False)])
def test_semi_supervised_ablations_inside_the_method(synthetic_raw, within_class, label_loss):
    # method.within_class: false -> the plain loss over the whole batch replaces the unlabelled rows'
    # plain loss and the labelled rows' loss within each class; method.label_loss: false -> no CE
    # (the classifier exists and gets no gradient)
    method, workspace, _ = setup(synthetic_raw, objective="spectral", clip_mu=0.5, labelled_fraction=0.5,
                                 within_class=within_class, label_loss=label_loss)
    online = workspace.online
    lab, unl, rows, client_mask = labelled_batch()
    got, got_grads = value_and_grads(workspace, lambda: method_loss(method, workspace, VIEWS, client_mask, rows))

    def reference():
        if within_class:
            loss = reference_objective("spectral", online, None, VIEWS, unl, method.config)
            loss = loss + within_class_loss(
                lambda r: reference_objective("spectral", online, None, VIEWS, lab[r], method.config), LABELS[lab])
        else:
            loss = reference_objective("spectral", online, None, VIEWS, torch.arange(BATCH), method.config)
        for v in VIEWS if label_loss else []:
            logits = online["label_classifier"](online["encoder"](v[lab]))
            loss = loss - logits.log_softmax(1)[torch.arange(len(lab)), LABELS[lab]].mean()
        return loss

    expected, expected_grads = value_and_grads(workspace, reference)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert_same_grads(got_grads, expected_grads)
    assert_trained(got_grads, ["encoder", "projector"] + (["label_classifier"] if label_loss else []))
    if not label_loss:
        assert all(got_grads[k] is None for k in got_grads if k.startswith("label_classifier."))
    full = setup(synthetic_raw, objective="spectral", clip_mu=0.5, labelled_fraction=0.5)
    with torch.no_grad():  # each ablation changes the loss (so the reference above tells them apart)
        assert abs(method_loss(full[0], full[1], VIEWS, client_mask[rows]) - got) > 1e-3


def test_each_client_trains_with_its_own_labelled_samples(synthetic_raw):
    """The semi-supervised term a client is bound to holds that client's mask (seed, client id)."""
    method, workspace, scenario = setup(synthetic_raw, objective="simclr", labelled_fraction=0.25)
    extension = next(e for e in method.extensions if e.name == "semi_supervised")
    masks = {}
    for client in (2, 3):
        data = ClientData(client, torch.zeros(40, 1, 28, 28, dtype=torch.uint8), torch.zeros(40, dtype=torch.long))
        ctx = RoundContext(1, 2, (client,), scenario["seed"], freeze(scenario))
        masks[client] = extension.bind(workspace, method.objective, {}, data, ctx).labelled
        assert torch.equal(masks[client], labelled_mask(scenario["seed"], client, 40, 0.25))
        assert masks[client].sum() == 10  # the scenario's fraction of the client's 40 samples
    assert not torch.equal(masks[2], masks[3])


def test_semi_supervised_loss_is_algorithm_2(synthetic_raw):
    method, _ = uv_setup(synthetic_raw, uv=False, labelled_fraction=0.5)
    workspace = method.make_workspace(torch.device("cpu"))
    online = workspace.online
    views = [DATA.train_x[:8].float() / 255, DATA.train_x[:8].flip(3).float() / 255]
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 3, 3])
    labelled = torch.tensor([True, True, False, True, True, False, False, True])
    embedding = method.objective.embed(online, None, views)
    z1, z2 = embedding["z"]
    h1, h2 = embedding["features"]
    lab, unl = labelled.nonzero().squeeze(1), (~labelled).nonzero().squeeze(1)
    ce = torch.nn.functional.cross_entropy
    plain = nt_xent(z1[unl], z2[unl], 0.5)
    # classes 0, 1, 2, 3 among the labelled rows (rows 0; 1, 4; 3; 7): NT-Xent within each, summed
    within = sum(nt_xent(z1[rows], z2[rows], 0.5) for rows in ([0], [1, 4], [3], [7]))
    assert torch.allclose(within, within_class_loss(lambda r: nt_xent(z1[lab][r], z2[lab][r], 0.5), labels[lab]))
    label = ce(online["label_classifier"](h1[lab]), labels[lab]) + ce(online["label_classifier"](h2[lab]), labels[lab])
    got, parts = semi_supervised_loss(method.objective, embedding, labels, labelled, online["label_classifier"])
    assert torch.allclose(got, plain + within + label)
    # the parts logged beside the loss: each term by hand, none of them zero here
    assert parts.keys() == {"loss_objective", "loss_within_class", "loss_label"}
    for name, value in (("loss_objective", plain), ("loss_within_class", within), ("loss_label", label)):
        assert torch.allclose(parts[name], value) and value.abs() > 1e-3, name
        assert not parts[name].requires_grad, name
    # the ablations' parts: the plain loss on every row, and no cross-entropy
    got, parts = semi_supervised_loss(method.objective, embedding, labels, labelled, online["label_classifier"],
                                      within_class=False, label_loss=False)
    assert parts.keys() == {"loss_objective"} and torch.allclose(parts["loss_objective"], nt_xent(z1, z2, 0.5))
    assert torch.allclose(got, nt_xent(z1, z2, 0.5))
    # a batch without labelled rows: its within-class and label parts are 0, so the parts still sum to the loss
    none = torch.zeros(8, dtype=torch.bool)
    got, parts = semi_supervised_loss(method.objective, embedding, labels, none, online["label_classifier"])
    assert parts["loss_within_class"] == 0 and parts["loss_label"] == 0
    assert torch.allclose(parts["loss_objective"], got) and torch.allclose(got, nt_xent(z1, z2, 0.5))
    # and one with every row labelled: no plain part, at 0
    got, parts = semi_supervised_loss(method.objective, embedding, labels, ~none, online["label_classifier"])
    assert parts.keys() == {"loss_objective", "loss_within_class", "loss_label"} and parts["loss_objective"] == 0
    assert torch.allclose(got, parts["loss_within_class"] + parts["loss_label"])


def test_semi_supervised_client_trains_the_label_classifier(synthetic_raw):
    method, ctx = uv_setup(synthetic_raw, labelled_fraction=0.25)
    _, broadcast, upload, _ = client_round(method, ctx)
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    name = "online.label_classifier.weight"
    assert not torch.allclose(new[name], broadcast["weights"][name])


def test_labelled_subset_is_fixed_per_client_and_rebuildable_from_the_partition():
    mask = labelled_mask(7, 2, 50, 0.1)
    assert mask.sum() == 5 and torch.equal(mask, labelled_mask(7, 2, 50, 0.1))
    assert not torch.equal(mask, labelled_mask(7, 3, 50, 0.1))
    labels = np.repeat(np.arange(10), 30)
    partition = make_partition("dirichlet", labels, 5, seed=7, alpha=0.5)
    indices = labelled_train_indices(partition, 7, 0.1)
    expected = [partition.indices[c][labelled_mask(7, c, len(partition.indices[c]), 0.1).numpy()]
                for c in range(5)]
    assert np.array_equal(indices, np.sort(np.concatenate(expected)))
    assert len(indices) == sum(len(labelled_positions(7, c, len(partition.indices[c]), 0.1)) for c in range(5))


@pytest.mark.parametrize("size, fraction, count", [(45, 0.1, 5), (6, 0.25, 2), (44, 0.1, 4), (600, 0.1, 60)])
def test_a_client_labels_its_fraction_of_samples_rounded_half_up(size, fraction, count):
    """round(fraction x size), 4.5 -> 5 and 1.5 -> 2 (not Python's round-half-even, not a floor)."""
    assert len(labelled_positions(7, 2, size, fraction)) == count


@pytest.mark.parametrize("method, message", [
    ({"uv": False, "labelled_fraction": 1.5}, r"method.labelled_fraction: expected a fraction in \[0, 1\]"),
    ({"uv": False, "objective": "supervised", "labelled_fraction": 0.1}, "method.labelled_fraction: expected 0"),
    ({"uv": False, "within_class": False}, r"method.within_class: expected true unless method.labelled_fraction > 0"),
    ({"uv": False, "label_loss": False}, r"method.label_loss: expected true unless method.labelled_fraction > 0"),
])
def test_bad_values_are_one_line_errors(synthetic_raw, method, message):
    with pytest.raises(ValueError, match=message):
        uv_setup(synthetic_raw, **method)


def test_labelled_positions_are_sorted_and_distinct():
    """``labelled_positions`` returns its positions sorted (its docstring), each once."""
    positions = labelled_positions(7, 2, 50, 0.3)
    assert len(positions) == 15 and np.all(np.diff(positions) > 0)
    assert positions.min() >= 0 and positions.max() < 50


def test_every_sample_labelled_is_a_valid_fraction(synthetic_raw):
    """``labelled_fraction: 1`` (the whole client labelled) is in [0, 1]: accepted, every sample labelled."""
    method, _ = uv_setup(synthetic_raw, uv=False, labelled_fraction=1.0)
    assert method.config.labelled_fraction == 1.0
    assert labelled_mask(7, 2, 9, 1.0).all()


class CountingObjective:
    """A stand-in objective whose loss of a subset of rows is known by hand: two parts, the number of
    rows (``loss_objective``) and 0.5 (``loss_inter_client``, as FedSC splits its loss)."""

    loss_parts = ("loss_objective", "loss_inter_client")

    def rows_loss_parts(self, embedding, labels, rows=None):
        count = torch.tensor(float(len(labels) if rows is None else len(rows)))
        return count + 0.5, {"loss_objective": count, "loss_inter_client": torch.tensor(0.5)}

    def rows_loss(self, embedding, labels, rows=None):
        return self.rows_loss_parts(embedding, labels, rows)[0]


def test_the_plain_loss_keeps_the_objective_s_own_parts_and_covers_every_row_without_within_class():
    # six rows, labels 0 1 0 2 1 0, rows 0, 1, 3, 4 labelled (classes 0: {0}, 1: {1, 4}, 2: {3}); no features,
    # so no label term (label_loss false)
    objective, labels = CountingObjective(), torch.tensor([0, 1, 0, 2, 1, 0])
    labelled = torch.tensor([True, True, False, True, True, False])
    embedding = {"features": []}
    loss, parts = semi_supervised_loss(objective, embedding, labels, labelled, None, label_loss=False)
    # plain on the 2 unlabelled rows: 2 + 0.5, split as the objective splits it; within each class: (1 + 0.5)
    # + (2 + 0.5) + (1 + 0.5)
    assert loss.item() == 2.5 + 5.5
    assert {k: v.item() for k, v in parts.items()} == {"loss_objective": 2.0, "loss_inter_client": 0.5,
                                                         "loss_within_class": 5.5}
    # one labelled row (row 3): its class's term, 1 + 0.5, is still added (and the label term, below)
    one = torch.tensor([False, False, False, True, False, False])
    loss, parts = semi_supervised_loss(objective, embedding, labels, one, None, label_loss=False)
    assert loss.item() == 5.5 + 1.5 and parts["loss_within_class"].item() == 1.5
    # within_class false: the plain loss on all six rows, even when every row is labelled
    for mask in (labelled, torch.ones(6, dtype=torch.bool)):
        loss, parts = semi_supervised_loss(objective, embedding, labels, mask, None, within_class=False,
                                           label_loss=False)
        assert loss.item() == 6.5
        assert {k: v.item() for k, v in parts.items()} == {"loss_objective": 6.0, "loss_inter_client": 0.5}


def test_the_label_classifier_has_one_output_per_class_of_the_data(synthetic_raw):
    """The label classifier maps the backbone features to the data's classes: 7 classes -> 7 logits (every
    other test's data have 10)."""
    from methods import build_method
    from methods.base import DataSpec
    from simulator.scenario import resolve
    scenario = resolve({**synthetic_raw, "method": {"name": "fedavg", "objective": "simclr", "labelled_fraction": 0.5}})
    workspace = build_method(scenario, DataSpec(1, 28, 7, (40, 40))).make_workspace(torch.device("cpu"))
    classifier = workspace.online["label_classifier"]
    assert classifier.out_features == 7
    assert classifier.in_features == workspace.online["projector"][0].in_features  # the backbone's width
