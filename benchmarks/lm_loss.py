"""Benchmark 18: the LM head's loss, fused (`pretraining.lm_loss: fused`) vs reference, one pass.

Per case (a hidden size, a vocabulary, rows x seq_len tokens a pass, an objective): the LM head and
its cross-entropy, forward and backward, on random hidden states and head weights (the rest of
the model is not run: its cost does not depend on the choice), as the objectives call it
(`trainables.lm_loss.head_loss_for`: MLM at the 40 % masked positions, CLM at every position but
each row's last). Both ways run in the same process, alternately, with the same inputs:
- time: the median of `--repeats` timed passes after one untimed pass;
- peak memory: on CUDA `torch.cuda.max_memory_allocated` above what was allocated before the
  pass (inputs and weights excluded); on the CPU the profiler's allocator events
  (tests/support/tensor_memory.py), in a separate untimed pass (the profiler slows the op);
- the loss and the largest gradient difference between the two, for the record.
`fused` on CUDA is the kernel `trainables.lm_loss.fused_kernel_name` reports (liger-kernel,
cut-cross-entropy, or the chunked PyTorch loss when neither is installed); bf16 autocast on CUDA
as the loop, float32 on the CPU.

    PYTHONPATH=. python3 benchmarks/lm_loss.py --threads 2          # CPU: hidden 128, 2 x 512 tokens
    PYTHONPATH=. python3 benchmarks/lm_loss.py --device cuda --out $OUT/lm_loss.json   # the paper's shapes

The CUDA cases are the paper's: hidden 768 / 1,152 / 1,728 (210m / 610m / 1b), vocabulary
128,256, 8 rows x 2,048 tokens a pass (search_spaces/paper.yaml's micro-batch), MLM-40 and CLM.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from sweeper.contract.catalog import MODEL_PRESETS


@dataclass(frozen=True)
class LossCase:
    name: str
    hidden: int
    vocab: int
    rows: int
    seq_len: int
    objective: str

    @property
    def targets(self) -> int:
        """Positions the head runs at: 40 % of the tokens for MLM-40, all but each row's last for CLM."""
        tokens = self.rows * self.seq_len
        return round(0.4 * tokens) if self.objective == "mlm" else tokens - self.rows


CPU_CASES = [LossCase(f"cpu {objective.upper()}", 128, 128_256, 2, 512, objective) for objective in ("mlm", "clm")]
GPU_CASES = [LossCase(f"{preset} {'MLM-40' if objective == 'mlm' else 'CLM'}", MODEL_PRESETS[preset]["hidden_size"],
                      128_256, 8, 2048, objective)
             for preset in ("210m", "610m", "1b") for objective in ("mlm", "clm")]


def one_pass(fn, hidden, weight, labels, device):
    import torch

    h = hidden.detach().requires_grad_()
    w = weight.detach().requires_grad_()
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        loss = fn(h, w, labels)
    loss.backward()
    return loss.detach(), h.grad, w.grad


def measure(case: LossCase, device, repeats: int) -> dict:
    import torch

    from tensor_memory import peak_allocated_bytes
    from trainables.lm_loss import IGNORE, fused_kernel_name, head_loss_for

    gen = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(case.targets, case.hidden, generator=gen, device=device)
    weight = torch.randn(case.vocab, case.hidden, generator=gen, device=device) * 0.02
    labels = torch.randint(0, case.vocab, (case.targets,), generator=gen, device=device)
    labels[::97] = IGNORE  # a few ignored rows, as CLM's document ends
    ways = {"reference": head_loss_for("reference", device), "fused": head_loss_for("fused", device)}

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    results = {name: {"times": []} for name in ways}
    outputs = {name: one_pass(fn, hidden, weight, labels, device) for name, fn in ways.items()}  # untimed
    for _ in range(repeats):  # alternately, so drift hits both
        for name, fn in ways.items():
            sync()
            began = time.perf_counter()
            one_pass(fn, hidden, weight, labels, device)
            sync()
            results[name]["times"].append(time.perf_counter() - began)
    for name, fn in ways.items():
        if device.type == "cuda":
            torch.cuda.empty_cache()
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            one_pass(fn, hidden, weight, labels, device)
            sync()
            results[name]["peak_bytes"] = torch.cuda.max_memory_allocated(device) - before
        else:
            results[name]["peak_bytes"] = peak_allocated_bytes(
                lambda fn=fn: one_pass(fn, hidden, weight, labels, device)
            )
        results[name]["step_s"] = statistics.median(results[name].pop("times"))
    ref, fused = outputs["reference"], outputs["fused"]
    return {**asdict(case), "targets": case.targets, "fused_kernel": fused_kernel_name(device),
            "logits_bytes_float32": case.targets * case.vocab * 4, **{name: results[name] for name in ways},
            "time_ratio": results["fused"]["step_s"] / results["reference"]["step_s"],
            "memory_ratio": results["fused"]["peak_bytes"] / results["reference"]["peak_bytes"],
            "loss_difference": abs(float(ref[0]) - float(fused[0])), "loss": float(ref[0]),
            "max_grad_difference": max(float((a.float() - b.float()).abs().max()) for a, b in zip(ref[1:], fused[1:]))}


def table(rows: list[dict]) -> str:
    lines = ["| case | positions | fused | reference step | fused step | fused / ref time | reference peak "
             "| fused peak | fused / ref memory |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['targets']:,} x {r['vocab']:,} | {r['fused_kernel']} | "
                     f"{r['reference']['step_s'] * 1e3:,.0f} ms | {r['fused']['step_s'] * 1e3:,.0f} ms | "
                     f"**{r['time_ratio']:.2f}** | {r['reference']['peak_bytes'] / 1e6:,.0f} MB | "
                     f"{r['fused']['peak_bytes'] / 1e6:,.0f} MB | **{r['memory_ratio']:.2f}** |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--repeats", type=int, default=None, help="timed passes per way (default: 5 CPU, 20 CUDA)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads on the CPU (default: torch's)")
    parser.add_argument("--out", type=Path, default=None, help="write the measurements as JSON")
    args = parser.parse_args()

    import torch

    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    cases = GPU_CASES if device.type == "cuda" else CPU_CASES
    repeats = args.repeats or (20 if device.type == "cuda" else 5)
    rows = []
    for case in cases:
        rows.append(measure(case, device, repeats))
        r = rows[-1]
        print(
            f"{case.name}: reference {r['reference']['step_s'] * 1e3:.1f} ms, "
            f"{r['reference']['peak_bytes'] / 1e6:.0f} MB; "
            f"fused ({r['fused_kernel']}) {r['fused']['step_s'] * 1e3:.1f} ms, "
            f"{r['fused']['peak_bytes'] / 1e6:.0f} MB; "
            f"loss diff {r['loss_difference']:.2g}, grad diff {r['max_grad_difference']:.2g}",
            flush=True,
        )
        if args.out:
            args.out.write_text(json.dumps({"device": str(device), "torch": torch.__version__,
                                            "threads": torch.get_num_threads(), "cases": rows}, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
