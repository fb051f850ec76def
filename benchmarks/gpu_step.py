"""Benchmarks 4 and 7 on a GPU: tokens/s, MFU and peak memory of the sweeper's pretraining step.

Per case (a preset x objective, MLM at 40 % or CLM, plus activation-checkpointing and
`torch.compile` variants of the first preset):
1. tokens/s of the bare PyTorch loop (`pretrain_throughput.bare_loop`: full-vocabulary logits,
   `cross_entropy(ignore_index=-100)`, no packing metadata, so SDPA runs without a mask) and of
   the sweeper's step, `trainables.train_step.train_step` with the objective's registered loss,
   the loop's schedule, loss draws and autocast (bf16 on CUDA), on a model built and configured
   as `trainables.pretrain_loop` does (`initial_model`, `configure`: checkpointing, compiled
   blocks); same preset, seed, batches, AdamW settings, micro-batches and accumulation. The
   step is the loop's body without Ray, logging or checkpoints (their cost is benchmark 3's).
2. MFU: `pretrain_throughput.flops_per_token` x tokens/s over the device's dense bf16 peak
   (`PEAK_BF16_TFLOPS`, looked up by `torch.cuda.get_device_name()`; `--peak-tflops` overrides).
   `mfu` is the project's 6 x parameters (sweeper.plan.cost, what `cost.utilization` assumes:
   the LM head at every token, although MLM projects only the 40 % masked); `mfu_attn` adds
   the attention's 12 x layers x hidden x seq_len (every query against the whole row, which a
   block-masked SDPA kernel computes).
3. peak memory of the sweeper's step: `torch.cuda.reset_peak_memory_stats()` after the warm-up
   (AdamW state exists), `max_memory_allocated()` after the timed steps, less what was allocated
   before the model was built; against `sweeper.plan.memory.estimate_peak` for `cuda-bf16`
   (`memory_plan.estimate_terms`: the same preset, tokens per pass, objective, checkpointing).
   est/alloc compares the estimate without its 1 GB `cuda_runtime` term with the allocator's
   peak; est/device the whole estimate with the peak the device saw (the allocator's reserved
   peak plus what the process holds outside PyTorch: CUDA context, cuBLAS/NCCL).
4. the attention path the model took (flash-attn's varlen kernel, or SDPA with a block mask
   and why), torch, transformers, CUDA and the device's name.

Data: synthetic token ids (torch.randint over the vocabulary, seed 0) cut into documents of
50-400 tokens, each closed by the separator, written as a one-file corpus and read through the
real `trainables.corpus.PackedCorpus` (no Ray, no datasets): the windows in its seeded order,
document ids, positions, the special mask and flash-attn's `cu_seqlens` are built on the host
each step, as the loop's batches are. Paper presets run the shapes of search_spaces/paper.yaml (`data.vocab_size`, rows
of `data.seq_len` tokens, `pretraining.micro_batch_size` rows a pass; documents, not its two
samples a row) with `--passes` (2) accumulated passes a step; CPU presets the shapes of their studies
(benchmarks/memory_plan.py's cases). Nothing here imports ray, optuna, datasets or pandas.

The GPU run (H100 80 GB): by default 210m, 610m and 1b x MLM-40 and CLM, 210m CLM with
activation checkpointing, 210m compiled (both objectives), in that order; 30 timed steps after
5 (compiled: 8) untimed ones, ~16k tokens a step. Expected 4-5 minutes: before each case the
script predicts its time (at the lowest MFU measured so far, 25 % before any; compiling 90 s)
and skips it, recorded as skipped, if the run would pass `--budget-s` (300 s). `--smoke` (the
first preset only, 6 timed steps, no compiling) takes about a minute.

    PYTHONPATH=. python3 benchmarks/gpu_step.py --device cuda --out $OUT/gpu_step.json
    PYTHONPATH=. python3 benchmarks/gpu_step.py --device cuda --smoke --out $OUT/gpu_step.json
    PYTHONPATH=. python3 benchmarks/gpu_step.py --device cpu --preset nano --out /tmp/gpu_step.json  # ~20 s

On the CPU the defaults are 10 timed steps after 2 and no compiled variant (`--variants
ckpt,compile` adds it); memory and MFU are not measured there ("n/a").

Progress lines are flushed as they come and the JSON is rewritten after every case, so a run
cut short keeps what it measured; the markdown tables (docs/benchmarks.md sections 4 and 7)
are printed at the end.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.memory_plan import CASES as CPU_CASES, Case, estimate_terms, model_config
from benchmarks.pretrain_throughput import bare_loop, bench_run, flops_per_token, mfu
from sweeper.contract.catalog import CPU_PRESETS, MODEL_PRESETS, SCALE_DEFAULTS
from sweeper.plan.memory import GB

PEAK_BF16_TFLOPS = (
    ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("GH200", 989.0), ("H200", 989.0), ("H100", 989.0),
    ("A100", 312.0), ("L40S", 362.0),
)
"""Dense bf16 TFLOP/s from NVIDIA's datasheets (half the 'with sparsity' figure), by a part of
`torch.cuda.get_device_name()` (first match: "NVIDIA H100 80GB HBM3" is the SXM part)."""
SEPARATOR_ID, MASK_ID, SPECIAL_IDS = 2, 4, [0, 1, 2, 3, 4]
DOCUMENT_TOKENS = (50, 400)
"""Synthetic documents' lengths, separator included (as memory_plan's packed batches)."""
STARTED = time.perf_counter()


def log(message: str) -> None:
    print(f"[gpu_step +{time.perf_counter() - STARTED:5.1f}s] {message}", flush=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuCase:
    case: Case
    """memory_plan's case: preset, vocabulary, tokens per pass, rows a step, objective, checkpointing."""
    compile: bool = False

    @property
    def name(self) -> str:
        return self.case.name + (" compiled" if self.compile else "")

    @property
    def passes(self) -> int:
        return self.case.rows // self.case.micro_batch_size


