"""Train a small PyTorch MLP on scikit-learn's digits, on the CPU, alone or under torchrun.

    schedulearn submit -f examples/torch.yaml            # launcher torchrun, 2 GPUs
    torchrun --standalone --nproc_per_node 2 examples/train_torch.py --epochs 10

The same recipe as examples/train_digits.py, in PyTorch: resume from the
last checkpoint in `checkpoint_dir()`, save and exit with 143 when
`should_stop()` turns True (the scheduler's SIGTERM), `report()` loss and
accuracy per epoch, and the linear scaling rule for the world size
(`world_size()`: torchrun's processes). Under torchrun each process trains
on its share of every global batch and DistributedDataParallel averages
the gradients over the gloo backend, so the world trains as one model; the
processes agree at every step on whether to stop, because SIGTERM reaches
them at slightly different moments. Rank 0 alone writes checkpoints and
reports.

Deterministic: fixed seeds, `torch.use_deterministic_algorithms`, one
thread per process, and a data order drawn from a generator whose state is
checkpointed; a preempted run ends with the weights of an uninterrupted run
of the same world size ("final weights sha256 ..." on the last line).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.util
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from schedulearn import runtime

CHECKPOINT = "digits-torch.pt"
STOPPED_EXIT_CODE = 143  # 128 + SIGTERM: saved and stopped, not finished


def digits_tensors(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's digits from the file in the package, split 80/20 by a seeded permutation."""
    spec = importlib.util.find_spec("sklearn")
    roots = list(spec.submodule_search_locations or []) if spec else []
    files = [Path(r) / "datasets" / "data" / "digits.csv.gz" for r in roots]
    found = [f for f in files if f.is_file()]
    if not found:
        sys.exit("this example reads scikit-learn's digits: pip install scikit-learn")
    table = np.loadtxt(found[0], delimiter=",")
    x = torch.tensor(table[:, :64] / 16.0, dtype=torch.float32)
    y = torch.tensor(table[:, 64], dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    train, test = order[:cut], order[cut:]
    return x[train], y[train], x[test], y[test]


def make_model(seed: int, hidden: int) -> nn.Module:
    torch.manual_seed(seed + 1)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def digest(model: nn.Module) -> str:
    """sha256 of the weights' bytes in state_dict order: equal digests, equal weights."""
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def save(state: dict[str, Any]) -> None:
    """Rank 0 writes to a temporary name, then renames: a checkpoint is whole or absent."""
    if not runtime.is_main_process():
        return
    target = runtime.checkpoint_dir() / CHECKPOINT
    tmp = target.with_name(f".{CHECKPOINT}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, target)


def load() -> dict[str, Any] | None:
    path = runtime.checkpoint_dir() / CHECKPOINT
    if not path.exists():
        return None
    loaded: dict[str, Any] = torch.load(path, weights_only=False)  # our own file
    return loaded


def agree_to_stop(distributed: bool) -> bool:
    """True when any process was told to stop: all of them stop at the same step."""
    flag = torch.tensor([1 if runtime.should_stop() else 0])
    if distributed:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def train(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    world = runtime.world_size()
    # torchrun starts one process per GPU and sets RANK and MASTER_ADDR; run
    # any other way, this one process does the work of the whole world.
    distributed = world > 1 and "RANK" in os.environ and "MASTER_ADDR" in os.environ
    run = _train_adaptive if args.adaptive else _train
    if not distributed:
        return run(args, world, distributed)
    dist.init_process_group("gloo")
    try:
        return run(args, world, distributed)
    finally:
        # `_train` has returned, so its DDP wrapper is freed (gc for cycles) while
        # the group is still registered; destroyed from inside DDP's destructor
        # instead, with the GIL held, the group waits on gloo's worker thread,
        # which waits for the GIL, and the process hangs (torch 2.13).
        gc.collect()
        dist.destroy_process_group()


def _train(args: argparse.Namespace, world: int, distributed: bool) -> int:
    procs, me = (dist.get_world_size(), dist.get_rank()) if distributed else (1, 0)
    x_train, y_train, x_test, y_test = digits_tensors(args.seed)
    model = make_model(args.seed, args.hidden)
    scaled = runtime.scale_for_world(args.batch_size, args.lr, world=world)
    optimizer = torch.optim.SGD(model.parameters(), lr=scaled.learning_rate, momentum=0.9)
    shuffle = torch.Generator().manual_seed(args.seed + 2)
    state = load()
    epoch, offset, step = 0, 0, 0
    if state is None:
        if runtime.is_main_process():
            print(f"starting fresh: {args.epochs} epochs, seed {args.seed}", flush=True)
    else:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:
            group["lr"] = scaled.learning_rate  # the rule for today's world, not the saved one
        shuffle.set_state(state["shuffle"])
        torch.set_rng_state(state["torch_rng"])
        epoch, offset, step = state["epoch"], state["offset"], state["step"]
        if runtime.is_main_process():
            print(
                f"resumed from epoch {epoch} (step {step}, {offset} samples into the epoch)",
                flush=True,
            )
    if runtime.is_main_process():
        print(f"checkpoint directory {runtime.checkpoint_dir().resolve()}", flush=True)
        print(
            f"world size {world}: global batch {scaled.global_batch_size} "
            f"({scaled.per_worker_batch_size} per worker), learning rate {scaled.learning_rate:g}",
            flush=True,
        )
    net: nn.Module = nn.parallel.DistributedDataParallel(model) if distributed else model
    loss_fn = nn.CrossEntropyLoss()
    n_train = len(x_train)
    loss_sum, batches = 0.0, 0

    def checkpoint_state(epoch_start_shuffle: torch.Tensor) -> dict[str, Any]:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "shuffle": epoch_start_shuffle,
            "torch_rng": torch.get_rng_state(),
            "epoch": epoch,
            "offset": offset,
            "step": step,
        }

    while epoch < args.epochs:
        epoch_start_shuffle = shuffle.get_state()  # a mid-epoch resume redraws this order
        order = torch.randperm(n_train, generator=shuffle)
        started, samples = time.perf_counter(), 0
        net.train()
        while offset < n_train:
            batch = order[offset : offset + scaled.global_batch_size]
            if len(batch) < procs:
                break  # a tail too short to give every process a sample is dropped
            mine = batch[me::procs]  # this process's share of the global batch
            optimizer.zero_grad()
            share_loss = loss_fn(net(x_train[mine]), y_train[mine])
            # Weighted by the share's size: DDP's average over the processes
            # then gives each one the gradient of the mean over the whole batch.
            (share_loss * (len(mine) * procs / len(batch))).backward()
            optimizer.step()
            offset += len(batch)
            step += 1
            loss_sum += share_loss.item()
            batches += 1
            samples += len(batch)
            if args.sleep_per_step > 0:
                time.sleep(args.sleep_per_step)
            if agree_to_stop(distributed):
                save(checkpoint_state(epoch_start_shuffle))
                if runtime.is_main_process():
                    print(f"stop requested: saved epoch {epoch} step {step}; exiting", flush=True)
                return STOPPED_EXIT_CODE
        epoch, offset = epoch + 1, 0
        model.eval()
        with torch.no_grad():
            accuracy = float((model(x_test).argmax(dim=1) == y_test).float().mean())
        mean_loss = loss_sum / max(1, batches)
        loss_sum, batches = 0.0, 0
        save(checkpoint_state(shuffle.get_state()))
        rate = samples / max(1e-9, time.perf_counter() - started)
        runtime.report(
            step=step,
            epoch=epoch,
            total_epochs=args.epochs,
            loss=mean_loss,
            accuracy=accuracy,
            samples_per_sec=rate,
        )
        if runtime.is_main_process():
            print(
                f"epoch {epoch}/{args.epochs} loss={mean_loss:.4f} accuracy={accuracy:.4f} "
                f"step={step} samples/s={rate:.0f}",
                flush=True,
            )
    finish(model, x_test, y_test)
    return 0


def finish(model: nn.Module, x_test: torch.Tensor, y_test: torch.Tensor) -> None:
    """The last lines: the held-out loss and accuracy, and the weights' digest."""
    if not runtime.is_main_process():
        return
    model.eval()
    with torch.no_grad():
        out = model(x_test)
        loss = float(nn.functional.cross_entropy(out, y_test))
        accuracy = float((out.argmax(dim=1) == y_test).float().mean())
    print(f"final test loss {loss:.4f} accuracy {accuracy:.4f}", flush=True)
    print(f"final weights sha256 {digest(model)}", flush=True)


def held_out(model: nn.Module, x_test: torch.Tensor, y_test: torch.Tensor) -> tuple[float, float]:
    """Loss and accuracy on the held-out fifth of the data."""
    model.eval()
    with torch.no_grad():
        out = model(x_test)
        loss = float(nn.functional.cross_entropy(out, y_test))
        accuracy = float((out.argmax(dim=1) == y_test).float().mean())
    return loss, accuracy


def decayed(progress: float, target: float, schedule: str) -> float:
    """The schedule's factor on the learning rate at `progress` of `target` (steps at
    the initial batch, AdaScale's scale-invariant clock): 1 throughout for `constant`,
    from 1 down to 0 at the target along half a cosine for `cosine`."""
    if schedule == "constant" or target <= 0:
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress / target)))


