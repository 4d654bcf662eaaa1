"""Per-step overhead of the runtime probe on small CPU training loops (a benchmark, not a test).

Each workload is a small training loop written to a temporary file. It runs once plainly
(``python loop.py``) and once under the probe (``run_probe``, no step cap), alternately,
``--repeats`` times. The loop times itself with ``perf_counter`` after ``--warmup`` steps, so
framework import time, model building and the probe's warm-up live-object count are not
included. The table gives the median per-step time of each and the overhead.

    python benchmarks/probe_overhead.py [--steps 300] [--warmup 30] [--repeats 5]
                                        [--only torch,tf_eager,tf_function] [--sample-every 1]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from lintloop.runtime_probe.runner import run_probe

_TIMING = """
import json, statistics, sys, time
def timed(step, steps, warmup):
    for _ in range(warmup):
        step()
    clock = time.perf_counter
    times = []
    t0 = clock()
    for _ in range(steps):
        t = clock()
        step()
        times.append(clock() - t)
    total = clock() - t0
    print("TIMING " + json.dumps({"mean_s": total / steps, "median_s": statistics.median(times)}),
          flush=True)
"""

# The model, data and optimizer both TensorFlow workloads train (eager and tf.function).
_TF_SETUP = """
        import os
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import numpy as np, tensorflow as tf
        tf.keras.utils.set_random_seed(0)
        x = tf.constant(np.random.rand(64, 32).astype("float32"))
        y = tf.constant(np.random.rand(64, 1).astype("float32"))
        model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(128, activation="relu"),
                                     tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(1)])
        opt = tf.keras.optimizers.Adam(1e-3)
        loss_fn = tf.keras.losses.MeanSquaredError()
"""

WORKLOADS = {
    "torch": ("torch", """
        import torch, torch.nn as nn, torch.nn.functional as F
        torch.manual_seed(0)
        torch.set_num_threads(1)
        x = torch.randn(1024, 32); y = torch.randn(1024, 1)
        model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                              nn.Linear(128, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        def step():
            idx = torch.randint(0, 1024, (64,))
            opt.zero_grad()
            loss = F.mse_loss(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
    """),
    "tf_eager": ("tensorflow", _TF_SETUP + """
        def step():
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
    """),
    "tf_function": ("tensorflow", _TF_SETUP + """
        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        def step():
            train_step(x, y)
    """),
}


def _script(body: str, steps: int, warmup: int) -> str:
    return (_TIMING + textwrap.dedent(body)
            + f"\ntimed(step, {steps}, {warmup})\n")


def _per_step(stdout: str) -> float:
    for line in stdout.splitlines():
        if line.startswith("TIMING "):
            return json.loads(line[len("TIMING "):])
    raise RuntimeError(f"no timing in output:\n{stdout[-2000:]}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sample-every", type=int, default=1)
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--memory-limit-mb", type=int, default=8192,
                        help="the runner's memory limit (0: none, no polling of the child)")
    args = parser.parse_args(argv)

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            framework, body = WORKLOADS[name]
            if importlib.util.find_spec(framework) is None:
                print(f"{name}: {framework} not installed, skipped")
                continue
            path = Path(tmp) / f"bench_{name}.py"  # not torch.py: it would shadow the package
            path.write_text(_script(body, args.steps, args.warmup))
            plain, probed = [], []
            for _ in range(args.repeats):  # alternate, so drifts in machine load hit both
                proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                                      env=env, timeout=600)
                plain.append(_per_step(proc.stdout + proc.stderr))
                run = run_probe(path, [], steps=0, device="cpu", timeout=600,
                                sample_every=args.sample_every,
                                memory_limit_mb=args.memory_limit_mb or None)
                probed.append(_per_step(run.stdout_tail + run.stderr_tail))
                n_steps = sum(1 for e in run.events if e.get("type") == "step")
            row = [name, n_steps]
            for reduce in (min, statistics.median):  # min: the least disturbed run
                p = reduce(r["median_s"] for r in plain)
                q = reduce(r["median_s"] for r in probed)
                row += [p, q]
            rows.append(row)
            print(f"{name}: per-step median, ms: plain {[round(r['median_s'] * 1e3, 3) for r in plain]}"
                  f" probe {[round(r['median_s'] * 1e3, 3) for r in probed]}", flush=True)
    print()
    print(f"sample_every={args.sample_every}, {args.steps} timed steps after {args.warmup}; "
          f"per run its median step time; over {args.repeats} runs each: min and median")
    print(f"{'workload':<12} {'plain min':>10} {'probe min':>10} {'overhead':>9} "
          f"{'plain med':>10} {'probe med':>10} {'overhead':>9} {'step events':>12}")
    for name, n, p, q, pm, qm in rows:
        print(f"{name:<12} {p * 1e3:>8.3f}ms {q * 1e3:>8.3f}ms {100 * (q - p) / p:>8.1f}% "
              f"{pm * 1e3:>8.3f}ms {qm * 1e3:>8.3f}ms {100 * (qm - pm) / pm:>8.1f}% {n:>12}")

if __name__ == "__main__":
    main()
