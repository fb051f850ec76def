"""Peak memory of one retrieval training step: gradient-cached micro-batches vs one pass.

The retrieval family scores every query of the optimizer step's batch against every document of
it (`trainables.tasks.retrieval.Retrieval.backward`): in one pass when the batch fits the micro
batch, else gradient-cached (`trainables.tasks.gradcache`). The claim measured here: with caching
the step's peak grows with the micro-batch, not the batch. Cases: batch 32 / 64 / 128 at micro 4,
micro 4 / 8 / 16 at batch 64, and the baselines, one pass of the whole batch (micro = batch) at
32 / 64 / 128, all in this run.

Each case runs in a fresh subprocess, one after another (as benchmarks/memory_plan.py): imports,
a warm-up step of the same model on 2 pairs (thread pools and first-use buffers belong to the
baseline), then the resident set is the baseline and the peak (VmHWM) is reset to it
(`/proc/self/clear_refs`, 5); one step's forward and backward passes follow (no optimizer: its
state does not depend on the batch). Measured = VmHWM - baseline.

Model: the study's architecture (`LlamaEncoderModel`, packed as in a trial), hidden 128, FFN 512,
2 layers, 4 heads, vocabulary 2,048; every text 128 real tokens, so each micro-batch has the same
shape and activations dominate the peak (the weights are ~1 M parameters).

    python benchmarks/retrieval_gradcache.py
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WIDTH, VOCAB, THREADS = 128, 2048, 2
MODEL = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=4)
BASELINES = ((32, 32), (64, 64), (128, 128))
"""(batch, micro): one pass of the whole batch."""
CACHED = ((32, 4), (64, 4), (128, 4), (64, 8), (64, 16))
"""(batch, micro): gradient-cached."""
MB = 2 ** 20


def proc_status_kb(field: str) -> int:
    return int(Path("/proc/self/status").read_text().split(f"{field}:")[1].split()[0])


def measure(batch: int, micro: int) -> dict:
    """One step's peak above the warmed-up process, in this process."""
    import contextlib

    import numpy as np
    import torch

    from sweeper.contract.configs import AdamWConfig, FinetuneProtocol
    from trainables.model import LlamaEncoderConfig, LlamaEncoderModel
    from trainables.tasks.packing import PackedBackbone
    from trainables.tasks.retrieval import BiEncoder, Retrieval

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    model = BiEncoder(PackedBackbone(LlamaEncoderModel(LlamaEncoderConfig(**MODEL)), packing=True)).train()
    rng = np.random.default_rng(0)
    split = {f"{kind}_input_ids": rng.integers(5, VOCAB, (batch, WIDTH)).astype(np.int32) for kind in ("query", "doc")}
    split |= {f"{kind}_attention_mask": np.ones((batch, WIDTH), dtype=np.int8) for kind in ("query", "doc")}
    split |= {"pair_query": np.arange(batch), "pair_doc": np.arange(batch)}
    protocol = FinetuneProtocol(learning_rate=1e-4, batch_size=batch, max_steps=1, epochs=1.0, max_length=WIDTH,
                                warmup_ratio=0.0, optimizer=AdamWConfig(),
                                family_settings={"retrieval_temperature": 0.05})

    def step(rows, m):
        return Retrieval.backward(model, split, rows, m, torch.device("cpu"), protocol, contextlib.nullcontext())

    step(np.arange(2), 1)  # warm-up: cached, 2 pairs
    model.zero_grad(set_to_none=False)  # gradients allocated: they belong to the baseline
    baseline_kb = proc_status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := the current resident set
    started = time.perf_counter()
    step(np.arange(batch), micro)
    seconds = time.perf_counter() - started
    return {"peak": (proc_status_kb("VmHWM") - baseline_kb) * 1024, "seconds": seconds}


def run(batch: int, micro: int) -> dict:
    result = subprocess.run([sys.executable, __file__, "--case", str(batch), str(micro)], capture_output=True,
                            text=True, cwd=ROOT)
    if result.returncode:
        raise SystemExit(f"batch {batch} micro {micro} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", nargs=2, type=int, help=argparse.SUPPRESS)  # the subprocess's own case
    args = parser.parse_args()
    if args.case is not None:
        print(json.dumps(measure(*args.case)))
        return 0
    results = {case: run(*case) for case in BASELINES + CACHED}
    smallest = results[(32, 4)]["peak"]
    print(f"{'batch':>5s} {'micro':>5s} {'path':>9s} {'peak MB':>8s} {'/ one pass':>10s} {'/ b32 m4':>8s} "
          f"{'step':>6s}")
    for (batch, micro), result in results.items():
        path = "one pass" if batch == micro else "cached"
        print(f"{batch:5d} {micro:5d} {path:>9s} {result['peak'] / MB:8.1f} "
              f"{result['peak'] / results[(batch, batch)]['peak']:10.2f} {result['peak'] / smallest:8.2f} "
              f"{result['seconds']:5.2f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