def paper_shape() -> tuple[int, int, int]:
    """(vocabulary, row length, rows a pass) of search_spaces/paper.yaml."""
    import yaml

    paper = yaml.safe_load((ROOT / "search_spaces" / "paper.yaml").read_text())
    return paper["data"]["vocab_size"], paper["data"]["seq_len"], paper["pretraining"]["micro_batch_size"]


def shape(preset: str, args) -> tuple[int, int, int]:
    """(vocabulary, seq_len, rows a pass) of a preset: its study's (CPU presets, memory_plan's
    smoke and micro cases) or the paper's; the command line overrides each."""
    if preset in CPU_PRESETS:
        known = [c for c in CPU_CASES if c.preset == preset] or [c for c in CPU_CASES if c.preset == "tiny"]
        vocab, seq_len, micro = known[0].vocab_size, known[0].seq_len, known[0].micro_batch_size
    else:
        vocab, seq_len, micro = paper_shape()
    return args.vocab_size or vocab, args.seq_len or seq_len, args.micro_batch or micro


def plan_cases(args) -> list[GpuCase]:
    def one(preset: str, objective: str, checkpointing: bool = False, compiled: bool = False) -> GpuCase:
        vocab, seq_len, micro = shape(preset, args)
        label = f"{preset} {'MLM-40' if objective == 'mlm' else 'CLM'}" + (" ckpt" if checkpointing else "")
        return GpuCase(case=Case(name=label, preset=preset, vocab_size=vocab, seq_len=seq_len,
                                 rows=micro * args.passes, micro_batch_size=micro, objective=objective,
                                 activation_checkpointing=checkpointing, threads=args.threads), compile=compiled)

    # Priority order (`--budget-s` skips from the end): the first preset and its cheap checkpointing
    # variant, the larger presets, then the compiled variants (compiling costs the most time).
    first, *others = args.presets
    cases = [one(first, objective) for objective in args.objectives]
    if "ckpt" in args.variants:
        cases.append(one(first, "clm", checkpointing=True))
    cases += [one(preset, objective) for preset in others for objective in args.objectives]
    if "compile" in args.variants:
        cases += [one(first, objective, compiled=True) for objective in args.objectives]
    return cases


