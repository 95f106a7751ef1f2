"""Client steps on a GPU, without Ray and without data files (issues 15 and 17).

Six measurements, each printed and written to ``--out`` (JSON):

1. ``methods``: every method's federation, in-process (``executor: in_process``, one worker with the
   GPU), on ``synthetic_cifar10`` (CIFAR-10's shape) with a ResNet-18, 10 iid clients of 500 images,
   4 a round, batch 128, one local epoch. Images/s are the run summary's steady rate (rounds after
   the first: client steps, broadcast and server step), beside the peak GPU memory. Each method runs
   twice, as shipped (``ray.cuda_deterministic`` on): whether the two runs' logged values agree
   bitwise, and which ops torch warned have no deterministic CUDA kernel.
2. ``plain``: the same work without the federation: one network trained by SimCLR (the same
   encoder, projector, batched augmentation and NT-Xent) in a plain torch loop on the same device;
   once with a ResNet-18 on CIFAR-10-shaped data, once with the quickstart's small CNN on
   Fashion-MNIST-shaped data, beside the quickstart federation in-process on ``synthetic``.
3. ``several_clients``: K clients' SimCLR steps at once with ``torch.func`` (stacked parameters, a
   ``vmap`` of the gradient) against the per-client loop, on pre-augmented batches (compute only);
   both run the same steps, and the largest difference of their final weights is reported.
4. ``repeat``: the quickstart's shape with a ResNet-18 run twice with ``ray.cuda_deterministic``
   off, then twice with it on: whether each pair repeats, and the switches' cost in images/s. On
   the CPU every pair is bitwise equal; on an H200 runs without the switches were not
   (results/gpu.md).
5. ``engines``: the quickstart's shape with a ResNet-18, switches on, through the Ray engine with two
   workers sharing the device (0.5 GPU each), the same again, one worker with the whole device, and
   in-process: whether every logged value of each equals the first run's, each run's numerics and
   images/s. Needs Ray (on a machine without it, the part reports the import error).
6. ``augmentation``: every distinct augmentation of the shipped scenarios (each file's ``augment``,
   and with ``augment_prime`` applied where a file sets one), on a batch of its data set's image
   shape: milliseconds per batch (the fastest of several calls) and images/s, labelled by the first
   file that uses it. It runs on a CPU as well.

``--parts`` picks among them (default: all, ``repeat`` first).

Run: ``python -m analysis.gpu_benchmark --out gpu.json`` (``--smoke`` shrinks every size, for a CPU
check that the script runs).
"""
from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from analysis.run_diff import diff_runs, logged_values
from methods.losses.nt_xent import nt_xent
from simulator.augment import AugmentConfig, BatchAugment, to_float
from simulator.data.datasets import image_shape, load_dataset
from simulator.models import build_encoder, mlp
from simulator.resources import cuda_determinism, nondeterministic_op
from simulator.runlog import atomic_write
from simulator.scenario import load_scenario

# (label, shipped scenario, its own overrides); ResNet-18 on synthetic_cifar10 is set for all below
METHOD_RUNS = [
    ("fedavg simclr", "scenarios/quickstart.yaml", []),
    ("fedavg byol", "scenarios/fedavg/byol.yaml", []),
    ("fedavg simsiam", "scenarios/fedavg/simsiam.yaml", []),
    # the scenario sets the FedSC reference's clip (mu = 4) itself since its CPU recipe; unclipped,
    # the spectral loss reached inf on a ResNet-18 in the first round (results/gpu.md)
    ("fedavg spectral", "scenarios/fedavg/spectral.yaml", []),
    ("fedavg supervised", "scenarios/fedavg/supervised.yaml", []),
    ("fedu (byol)", "scenarios/fedavg/fedu.yaml", []),
    ("fedema (byol)", "scenarios/fedavg/fedema.yaml", []),
    ("fedsc", "scenarios/fedsc/cifar10_paper.yaml", []),
    ("fedsc dp eps 8", "scenarios/fedsc/fmnist_partial_dp_eps8.yaml", []),
    ("orchestra", "scenarios/orchestra/cifar10_resnet18.yaml", []),
    ("rotpred", "scenarios/orchestra/rotpred.yaml", []),
    ("hetero-ssfl (resnet18 + resnet34 tiers)", "scenarios/hetero/cifar10_5c5.yaml", ["ray.worker_pools=[]", "method.rad_size=500",
                                                                          "eval.test_subset=500"]),
    ("uv simclr (label skew)", "scenarios/uv/cifar10_label_skew_federated_simclr.yaml", []),
    ("local simclr (uv's baseline)", "scenarios/uv/cifar10_label_skew_local_simclr.yaml", []),
    ("uv simclr semi 10%", "scenarios/uv/cifar10_label_skew_federated_simclr_semi10.yaml", []),
]


