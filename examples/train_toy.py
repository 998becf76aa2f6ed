"""A toy "training" run you can submit as it is: no GPU framework needed.

    schedulearn submit --gpus 1 -- python examples/train_toy.py --epochs 5

It fits y = 3x + 1 by gradient descent, prints one line per epoch, and
shows what Schedulearn gives a job: the GPUs it may use
(CUDA_VISIBLE_DEVICES), its id, and a checkpoint directory. With a
checkpoint directory it saves after every epoch and resumes from the
last checkpoint, so a preempted or requeued run continues where it was.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seconds-per-epoch", type=float, default=0.5)
    args = parser.parse_args()

    job = os.environ.get("SCHEDULEARN_JOB_ID", "(not under schedulearn)")
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    print(f"job {job}: GPUs [{gpus}] ({os.environ.get('SCHEDULEARN_NUM_GPUS', '0')})", flush=True)

    ckpt_dir = os.environ.get("SCHEDULEARN_CHECKPOINT_DIR")
    ckpt = Path(ckpt_dir) / "toy.json" if ckpt_dir else None
    w, b, start = 0.0, 0.0, 0
    if ckpt is not None and ckpt.exists():
        state = json.loads(ckpt.read_text())
        w, b, start = state["w"], state["b"], state["epoch"]
        print(f"resumed from {ckpt} at epoch {start}", flush=True)

    rng = random.Random(0)
    data = [(x, 3 * x + 1 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(256))]
    for epoch in range(start, args.epochs):
        for x, y in data:
            err = (w * x + b) - y
            w -= args.lr * err * x
            b -= args.lr * err
        loss = sum(((w * x + b) - y) ** 2 for x, y in data) / len(data)
        print(f"epoch {epoch + 1}/{args.epochs} loss={loss:.4f} w={w:.3f} b={b:.3f}", flush=True)
        if ckpt is not None:
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            ckpt.write_text(json.dumps({"w": w, "b": b, "epoch": epoch + 1}))
        time.sleep(args.seconds_per_epoch)
    print("done", flush=True)


if __name__ == "__main__":
    main()