def synthetic_corpus(folder: Path, vocab_size: int, tokens: int, seed: int = 0) -> str:
    """A one-file corpus (`tokens.npy` and its marker, the layout PackedCorpus reads) of random
    ids in documents of DOCUMENT_TOKENS tokens, each closed by the separator."""
    import numpy as np
    import torch

    from sweeper.store.layout import CORPUS_MARKER

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIAL_IDS), vocab_size, (tokens,), generator=generator, dtype=torch.int32)
    lengths = torch.randint(*DOCUMENT_TOKENS, (tokens // DOCUMENT_TOKENS[0] + 1,), generator=generator)
    ends = torch.cumsum(lengths, 0) - 1
    ids[ends[ends < tokens]] = SEPARATOR_ID
    folder.mkdir(parents=True)
    np.save(folder / "tokens.npy", ids.numpy())
    meta = {"tokens": tokens, "documents": int((ends < tokens).sum()), "vocab_size": vocab_size,
            "separator_id": SEPARATOR_ID, "mask_token_id": MASK_ID, "pad_token_id": 0, "special_ids": SPECIAL_IDS,
            "source": f"synthetic (torch.randint, seed {seed})", "tokenizer": "none"}
    (folder / CORPUS_MARKER).write_text(json.dumps(meta))
    return str(folder)


# --- the device -------------------------------------------------------------------------------

def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def reset_peak(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def memory_now(device, since: int = 0) -> dict:
    """Peaks since the last `reset_peak` (bytes; allocated less `since`), or {} off CUDA."""
    import torch

    if device.type != "cuda":
        return {}
    free, total = torch.cuda.mem_get_info(device)
    outside = (total - free) - torch.cuda.memory_reserved(device)  # CUDA context, cuBLAS, NCCL
    allocated, reserved = torch.cuda.max_memory_allocated(device) - since, torch.cuda.max_memory_reserved(device)
    return {"allocated_peak": allocated, "reserved_peak": reserved, "outside_torch": outside,
            "device_peak": reserved + outside}


def peak_tflops(device, override: float | None) -> tuple[float | None, str]:
    import torch

    if override:
        return override, "--peak-tflops"
    if device.type != "cuda":
        return None, "no GPU: no MFU"
    name = torch.cuda.get_device_name(device)
    for part, tflops in PEAK_BF16_TFLOPS:
        if part in name:
            return tflops, f"table entry '{part}' for {name}"
    return 989.0, f"{name} is not in the table: H100 SXM's 989 assumed (pass --peak-tflops)"


def environment(device) -> dict:
    import torch
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "device": str(device), "cpus": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "flash_attn_installed": importlib.util.find_spec("flash_attn") is not None}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(device_name=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                    capability=".".join(map(str, torch.cuda.get_device_capability(device))),
                    device_memory_gb=round(props.total_memory / GB, 2))
    else:
        info.update(device_name=platform.processor() or platform.machine())
    return info


def attention_path(device, caught: list[str]) -> str:
    """The attention the sweeper's model ran, as `trainables.model.FLASH_CHOICE` decided it."""
    from trainables.model import FLASH_CHOICE

    if FLASH_CHOICE.decided and FLASH_CHOICE.kernel is not None:
        return "flash-attn varlen"
    if FLASH_CHOICE.decided:
        reasons = [m for m in caught if "flash-attn not used" in m]
        return "SDPA with a block mask (" + (reasons[0] if reasons else "flash-attn refused") + ")"
    return f"SDPA with a block mask (flash-attn not tried: {device.type}, " \
           f"{'bf16' if device.type == 'cuda' else 'float32'})"


# --- the two loops ------------------------------------------------------------------------------

def sweeper_loop(run, device, warmup: int, caught: list[str]) -> dict:
    """The pretraining loop's step (`trainables.pretrain_loop.train_loop_per_worker` without Ray,
    logging or checkpoints): tokens/s and memory of `run.total_steps - warmup` timed steps."""
    import torch

    from trainables.corpus import PackedCorpus
    from trainables.objectives import LossContext, RowDraws
    from trainables.pretrain_loop import begin_step, configure, initial_model
    from trainables.train_step import adamw, train_step

    corpus = PackedCorpus(run.corpus_dir, run.seq_len, run.data_seed, run.replicate)
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    began = time.perf_counter()
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        with torch.device(device):  # initialised where it trains, as bare_loop's model
            model = initial_model(run, corpus.meta["vocab_size"])
        configure(model, run)
        optimizer = adamw(model.parameters(), run.peak_lr, run.optimizer.torch_kwargs(), device)
        autocast_dtype = torch.bfloat16 if device.type == "cuda" else None
        losses, tokens, started, warm_s = {}, 0, None, 0.0
        for step in range(run.total_steps):
            if step == warmup:
                reset_peak(device)
                started, tokens, warm_s = time.perf_counter(), 0, time.perf_counter() - began
            phase, loss, _ = begin_step(run, step, optimizer, losses)
            batch = corpus.batch(step, run.global_batch_size).to(device)
            context = LossContext(draws=RowDraws(run.seed, step, first_row=0, device=device),
                                  mask_token_id=corpus.meta["mask_token_id"], vocab_size=model.config.vocab_size,
                                  lm_loss=run.lm_loss)
            result = train_step(model, optimizer, batch, loss, phase.settings, context,
                                micro_batch_size=run.micro_batch_size, grad_clip=run.optimizer.grad_clip,
                                autocast_dtype=autocast_dtype)
            tokens += batch.input_ids.numel()
        synchronize(device)
        seconds = time.perf_counter() - started
    for message in dict.fromkeys(str(r.message) for r in records):
        caught.append(message)
        print(f"  warning: {message}", file=sys.stderr, flush=True)
    memory = memory_now(device, since=before)
    timed = run.total_steps - warmup
    del model, optimizer
    release(device)
    return {"tokens_per_s": tokens / seconds, "step_s": seconds / timed, "warmup_s": warm_s,
            "final_loss": result.loss, "memory": memory}


def run_case(gpu_case: GpuCase, args, device, corpus_dir: str, bare_rates: dict, caught: list[str]) -> dict:
    case = gpu_case.case
    config = model_config(case)
    warmup = args.warmup + (3 if gpu_case.compile else 0)  # compiling happens in the first steps
    steps = warmup + args.steps
    tokens_per_step = case.rows * case.seq_len
    key = (case.preset, case.objective, case.vocab_size, case.seq_len, case.rows, case.micro_batch_size)
    row = {**asdict(case), "name": gpu_case.name, "compile": gpu_case.compile, "passes": gpu_case.passes,
           "timed_steps": args.steps, "warmup_steps": warmup, "tokens_per_step": tokens_per_step,
           "flops_per_token": flops_per_token(config), "flops_per_token_attn": flops_per_token(config, case.seq_len)}
    began = time.perf_counter()
    if key not in bare_rates:
        release(device)
        reset_peak(device)
        before = memory_now(device).get("allocated_peak", 0)
        try:
            rate = bare_loop(corpus_dir, config, case.objective, steps, case.rows, case.seq_len, warmup, device.type,
                             micro_batch=case.micro_batch_size)
        except Exception as error:
            traceback.print_exc()
            bare_rates[key] = {"error": f"{type(error).__name__}: {str(error)[:400]}"}
            log(f"{gpu_case.name}: bare loop FAILED: {bare_rates[key]['error']}")
        else:
            bare_rates[key] = {"tokens_per_s": rate, **({"allocated_peak": memory_now(device, since=before)
                                                         ["allocated_peak"]} if device.type == "cuda" else {})}
            log(f"{gpu_case.name}: bare loop {rate:,.0f} tok/s")
        release(device)
    row["bare"] = bare_rates[key]
    with tempfile.TemporaryDirectory(prefix="gpu-step-run-") as run_dir:
        run = bench_run(corpus_dir, Path(run_dir), config, case.objective, steps, case.rows, case.seq_len,
                        log_every=steps, threads=args.threads, device=device.type, compile_blocks=gpu_case.compile,
                        micro_batch=case.micro_batch_size, activation_checkpointing=case.activation_checkpointing)
        run = replace(run, lm_loss=args.lm_loss)
        row["lm_loss"] = args.lm_loss
        row["sweeper"] = sweeper_loop(run, device, warmup, caught)
    if "tokens_per_s" in row["bare"]:
        row["ratio"] = row["sweeper"]["tokens_per_s"] / row["bare"]["tokens_per_s"]
    row["attention"] = attention_path(device, caught)
    if args.peak_tflops_used:
        row["mfu"] = mfu(config, row["sweeper"]["tokens_per_s"], args.peak_tflops_used)
        row["mfu_attn"] = mfu(config, row["sweeper"]["tokens_per_s"], args.peak_tflops_used, case.seq_len)
        if "tokens_per_s" in row["bare"]:
            row["mfu_bare"] = mfu(config, row["bare"]["tokens_per_s"], args.peak_tflops_used)
    paper = SCALE_DEFAULTS["paper"]
    row["device_hours_per_paper_run"] = (paper["steps"] * paper["global_batch_size"] * case.seq_len
                                         / row["sweeper"]["tokens_per_s"] / 3600)
    kind = "cuda-bf16" if device.type == "cuda" else "cpu-fp32"
    estimate = estimate_terms(case, kind)
    row["estimate"] = {"device": kind, "peak": estimate.peak, "terms": estimate.terms}
    memory = row["sweeper"]["memory"]
    if memory:
        tensors = estimate.peak - estimate.terms.get("cuda_runtime", 0.0)
        row["est_over_alloc"] = tensors / memory["allocated_peak"]
        row["est_over_device"] = estimate.peak / memory["device_peak"]
    row["wall_s"] = time.perf_counter() - began
    return row


# --- output -------------------------------------------------------------------------------------

def write(out: Path | None, report: dict) -> None:
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    os.replace(tmp, out)


def gb(value) -> str:
    return f"{value / GB:.2f} GB" if isinstance(value, (int, float)) else "n/a"


def number(row: dict, key: str, spec: str) -> str:
    return format(row[key], spec) if key in row else "n/a"


def tables(report: dict) -> str:
    env = report["environment"]
    rows = [r for r in report["cases"] if "error" not in r]
    lines = [f"Device: {env.get('device_name')}, torch {env['torch']} (CUDA {env.get('cuda', '-')}), transformers "
             f"{env['transformers']}, python {env['python']}; peak {report['peak_tflops'] or 'n/a'} TFLOP/s "
             f"({report['peak_source']}); {report['timed_steps']} timed steps after the warm-up.",
             "",
             "| case | tokens per pass x passes | bare tok/s | sweeper tok/s | ratio | step | MFU (6N) | "
             "MFU (6N + attn) "
             "| device-h per paper run |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['micro_batch_size']} x {r['seq_len']:,}, {r['passes']} | "
                     f"{number(r['bare'], 'tokens_per_s', ',.0f')} | {r['sweeper']['tokens_per_s']:,.0f} | "
                     f"**{number(r, 'ratio', '.3f')}** | "
                     f"{r['sweeper']['step_s'] * 1000:.0f} ms | {number(r, 'mfu', '.1%')} | "
                     f"{number(r, 'mfu_attn', '.1%')} | "
                     f"{r['device_hours_per_paper_run']:,.0f} |")
    lines += ["", "| case | estimate (" + (rows[0]["estimate"]["device"] if rows else "-") + ") | allocated peak | "
              "device peak | est/alloc | est/device | bare allocated peak |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        memory = r["sweeper"]["memory"]
        lines.append(f"| {r['name']} | {gb(r['estimate']['peak'])} | {gb(memory.get('allocated_peak'))} | "
                     f"{gb(memory.get('device_peak'))} | {number(r, 'est_over_alloc', '.2f')} | "
                     f"{number(r, 'est_over_device', '.2f')} | {gb(r['bare'].get('allocated_peak'))} |")
    attention = sorted({r["attention"] for r in rows})
    lines += ["", f"- attention: the sweeper's loop {'; '.join(attention) or 'n/a'}; the bare loop SDPA without a mask"]
    lines += [f"- {r['name']}: compiled / eager sweeper {r['compiled_over_eager']:.3f}, warm-up (compiling) "
              f"{r['sweeper']['warmup_s']:.0f} s" for r in rows if "compiled_over_eager" in r]
    lines += [f"- {r['name']}: failed ({r['error']})" for r in report["cases"] if "error" in r]
    lines += [f"- {r['name']}: the bare loop failed ({r['bare']['error']})" for r in rows if "error" in r["bare"]]
    lines += [f"- {s['name']}: skipped ({s['reason']})" for s in report["skipped"]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    parser.add_argument("--out", type=Path, default=None, help="the JSON report, rewritten after every case")
    parser.add_argument(
        "--presets",
        "--preset",
        default="210m,610m,1b",
        help="comma-separated presets of sweeper.contract.catalog.MODEL_PRESETS (the first gets the variants)",
    )
    parser.add_argument("--objectives", default="mlm,clm")
    parser.add_argument("--variants", default=None,
                        help="of the first preset: ckpt (CLM with activation checkpointing), compile (both "
                             "objectives with pretraining.compile); '' for none (default: both on CUDA, ckpt on "
                             "the CPU, where compiling takes minutes)")
    parser.add_argument(
        "--steps", type=int, default=None, help="timed steps per loop (default: 30 on CUDA, 10 on the CPU)"
    )
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed steps first (default: 5 on CUDA, 2 on the CPU; compiled cases: 3 more)")
    parser.add_argument("--passes", type=int, default=2, help="micro-batches accumulated per step")
    parser.add_argument("--micro-batch", type=int, default=None, help="rows per pass (default: the preset's study)")
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--vocab-size", type=int, default=None)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--lm-loss", choices=["auto", "fused", "reference"], default="auto",
                        help="the sweeper step's pretraining.lm_loss (auto: fused on CUDA; the sections-4/7 "
                             "figures of 2026-11-27 predate it: reference)")
    parser.add_argument(
        "--peak-tflops", type=float, default=None, help="dense bf16 peak for MFU (default: by device name)"
    )
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="start no case whose predicted time would end the run past this many seconds")
    parser.add_argument("--smoke", action="store_true",
                        help="a quick check: the first preset only, 6 timed steps after 2, checkpointing variant only")
    args = parser.parse_args()

    import torch

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    args.presets = [p for p in args.presets.split(",") if p]
    args.objectives = [o for o in args.objectives.split(",") if o]
    unknown = [p for p in args.presets if p not in MODEL_PRESETS] + [
        o for o in args.objectives if o not in ("mlm", "clm")
    ]
    if unknown or not args.presets or not args.objectives:
        parser.error(f"unknown or missing presets/objectives {unknown}: presets are {', '.join(MODEL_PRESETS)}; "
                     "objectives mlm, clm")
    variants = args.variants if args.variants is not None else ("ckpt,compile" if cuda else "ckpt")
    args.variants = [v for v in variants.split(",") if v]
    args.steps = args.steps or (30 if cuda else 10)
    args.warmup = args.warmup if args.warmup is not None else (5 if cuda else 2)
    if args.smoke:
        args.presets, args.steps, args.warmup, args.variants = args.presets[:1], 6, 2, ["ckpt"]
    torch.set_num_threads(args.threads)
    args.peak_tflops_used, peak_source = peak_tflops(device, args.peak_tflops)
    cases = plan_cases(args)
    report = {"environment": environment(device), "peak_tflops": args.peak_tflops_used, "peak_source": peak_source,
              "timed_steps": args.steps, "argv": sys.argv[1:], "cases": [], "skipped": [], "finished": False}
    env = report["environment"]
    log(f"{env['device_name']} ({device}), torch {env['torch']}, transformers {env['transformers']}, "
        f"flash-attn installed: {env['flash_attn_installed']}; peak {args.peak_tflops_used} TFLOP/s ({peak_source})")
    kind = "cuda-bf16" if cuda else "cpu-fp32"
    for c in cases:
        log(f"planned: {c.name}: {c.case.micro_batch_size} x {c.case.seq_len} tokens x {c.passes} passes, vocabulary "
            f"{c.case.vocab_size:,}, estimate {gb(estimate_terms(c.case, kind).peak)} ({kind})")
    write(args.out, report)

    work = Path(tempfile.mkdtemp(prefix="gpu-step-"))
    corpora: dict[tuple, str] = {}
    bare_rates: dict[tuple, dict] = {}
    caught: list[str] = []
    compiled_once = False
    for gpu_case in cases:
        case = gpu_case.case
        steps = args.warmup + args.steps + (3 if gpu_case.compile else 0)
        if args.peak_tflops_used:
            # Both loops unless the bare one has run, at the lowest MFU measured so far (25 % before
            # any, 5 % at the least), 10 s of set-up; compiling: 90 s the first time, 45 s once
            # inductor's caches hold the block's kernels.
            measured = [r[key] for r in report["cases"] for key in ("mfu", "mfu_bare") if key in r]
            rate = max(0.05, min([0.25, *measured])) * args.peak_tflops_used * 1e12
            loops = 1 if (case.preset, case.objective) in {k[:2] for k in bare_rates} else 2
            compiling = (45 if compiled_once else 90) if gpu_case.compile else 0
            predicted = (loops * steps * case.rows * case.seq_len * flops_per_token(model_config(case)) / rate
                         + 10 + compiling)
            elapsed = time.perf_counter() - STARTED
            if elapsed + predicted > args.budget_s:
                reason = f"predicted {predicted:.0f} s at {elapsed:.0f} s of a {args.budget_s:.0f} s budget"
                report["skipped"].append({"name": gpu_case.name, "reason": reason})
                log(f"{gpu_case.name}: skipped ({reason})")
                write(args.out, report)
                continue
        shape_key = (case.vocab_size, case.seq_len, case.rows, steps)
        if shape_key not in corpora:
            corpora[shape_key] = synthetic_corpus(work / f"corpus-{len(corpora)}", case.vocab_size,
                                                  steps * case.rows * case.seq_len)
        log(f"{gpu_case.name}: running ({steps} steps, {args.steps} timed)")
        compiled_once = compiled_once or gpu_case.compile
        try:
            row = run_case(gpu_case, args, device, corpora[shape_key], bare_rates, caught)
        except Exception as error:
            traceback.print_exc()
            row = {**asdict(case), "name": gpu_case.name, "compile": gpu_case.compile,
                   "error": f"{type(error).__name__}: {str(error)[:400]}"}
            log(f"{gpu_case.name}: FAILED: {row['error']}")
        else:
            eager = [r for r in report["cases"] if gpu_case.compile and "error" not in r and not r["compile"]
                     and (r["preset"], r["objective"], r["activation_checkpointing"])
                     == (case.preset, case.objective, case.activation_checkpointing)]
            if eager:
                row["compiled_over_eager"] = row["sweeper"]["tokens_per_s"] / eager[0]["sweeper"]["tokens_per_s"]
            memory = row["sweeper"]["memory"]
            log(
                f"{gpu_case.name}: sweeper {row['sweeper']['tokens_per_s']:,.0f} tok/s, ratio "
                f"{number(row, 'ratio', '.3f')}, "
                f"step {row['sweeper']['step_s'] * 1000:.0f} ms, MFU {number(row, 'mfu', '.1%')}; memory "
                f"estimate {gb(row['estimate']['peak'])}, allocated {gb(memory.get('allocated_peak'))}, device "
                f"{gb(memory.get('device_peak'))}, est/alloc {number(row, 'est_over_alloc', '.2f')}; "
                f"{row['attention']}; {row['wall_s']:.0f} s"
            )
        release(device)  # after the except clause: a failed case's frames (its model) are gone by now
        report["cases"].append(row)
        write(args.out, report)
    shutil.rmtree(work, ignore_errors=True)
    report["finished"] = True
    report["wall_s"] = time.perf_counter() - STARTED
    write(args.out, report)
    print("\n" + tables(report), flush=True)
    log(f"done{f', report in {args.out}' if args.out else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