def common_overrides(device: torch.device, smoke: bool) -> list[str]:
    clients = 4 if smoke else 10
    return ["executor=in_process", "eval.enabled=false", "training.rounds=3", "training.local_epochs=1",
            f"training.batch_size={16 if smoke else 128}", "partition.kind=iid",
            f"population.num_clients={clients}", f"population.clients_per_round={2 if smoke else 4}",
            "population.dropout=0.0", "ray.num_workers=1", "ray.worker.num_cpus=1",
            f"ray.worker.num_gpus={1 if device.type == 'cuda' else 0}", "output.checkpoint_every=1000"]


def federation_rate(path: str, overrides: list[str], device: torch.device) -> dict[str, Any]:
    """Steady images/s (and seconds per round) of a scenario run in-process."""
    from simulator.run import run_scenario
    scenario = load_scenario(path, overrides)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as out:
        _, summary = run_scenario(scenario, str(Path(out) / "run"), progress=False)
    result = {"images_per_second": summary["steady_samples_per_second"],
              "seconds_per_round": summary["steady_seconds_per_round"]}
    if device.type == "cuda":
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return result


def repeat_check(path: str, overrides: list[str], device: torch.device) -> dict[str, Any]:
    """Run ``path`` twice in this process: the first run's images/s and peak memory, how many logged
    values of the second differ (time and memory aside), the first that does and by how much at
    most, and the distinct warnings of ops without a deterministic CUDA kernel."""
    from simulator.run import run_scenario
    logged, rates = [], []
    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for attempt in range(2):
            run_dir, summary = run_scenario(load_scenario(path, overrides), str(Path(out) / f"run{attempt}"),
                                            progress=False)
            logged.append(logged_values(run_dir))
            rates.append(summary["steady_samples_per_second"])
    first, second = logged
    compared = diff_runs(first, second)
    differing = compared.differing
    result = {"scenario": path, "images_per_second": rates[0], "values": len(first),
              "values_differing": len(differing), "values_missing": len(compared.missing),
              "first_differing": list(differing[0][0]) if differing else None,
              "max_abs_difference": max((abs(a - b) for _, a, b in differing), default=0.0),
              "second_images_per_second": rates[1], "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
              "nondeterministic_ops": sorted({op for w in caught if (op := nondeterministic_op(str(w.message)))})}
    if device.type == "cuda":
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return result


def engines_agree(overrides: list[str], device: torch.device) -> list[dict[str, Any]]:
    """The quickstart with ``overrides`` through the Ray engine (two workers sharing the device, the
    same again, one worker) and in-process: each run's numerics, images/s, and how many logged values
    differ from the first run's (with the switches on, none should)."""
    from simulator.run import run_scenario
    share = 1 if device.type == "cuda" else 0
    runs = [("ray, 2 workers x 0.5 device", ["executor=ray", "ray.num_workers=2", f"ray.worker.num_gpus={share / 2}"]),
            ("ray, 2 workers x 0.5 device, again", ["executor=ray", "ray.num_workers=2",
                                                    f"ray.worker.num_gpus={share / 2}"]),
            ("ray, 1 worker x 1 device", ["executor=ray", "ray.num_workers=1", f"ray.worker.num_gpus={share}"]),
            ("in-process, 1 device", ["executor=in_process", "ray.num_workers=1", f"ray.worker.num_gpus={share}"])]
    rows, first = [], None
    with tempfile.TemporaryDirectory() as out:
        for i, (label, own) in enumerate(runs):
            run_dir, summary = run_scenario(load_scenario("scenarios/quickstart.yaml", [*overrides, *own]),
                                            str(Path(out) / f"run{i}"), progress=False)
            logged = logged_values(run_dir)
            first = first if first is not None else logged
            compared = diff_runs(first, logged)
            differing = compared.differing
            rows.append({"run": label, "numerics": summary["numerics"],
                         "images_per_second": summary["steady_samples_per_second"], "values": len(logged),
                         "values_differing_from_first": len(differing),
                         "values_missing_from_first_or_this": len(compared.missing),
                         "first_differing": list(differing[0][0]) if differing else None})
            print(rows[-1], flush=True)
    return rows


