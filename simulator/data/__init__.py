"""Datasets (``datasets``, ``synthetic``), client partitions (``partition``) and their on-disk store (``store``)."""
