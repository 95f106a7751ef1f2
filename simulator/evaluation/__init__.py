"""Evaluation of encoders during a run: the metrics (``metrics``: kNN monitor, linear probe,
label-efficient protocol, fine-tuning; ``align_uniform``: Orchestra's unsupervised score) and the
in-training evaluator built on them (``monitor``). The runtime and the offline reports both use it."""