def method_rates(device: torch.device, smoke: bool, switches: list[str]) -> list[dict[str, Any]]:
    rows = []
    for label, path, own in METHOD_RUNS:
        overrides = [*common_overrides(device, smoke), "dataset.name=synthetic_cifar10", *own, *switches]
        if "hetero" not in path:
            overrides.append("model.encoder=resnet18")
        if smoke:
            overrides.append("dataset.train_subset=200")
        try:
            rows.append({"method": label, **repeat_check(path, overrides, device)})
        except Exception as error:  # one broken method must not hide the others' figures
            rows.append({"method": label, "scenario": path, "error": f"{type(error).__name__}: {error}"})
        print(rows[-1], flush=True)
    return rows


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def plain_simclr_rate(device: torch.device, dataset: str, encoder: str, batch: int, steps: int) -> float:
    """Images/s of SimCLR in a plain loop: no workspace restore, no upload, no server."""
    data = load_dataset(dataset)
    images = to_float(data.train_x).to(device)
    torch.manual_seed(0)
    backbone = build_encoder(encoder, images.shape[1], images.shape[2])
    net = nn.Sequential(backbone, mlp(backbone.out_dim, 512, 128)).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    augment, generator = BatchAugment(AugmentConfig()), torch.Generator().manual_seed(0)

    def step(i: int) -> None:
        start = (i * batch) % (len(images) - batch)
        x = images[start:start + batch]
        loss = nt_xent(net(augment(x, generator)), net(augment(x, generator)), 0.2)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for i in range(10):
        step(i)
    synchronize(device)
    began = time.perf_counter()
    for i in range(steps):
        step(i)
    synchronize(device)
    return steps * batch / (time.perf_counter() - began)


def several_clients_rates(device: torch.device, clients: int, batch: int, steps: int) -> dict[str, float]:
    """K small-CNN clients' SimCLR steps (plain SGD), one after another and all at once with vmap."""
    from torch.func import functional_call, grad, stack_module_state, vmap
    torch.manual_seed(0)

    def small_cnn_simclr() -> nn.Module:
        backbone = build_encoder("small_cnn", 1, 28)
        return nn.Sequential(backbone, mlp(backbone.out_dim, 512, 128)).to(device)

    models = [small_cnn_simclr() for _ in range(clients)]
    views = torch.rand(2, clients, batch, 1, 28, 28, device=device)
    lr = 0.05

    def loop_step() -> None:
        for k, model in enumerate(models):
            loss = nt_xent(model(views[0, k]), model(views[1, k]), 0.2)
            grads = torch.autograd.grad(loss, list(model.parameters()))
            with torch.no_grad():
                for p, g in zip(model.parameters(), grads):
                    p.sub_(lr * g)

    params, buffers = stack_module_state(models)
    skeleton = copy.deepcopy(models[0]).to("meta")

    def client_loss(p, b, x1, x2):
        return nt_xent(functional_call(skeleton, (p, b), (x1,)), functional_call(skeleton, (p, b), (x2,)), 0.2)

    stacked_grad = vmap(grad(client_loss))

    def vmap_step() -> None:
        grads = stacked_grad(params, buffers, views[0], views[1])
        with torch.no_grad():
            for name, g in grads.items():
                params[name].sub_(lr * g)

    rates = {}
    for name, step in (("loop", loop_step), ("vmap", vmap_step)):
        for _ in range(2):
            step()
        synchronize(device)
        began = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize(device)
        rates[f"{name}_images_per_second"] = steps * clients * batch / (time.perf_counter() - began)
    rates["vmap_over_loop"] = rates["vmap_images_per_second"] / rates["loop_images_per_second"]
    # the same steps from the same start on the same inputs: the two must end at the same weights
    looped = stack_module_state(models)[0]
    difference = max((looped[name] - params[name]).abs().max().item() for name in params)
    return {"clients": clients, "batch": batch, **rates, "max_weight_difference": difference}


def shipped_augmentations() -> list[tuple[str, str, dict[str, Any], tuple[int, int, int]]]:
    """(first file, view, augment section, image shape) for each distinct augmentation of the
    shipped scenarios: a file's first view T (``augment``) and, where it sets ``augment_prime``, T'."""
    seen: dict[str, tuple[str, str, dict[str, Any], tuple[int, int, int]]] = {}
    for path in sorted(Path("scenarios").rglob("*.yaml")):
        scenario = load_scenario(path)
        shape = image_shape(scenario["dataset"]["name"])
        views = [("T", scenario["augment"])]
        if scenario["augment_prime"]:
            views.append(("T'", {**scenario["augment"], **scenario["augment_prime"]}))
        for view, section in views:
            seen.setdefault(json.dumps([section, shape], sort_keys=True), (str(path), view, section, shape))
    return list(seen.values())


