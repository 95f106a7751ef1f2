"""The GPU benchmark's pieces on the CPU, at tiny sizes (the figures themselves: results/gpu.md)."""
import torch

from analysis.gpu_benchmark import plain_simclr_rate, several_clients_rates


def test_vmap_of_several_clients_does_the_loops_work():
    result = several_clients_rates(torch.device("cpu"), clients=3, batch=8, steps=2)
    assert result["max_weight_difference"] < 1e-5
    assert result["loop_images_per_second"] > 0 and result["vmap_images_per_second"] > 0


def test_the_plain_loop_runs_and_gives_a_rate():
    assert plain_simclr_rate(torch.device("cpu"), "synthetic", "small_cnn", batch=16, steps=2) > 0
