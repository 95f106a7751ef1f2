"""The defaults of an extension's client term (``methods.extension.ClientTerm``): a term that overrides
nothing leaves the objective's loss as it is and adds nothing."""
import torch

from methods.extension import ClientTerm


def test_a_term_that_overrides_nothing_changes_nothing():
    calls = []

    def base(embedding, labels, rows):
        calls.append(rows)
        return torch.tensor(1.0), {}

    term = ClientTerm()
    assert term.base_loss(base) is base  # the base loss itself, called with the batch's rows
    rows = torch.tensor([4, 2])
    term.base_loss(base)({}, torch.zeros(2), rows)
    assert calls == [rows]
    assert term.loss({}) is None and term.parameters() == [] and term.upload() == {}