def augmentation_costs(device: torch.device, batch: int, calls: int) -> list[dict[str, Any]]:
    """:func:`shipped_augmentations` each timed on ``batch`` random images on ``device``: the
    fastest of ``calls`` calls (after one untimed)."""
    rows = []
    for path, view, section, shape in shipped_augmentations():
        augment = BatchAugment(AugmentConfig.from_scenario(section))
        images = to_float(torch.randint(0, 256, (batch, *shape), dtype=torch.uint8,
                                        generator=torch.Generator().manual_seed(0)).to(device))
        generator = torch.Generator().manual_seed(1)
        seconds = []
        for _ in range(calls + 1):
            synchronize(device)
            start = time.perf_counter()
            augment(images, generator)
            synchronize(device)
            seconds.append(time.perf_counter() - start)
        fastest = min(seconds[1:])
        rows.append({"scenario": path, "view": view, "image_shape": list(shape), "batch": batch,
                     "ms_per_batch": round(fastest * 1e3, 3), "images_per_second": round(batch / fastest, 1)})
    return rows


def torch_defaults(device: torch.device) -> None:
    if device.type == "cuda":
        cuda_determinism(False)


PARTS = ("repeat", "plain", "several_clients", "methods", "engines", "augmentation")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_benchmark.json")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check on a CPU that it runs")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="which measurements")
    parser.add_argument("--cuda-deterministic", choices=("true", "false"),
                        help="the methods part with ray.cuda_deterministic set so (default: as each scenario ships)")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    steps = 3 if args.smoke else 30
    report: dict[str, Any] = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                              "torch": torch.__version__}

    def measured(part: str, value: Any) -> None:
        report[part] = value
        print({part: value}, flush=True)
        # whole after every part: a run killed (or timed out) on the device keeps what it measured
        atomic_write(Path(args.out), lambda path: path.write_text(json.dumps(report, indent=1)))

    if "repeat" in args.parts:
        # the quickstart's shape with a ResNet-18 on CIFAR-10-shaped data, 3 rounds, switches off and on
        repeated = [*common_overrides(device, args.smoke), "dataset.name=synthetic_cifar10", "model.encoder=resnet18",
                    *(["dataset.train_subset=200"] if args.smoke else [])]
        measured("repeat", [repeat_check("scenarios/quickstart.yaml", [*repeated, f"ray.cuda_deterministic={on}"], device)
                            for on in ("false", "true")])
    # the plain loops are what a researcher would write, under torch's defaults (a run of the
    # federation turns the switches on, as its scenario says, and leaves them so)
    torch_defaults(device)
    if "plain" in args.parts:
        quickstart = [*common_overrides(device, args.smoke), "dataset.name=synthetic", "training.batch_size=64"]
        measured("plain", [
            {"work": f"simclr resnet18, synthetic_cifar10, batch {16 if args.smoke else 128}, plain loop",
             "images_per_second": plain_simclr_rate(device, "synthetic_cifar10", "resnet18", 16 if args.smoke else 128, steps)},
            {"work": "simclr small_cnn, synthetic (28x28x1), batch 64, plain loop",
             "images_per_second": plain_simclr_rate(device, "synthetic", "small_cnn", 64, steps)},
            {"work": "quickstart (fedavg simclr small_cnn) on synthetic, in-process federation, batch 64",
             **federation_rate("scenarios/quickstart.yaml", quickstart, device)},
        ])
        torch_defaults(device)
    if "several_clients" in args.parts:
        measured("several_clients", [several_clients_rates(device, k, 64, steps) for k in ((2,) if args.smoke else (4, 10, 32))])
    if "methods" in args.parts:
        switches = [f"ray.cuda_deterministic={args.cuda_deterministic}"] if args.cuda_deterministic else []
        measured("methods", method_rates(device, args.smoke, switches))
    if "engines" in args.parts:
        engines = [*common_overrides(device, args.smoke), "dataset.name=synthetic_cifar10", "model.encoder=resnet18",
                   "ray.cuda_deterministic=true", *(["dataset.train_subset=200"] if args.smoke else [])]
        try:
            measured("engines", engines_agree(engines, device))
        except ImportError as error:  # no Ray on this machine
            measured("engines", {"error": f"{type(error).__name__}: {error}"})
    if "augmentation" in args.parts:
        measured("augmentation", augmentation_costs(device, 16 if args.smoke else 256, 2 if args.smoke else 50))


if __name__ == "__main__":
    main()
