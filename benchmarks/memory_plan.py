"""Estimated vs measured peak memory of one pretraining step (sweeper.plan.memory's cpu-fp32 estimate).

Each case runs in a fresh subprocess, one after another: imports, a warm-up step of a throwaway
nano model (torch's thread pools and kernels' first-use buffers belong to the baseline), then the
baseline is the resident set (VmRSS) and the peak (VmHWM) is reset to it (`/proc/self/clear_refs`,
5). The case then builds the model, creates AdamW's state (a step on zero gradients, so the
measured step sees the state a run has from its second step on) and runs one optimizer step,
`trainables.train_step.train_step`, the loop's own: micro-batches, accumulation, clipping, update.
Measured = VmHWM - baseline: everything the step allocated that was resident at its peak
(freed-but-kept heap pages too, which the estimate does not count: see docs/benchmarks.md).

    python benchmarks/memory_plan.py                 # every case
    python benchmarks/memory_plan.py --only nano     # cases whose name contains "nano"
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweeper.plan.memory import GB, Device, MemoryEstimate, MemorySetup, estimate_peak
from sweeper.contract.catalog import MODEL_PRESETS


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    name: str
    preset: str
    vocab_size: int
    seq_len: int
    rows: int
    """This worker's rows of the global batch (local mode: the whole batch)."""
    micro_batch_size: int
    objective: str
    """mlm (mask ratio 0.4) or clm."""
    activation_checkpointing: bool = False
    threads: int = 2


CASES = (
    # The smoke study's runs (search_spaces/smoke.yaml): nano, vocabulary 1,024, 8 x 64 tokens.
    Case(name="nano-mlm40 (smoke)", preset="nano", vocab_size=1024, seq_len=64, rows=8, micro_batch_size=8,
         objective="mlm"),
    Case(name="nano-clm (smoke)", preset="nano", vocab_size=1024, seq_len=64, rows=8, micro_batch_size=8,
         objective="clm"),
    # The default study's runs (search_spaces/micro.yaml): tiny, vocabulary 2,048, 16 x 128 tokens.
    Case(name="tiny-mlm40 (micro)", preset="tiny", vocab_size=2048, seq_len=128, rows=16, micro_batch_size=16,
         objective="mlm"),
    Case(name="tiny-clm (micro)", preset="tiny", vocab_size=2048, seq_len=128, rows=16, micro_batch_size=16,
         objective="clm"),
    # The paper's smallest preset at the paper's length and vocabulary: 2 micro-batches of 1 row.
    Case(name="210m-clm seq 1024", preset="210m", vocab_size=128_257, seq_len=1024, rows=2, micro_batch_size=1,
         objective="clm"),
    Case(name="210m-mlm40 seq 1024", preset="210m", vocab_size=128_257, seq_len=1024, rows=2, micro_batch_size=1,
         objective="mlm"),
    Case(name="210m-clm seq 1024 checkpointed", preset="210m", vocab_size=128_257, seq_len=1024, rows=2,
         micro_batch_size=1, objective="clm", activation_checkpointing=True),
)


def model_config(case: Case) -> dict:
    return {**MODEL_PRESETS[case.preset], "vocab_size": case.vocab_size}


def estimate_terms(case: Case, device: Device = "cpu-fp32") -> MemoryEstimate:
    """sweeper.plan.memory's estimate of one step of `case` on one worker of `device`'s kind."""
    setup = MemorySetup(micro_batch_size=case.micro_batch_size, seq_len=case.seq_len,
                        predicted_share=0.4 if case.objective == "mlm" else 1.0, workers=1,
                        activation_checkpointing=case.activation_checkpointing, device=device)
    return estimate_peak(model_config(case), setup)


def estimate(case: Case) -> float:
    return estimate_terms(case).peak


# --- inside the measuring subprocess ------------------------------------------------------------

def proc_status_kb(field: str) -> int:
    return int(Path("/proc/self/status").read_text().split(f"{field}:")[1].split()[0])