def flat_grad(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])


def _pieces(batch: torch.Tensor, shares: int, mine: range, micro: int) -> list[torch.Tensor]:
    """The pieces this process computes: its shares of the global batch, each cut
    into `micro` micro-batches (accumulation steps)."""
    return [part for k in mine for part in batch[k::shares].tensor_split(micro) if len(part)]


def _train_adaptive(args: argparse.Namespace, world: int, distributed: bool) -> int:
    """Training whose batch size and learning rate follow the allocation (`--adaptive`).

    `runtime.AdaptiveBatch` chooses, for the world of this run, the total
    batch, the local batch and the accumulation steps (from the step times
    and the gradient noise measured so far, kept in the checkpoint), and
    the learning-rate scale (AdaScale's gain); the run ends when the
    progress, counted in steps at the initial batch, reaches what
    `--epochs` epochs at `--batch-size` would make. Each step computes one
    gradient per piece (a process's micro-batch; alone, this process plays
    every worker of the world in turn), averages them by hand (an
    all-reduce under torchrun, timed as the synchronisation) and reports
    the pieces' squared norms for the gradient noise estimate. With
    `--schedule cosine` the rate also decays over the progress, so a run
    ends near the same loss whatever batches it chose. The batch size and
    rate chosen go out as metrics with every report (`batch_size`,
    `learning_rate`), as does each epoch's held-out loss (`test_loss`).
    """
    procs, me = (dist.get_world_size(), dist.get_rank()) if distributed else (1, 0)
    x_train, y_train, x_test, y_test = digits_tensors(args.seed)
    n_train = len(x_train)
    model = make_model(args.seed, args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    shuffle = torch.Generator().manual_seed(args.seed + 2)
    state = load()
    epoch, offset, step = 0, 0, 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        shuffle.set_state(state["shuffle"])
        torch.set_rng_state(state["torch_rng"])
        epoch, offset, step = state["epoch"], state["offset"], state["step"]
    batch = runtime.AdaptiveBatch(
        args.batch_size,
        max_batch=max(args.max_batch, args.batch_size),
        max_local_batch=args.max_local_batch,
        target=args.epochs * math.ceil(n_train / args.batch_size),
        state=state.get("adaptive") if state else None,
    )
    target = batch.target or 0.0
    main = runtime.is_main_process()

    def say(text: str) -> None:
        if main:
            print(text, flush=True)

    if state is None:
        say(f"starting fresh: {batch.target:g} steps at batch {args.batch_size}, seed {args.seed}")
    else:
        say(f"resumed from epoch {epoch} (step {step}, {offset} samples into the epoch)")
    say(f"checkpoint directory {runtime.checkpoint_dir().resolve()}")

    def configuration() -> str:
        return (
            f"world size {world}: batch size {batch.batch_size} ({batch.local_batch} per GPU, "
            f"{batch.accum_steps} accumulation steps), learning rate "
            f"{args.lr * batch.lr_scale:.6g} (scale {batch.lr_scale:.4g})"
        )

    def configured() -> dict[str, float]:
        # The configuration as metrics too (`schedulearn show`, the API's progress
        # history), not only in the log: the batch size and the rate it implies
        # (the base rate times AdaScale's scale; the schedule's factor is apart).
        return {"batch_size": batch.batch_size, "learning_rate": args.lr * batch.lr_scale}

    say(configuration())
    batch.report(step=step, epoch=epoch, **configured())
    params = list(model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    loss_sum, batches = 0.0, 0

    def checkpoint_state(epoch_start_shuffle: torch.Tensor) -> dict[str, Any]:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "shuffle": epoch_start_shuffle,
            "torch_rng": torch.get_rng_state(),
            "epoch": epoch,
            "offset": offset,
            "step": step,
            "adaptive": batch.state_dict(),
        }

    while not batch.done:
        epoch_start_shuffle = shuffle.get_state()
        order = torch.randperm(n_train, generator=shuffle)
        started, samples = time.perf_counter(), 0
        model.train()
        while offset < n_train and not batch.done:
            began = time.perf_counter()
            chosen = order[offset : offset + batch.batch_size]
            if len(chosen) < procs:
                offset = n_train  # a tail too short to give every process a sample
                break
            # Alone, this process computes every worker's share in turn.
            if distributed:
                pieces = _pieces(chosen, procs, range(me, me + 1), batch.accum_steps + 1)
            else:
                pieces = _pieces(chosen, world, range(world), batch.accum_steps + 1)
            total = torch.zeros(sum(p.numel() for p in params))
            piece_sqr, piece_loss = 0.0, 0.0
            for piece in pieces:
                optimizer.zero_grad()
                loss = loss_fn(model(x_train[piece]), y_train[piece])
                loss.backward()
                g = flat_grad(model)
                piece_sqr += float(g.dot(g))
                total += g * len(piece)
                piece_loss += float(loss.detach()) * len(piece)
            synced = time.perf_counter()
            counts = torch.tensor([piece_sqr, float(len(pieces)), piece_loss])
            if distributed:
                dist.all_reduce(total)
                dist.all_reduce(counts)
            sync_time = time.perf_counter() - synced
            piece_sqr, n_pieces, piece_loss = (float(v) for v in counts)
            mean = total / len(chosen)
            at = 0
            for p in params:
                p.grad = mean[at : at + p.numel()].view_as(p).clone()
                at += p.numel()
            rate_now = args.lr * batch.lr_scale * decayed(batch.progress, target, args.schedule)
            for group in optimizer.param_groups:
                group["lr"] = rate_now
            optimizer.step()
            # A simulated accelerator: a fixed cost per step, and per sample of one
            # worker's share (the workers run side by side).
            device = args.sleep_per_step + args.sleep_per_sample * len(chosen) / world
            if device > 0:
                time.sleep(device)
            times = torch.tensor([time.perf_counter() - began, sync_time], dtype=torch.float64)
            if distributed:
                # The step took as long as its slowest worker; and every process must
                # record the same figures, so that all of them choose the same batch.
                dist.all_reduce(times, op=dist.ReduceOp.MAX)
            batch.record_step(
                float(times[0]),
                sync_time=float(times[1]),
                piece_sqr=piece_sqr / n_pieces,
                mean_sqr=float(mean.dot(mean)),
                piece_batch=len(chosen) / n_pieces,
                pieces=int(n_pieces),
            )
            offset += len(chosen)
            step += 1
            loss_sum += piece_loss / len(chosen)
            batches += 1
            samples += len(chosen)
            if agree_to_stop(distributed):
                save(checkpoint_state(epoch_start_shuffle))
                say(f"stop requested: saved epoch {epoch} step {step}; exiting")
                return STOPPED_EXIT_CODE
        if offset >= n_train:
            epoch, offset = epoch + 1, 0
        test_loss, accuracy = held_out(model, x_test, y_test)
        mean_loss = loss_sum / max(1, batches)
        loss_sum, batches = 0.0, 0
        rate = samples / max(1e-9, time.perf_counter() - started)
        batch.report(
            step=step,
            epoch=epoch,
            loss=mean_loss,
            accuracy=accuracy,
            samples_per_sec=rate,
            test_loss=test_loss,
            **configured(),
        )
        say(
            f"epoch {epoch} loss={mean_loss:.4f} accuracy={accuracy:.4f} step={step} "
            f"progress={batch.progress:.0f}/{batch.target:g} samples/s={rate:.0f} "
            f"test_loss={test_loss:.4f}"
        )
        if not batch.done and batch.adapt():
            say(configuration())
            batch.report(step=step, epoch=epoch, **configured())
        save(checkpoint_state(shuffle.get_state()))
    finish(model, x_test, y_test)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=10, help="epochs in all [10]")
    parser.add_argument("--seed", type=int, default=0, help="seed of data split, init, order [0]")
    parser.add_argument("--batch-size", type=int, default=16, help="batch per worker [16]")
    parser.add_argument("--lr", type=float, default=0.02, help="learning rate, world size 1")
    parser.add_argument("--hidden", type=int, default=32, help="hidden units [32]")
    parser.add_argument(
        "--sleep-per-step",
        type=float,
        default=0.0,
        help="seconds to sleep after each step, to stretch a demo or a test [0]",
    )
    adaptive = parser.add_argument_group(
        "adaptive batch (--adaptive: batch size and learning rate follow the allocation)"
    )
    adaptive.add_argument(
        "--adaptive",
        action="store_true",
        help="runtime.AdaptiveBatch: --batch-size is then the initial total batch",
    )
    adaptive.add_argument("--max-batch", type=int, default=256, help="largest total batch [256]")
    adaptive.add_argument(
        "--max-local-batch",
        type=int,
        default=64,
        help="largest batch one GPU computes at once; more is accumulated [64]",
    )
    adaptive.add_argument(
        "--schedule",
        choices=("constant", "cosine"),
        default="constant",
        help="learning-rate schedule over the progress towards the target: constant, or "
        "a cosine decay to 0 at the target (the same whatever batches the run chose) [constant]",
    )
    adaptive.add_argument(
        "--sleep-per-sample",
        type=float,
        default=0.0,
        help="seconds per sample of one worker's share: a simulated accelerator [0]",
    )
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.hidden < 1:
        parser.error("--epochs, --batch-size and --hidden must be 1 or more")
    return args


if __name__ == "__main__":
    sys.exit(train(parse_args()))
