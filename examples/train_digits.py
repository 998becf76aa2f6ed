"""Train a small NumPy MLP on scikit-learn's digits, the way Schedulearn likes a job to train.

    schedulearn submit -f examples/digits.yaml
    schedulearn submit --gpus 1 -- python examples/train_digits.py --epochs 20

What it shows of the runtime library (`schedulearn.runtime`):

- resume: it starts from the last checkpoint in `checkpoint_dir()` when
  there is one, and prints "resumed from epoch N (step S)";
- preemption: it polls `should_stop()` at every step boundary; when the
  scheduler asks it to stop (SIGTERM) it saves a checkpoint and exits with
  code 143 (128 + SIGTERM: stopped, not finished) inside the grace period;
- progress: `report()` sends epoch, step, loss, accuracy and samples/s
  after every epoch, shown by `schedulearn show ID` and the job's page;
- elastic resizing: the world size (`world_size()`, the job's GPUs) sets
  the global batch and the learning rate by the linear scaling rule, and
  the script prints both whenever it starts or resumes.

Training is deterministic: a fixed seed, a fixed data order drawn from a
generator whose state is checkpointed, single-threaded BLAS, and a resume
that replays the interrupted epoch from the same sample. So a run that was
preempted any number of times ends with exactly the weights of a run that
never was, as long as its world size stayed the same; the last line,
"final weights sha256 ...", lets a test compare the two.
"""

from __future__ import annotations

import os

# One BLAS thread: a multi-threaded matrix product may sum in a different
# order from run to run, and this script promises bit-identical weights.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import importlib.util  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from schedulearn import runtime  # noqa: E402

CHECKPOINT = "digits.pkl"
STOPPED_EXIT_CODE = 143  # 128 + SIGTERM: saved and stopped, not finished


@dataclass
class Data:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def digits_table() -> np.ndarray:
    """scikit-learn's digits: 1,797 rows of 64 pixels (0..16) and the digit.

    Read straight from the file inside the installed package: importing
    `sklearn.datasets` costs seconds, which every resume would pay again.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("this example reads scikit-learn's digits: pip install scikit-learn")
    for root in spec.submodule_search_locations:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return np.loadtxt(path, delimiter=",")
    from sklearn.datasets import load_digits  # a layout we do not know: the slow way

    digits = load_digits()
    return np.column_stack([digits.data, digits.target])


def load_data(seed: int) -> Data:
    """The digits, pixels scaled to [0, 1], split 80/20 by a seeded permutation."""
    table = digits_table()
    x = table[:, :64].astype(np.float64) / 16.0
    y = table[:, 64].astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    train, test = order[:cut], order[cut:]
    return Data(x[train], y[train], x[test], y[test])


def init_params(seed: int, hidden: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    return {
        "w1": rng.normal(0.0, np.sqrt(2.0 / 64), size=(64, hidden)),
        "b1": np.zeros(hidden),
        "w2": rng.normal(0.0, np.sqrt(2.0 / hidden), size=(hidden, 10)),
        "b2": np.zeros(10),
    }


def forward(params: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hidden = np.maximum(x @ params["w1"] + params["b1"], 0.0)
    logits = hidden @ params["w2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    return hidden, probs


def loss_and_grads(
    params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray
) -> tuple[float, dict[str, np.ndarray]]:
    """Mean cross-entropy of the batch and its gradients (plain backpropagation)."""
    hidden, probs = forward(params, x)
    n = len(x)
    loss = float(-np.log(probs[np.arange(n), y] + 1e-12).mean())
    d_logits = probs.copy()
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    d_hidden = (d_logits @ params["w2"].T) * (hidden > 0)
    grads = {
        "w2": hidden.T @ d_logits,
        "b2": d_logits.sum(axis=0),
        "w1": x.T @ d_hidden,
        "b1": d_hidden.sum(axis=0),
    }
    return loss, grads


def accuracy(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    _, probs = forward(params, x)
    return float((probs.argmax(axis=1) == y).mean())


def digest(params: dict[str, np.ndarray]) -> str:
    """sha256 of the weights' bytes, in a fixed order: equal digests, equal weights."""
    h = hashlib.sha256()
    for name in sorted(params):
        h.update(name.encode())
        h.update(np.ascontiguousarray(params[name], dtype="<f8").tobytes())
    return h.hexdigest()