def packed_batch(case: Case, generator):
    """Rows of documents of 50-400 tokens, each closed by a separator, positions restarting per
    document: the shapes PackedCorpus gives (only shapes and document boundaries matter here)."""
    import torch

    from trainables.objectives import TokenBatch

    ids = torch.randint(5, case.vocab_size, (case.rows, case.seq_len), generator=generator)
    documents = torch.zeros_like(ids)
    positions = torch.zeros_like(ids)
    special = torch.zeros_like(ids, dtype=torch.bool)
    for row in range(case.rows):
        start, document = 0, 0
        while start < case.seq_len:
            length = int(torch.randint(50, 400, (), generator=generator))
            end = min(start + length, case.seq_len)
            documents[row, start:end] = document
            positions[row, start:end] = torch.arange(end - start)
            special[row, end - 1] = True
            ids[row, end - 1] = 2  # separator
            start, document = end, document + 1
    return TokenBatch(input_ids=ids, document_ids=documents, position_ids=positions, special_mask=special)


def one_step(model, case: Case, batch, micro_batch_size: int) -> None:
    import torch

    from trainables.objectives import LossContext, RowDraws, clm_loss, mlm_loss
    from trainables.train_step import train_step

    optimizer = getattr(model, "_benchmark_optimizer", None)
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
        model._benchmark_optimizer = optimizer
    loss = mlm_loss if case.objective == "mlm" else clm_loss
    settings = {"mask_ratio": 0.4, "random_replace": 0.0, "keep_original": 0.0}
    context = LossContext(draws=RowDraws(0, 0), mask_token_id=4, vocab_size=case.vocab_size)
    train_step(model, optimizer, batch, loss, settings, context, micro_batch_size=micro_batch_size, grad_clip=1.0)


def measure(case: Case) -> dict:
    import torch

    from trainables.model import LlamaEncoderConfig, build_model

    torch.set_num_threads(case.threads)
    generator = torch.Generator().manual_seed(0)
    warmup = Case(name="warm-up", preset="nano", vocab_size=256, seq_len=32, rows=2, micro_batch_size=1,
                  objective=case.objective, activation_checkpointing=case.activation_checkpointing)
    throwaway = build_model(LlamaEncoderConfig(**model_config(warmup)), 0).train()
    if warmup.activation_checkpointing:
        throwaway.activation_checkpointing_enable({"use_reentrant": False})
    one_step(throwaway, warmup, packed_batch(warmup, generator), 1)
    del throwaway
    batch = packed_batch(case, generator)
    baseline_kb = proc_status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := the current resident set
    model = build_model(LlamaEncoderConfig(**model_config(case)), 0).train()
    if case.activation_checkpointing:  # as the loop does (trainables.pretrain_loop)
        model.activation_checkpointing_enable({"use_reentrant": False})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
    model._benchmark_optimizer = optimizer
    for parameter in model.parameters():  # AdamW's state, as from a run's second step on
        parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    started = time.perf_counter()
    one_step(model, case, batch, case.micro_batch_size)
    seconds = time.perf_counter() - started
    peak_kb = proc_status_kb("VmHWM")
    return {"measured": (peak_kb - baseline_kb) * 1024, "baseline": baseline_kb * 1024, "step_seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="run the cases whose name contains this text")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # the subprocess's own case
    args = parser.parse_args()
    if args.case is not None:
        print(json.dumps(measure(next(case for case in CASES if case.name == args.case))))
        return 0
    print(f"{'case':34s} {'estimate':>9s} {'measured':>9s} {'est/meas':>8s} {'step':>7s}")
    worst = 0.0
    for case in (case for case in CASES if args.only in case.name):
        result = subprocess.run([sys.executable, __file__, "--case", case.name], capture_output=True, text=True,
                                cwd=ROOT)
        if result.returncode:
            print(f"{case.name:34s} failed:\n{result.stderr[-2000:]}")
            return 1
        measured = json.loads(result.stdout.strip().splitlines()[-1])
        ratio = estimate(case) / measured["measured"]
        worst = max(worst, abs(ratio - 1))
        print(f"{case.name:34s} {estimate(case) / GB:8.3f}G {measured['measured'] / GB:8.3f}G {ratio:8.2f} "
              f"{measured['step_seconds']:6.1f}s", flush=True)
        print("  " + json.dumps({**asdict(case), "baseline_gb": round(measured["baseline"] / GB, 3)}), flush=True)
    print(f"largest deviation of estimate from measured: {worst:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