def fresh_state(args: argparse.Namespace) -> dict[str, Any]:
    params = init_params(args.seed, args.hidden)
    return {
        "params": params,
        "velocity": {k: np.zeros_like(v) for k, v in params.items()},
        "epoch": 0,  # epochs finished
        "offset": 0,  # samples of the current epoch already trained on
        "step": 0,  # optimizer steps taken in all
        "rng": np.random.default_rng(args.seed + 2).bit_generator.state,
        "epoch_loss_sum": 0.0,
        "epoch_batches": 0,
    }


def save(state: dict[str, Any]) -> None:
    runtime.save_checkpoint(state, name=CHECKPOINT)  # atomic: temp file, fsync, rename


def train(args: argparse.Namespace) -> int:
    data = load_data(args.seed)
    state = runtime.load_checkpoint(default=None, name=CHECKPOINT)
    if state is None:
        state = fresh_state(args)
        print(f"starting fresh: {args.epochs} epochs, seed {args.seed}", flush=True)
    else:
        print(
            f"resumed from epoch {state['epoch']} (step {state['step']}, "
            f"{state['offset']} samples into the epoch)",
            flush=True,
        )
    print(f"checkpoint directory {runtime.checkpoint_dir().resolve()}", flush=True)
    scaled = runtime.scale_for_world(args.batch_size, args.lr)
    print(
        f"world size {scaled.world_size}: global batch {scaled.global_batch_size} "
        f"({scaled.per_worker_batch_size} per worker), learning rate {scaled.learning_rate:g}",
        flush=True,
    )
    params, velocity = state["params"], state["velocity"]
    n_train = len(data.x_train)

    while state["epoch"] < args.epochs:
        # The epoch's order comes from the generator as it stood when the
        # epoch began; it only advances once the epoch is done, so a resume
        # mid-epoch draws the very same order.
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        order = rng.permutation(n_train)
        started, samples = time.perf_counter(), 0
        while state["offset"] < n_train:
            batch = order[state["offset"] : state["offset"] + scaled.global_batch_size]
            loss, grads = loss_and_grads(params, data.x_train[batch], data.y_train[batch])
            for name, grad in grads.items():
                velocity[name] = args.momentum * velocity[name] - scaled.learning_rate * grad
                params[name] += velocity[name]
            state["offset"] += len(batch)
            state["step"] += 1
            state["epoch_loss_sum"] += loss
            state["epoch_batches"] += 1
            samples += len(batch)
            if args.sleep_per_step > 0:
                time.sleep(args.sleep_per_step)
            if runtime.should_stop():
                save(state)
                print(
                    f"stop requested: saved epoch {state['epoch']} step {state['step']}; "
                    f"exiting with {STOPPED_EXIT_CODE}",
                    flush=True,
                )
                return STOPPED_EXIT_CODE
        mean_loss = state["epoch_loss_sum"] / max(1, state["epoch_batches"])
        acc = accuracy(params, data.x_test, data.y_test)
        elapsed = time.perf_counter() - started
        state.update(epoch=state["epoch"] + 1, offset=0, epoch_loss_sum=0.0, epoch_batches=0)
        state["rng"] = rng.bit_generator.state
        save(state)
        rate = samples / elapsed if elapsed > 0 else 0.0
        runtime.report(
            step=state["step"],
            epoch=state["epoch"],
            total_epochs=args.epochs,
            loss=mean_loss,
            accuracy=acc,
            samples_per_sec=rate,
        )
        print(
            f"epoch {state['epoch']}/{args.epochs} loss={mean_loss:.4f} "
            f"accuracy={acc:.4f} step={state['step']} samples/s={rate:.0f}",
            flush=True,
        )
        if runtime.should_stop() and state["epoch"] < args.epochs:
            print(f"stop requested: saved epoch {state['epoch']}; exiting", flush=True)
            return STOPPED_EXIT_CODE

    print(f"final accuracy {accuracy(params, data.x_test, data.y_test):.4f}", flush=True)
    print(f"final weights sha256 {digest(params)}", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=20, help="epochs in all [20]")
    parser.add_argument("--seed", type=int, default=0, help="seed of data split, init, order [0]")
    parser.add_argument("--batch-size", type=int, default=16, help="batch per worker [16]")
    parser.add_argument("--lr", type=float, default=0.02, help="learning rate, world size 1")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum [0.9]")
    parser.add_argument("--hidden", type=int, default=32, help="hidden units [32]")
    parser.add_argument(
        "--sleep-per-step",
        type=float,
        default=0.0,
        help="seconds to sleep after each step, to stretch a demo or a test [0]",
    )
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.hidden < 1:
        parser.error("--epochs, --batch-size and --hidden must be 1 or more")
    return args


if __name__ == "__main__":
    sys.exit(train(parse_args()))
