"""Benchmark 3: pretraining tokens/s of the sweeper's loop vs a bare PyTorch loop, per objective.

Both train the same model (same preset, seed, batches, optimizer, threads) for the same steps.
The bare loop is the textbook version: full-vocabulary logits, cross-entropy with ignore_index,
causal or no mask, no packing metadata. The sweeper's loop runs as Ray Train runs it in local
mode (`TorchTrainer(num_workers=0).fit()`), with its schedule, objective switch, progress
logging and checkpointing. Throughput is taken over the steps after a warm-up, from each loop's
own timing. Target: the sweeper within 5 % of the bare loop (ratio >= 0.95).

    .venv/bin/python benchmarks/pretrain_throughput.py [--preset tiny] [--steps 60] [--threads 2] [--compile]

`--compile` adds the sweeper's loop with `pretraining.compile: true` (torch.compile per block;
the compile time falls in the warm-up steps, which are not timed).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def flops_per_token(config: dict, seq_len: int = 0) -> float:
    """Training FLOPs per token: the project's 6 x parameters (sweeper.plan.cost: no embedding,
    the LM head at every token), plus with `seq_len` the attention's 12 x layers x hidden x
    seq_len (PaLM's count, every query against the whole row)."""
    from sweeper.plan.cost import parameter_count

    return 6 * parameter_count(config) + 12 * config["num_hidden_layers"] * config["hidden_size"] * seq_len


def mfu(config: dict, tokens_per_s: float, peak_tflops: float, seq_len: int = 0) -> float:
    """Model FLOPs utilisation: `flops_per_token` x tokens/s over the device's peak."""
    return flops_per_token(config, seq_len) * tokens_per_s / (peak_tflops * 1e12)


def bare_loop(corpus_dir: str, model_config: dict, objective: str, steps: int, batch: int, seq_len: int,
              warmup: int, device: str = "cpu", micro_batch: int | None = None) -> float:
    """Tokens/s of a plain loop over the same batches (after `warmup` steps). `micro_batch`: rows
    per forward pass, gradients accumulated over the step's rows (None: all rows in one pass)."""
    import torch
    import torch.nn.functional as F

    from trainables.corpus import PackedCorpus
    from trainables.model import LlamaEncoderConfig, build_model

    corpus = PackedCorpus(corpus_dir, seq_len, order_seed=0)
    with torch.device(device):  # initialised where it trains (a GPU draws a 1b model's weights in a blink)
        model = build_model(LlamaEncoderConfig(**model_config), seed=0)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
    generator = torch.Generator().manual_seed(0)
    mask_id = corpus.meta["mask_token_id"]
    micro = micro_batch or batch
    starts = range(0, batch, micro)
    started, tokens = None, 0
    for step in range(steps):
        if step == warmup:
            if device == "cuda":
                torch.cuda.synchronize()  # the warm-up's queued kernels are not timed
            started, tokens = time.perf_counter(), 0
        rows = corpus.batch(step, batch).input_ids
        chosen = torch.rand(rows.shape, generator=generator) < 0.4
        for start in starts:
            ids = rows[start:start + micro].to(device)
            selected = chosen[start:start + micro].to(device)
            with autocast:
                if objective == "mlm":
                    labels = torch.where(selected, ids, -100)
                    logits = model(torch.where(selected, mask_id, ids)).logits.float()
                    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
                else:
                    logits = model(ids, causal=True).logits[:, :-1].float()
                    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
            (loss / len(starts)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += rows.numel()
    if device == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - started)


def bench_run(corpus_dir: str, run_dir: Path, model_config: dict, objective: str, steps: int, batch: int,
              seq_len: int, *, log_every: int, threads: int, device: str = "cpu", compile_blocks: bool = False,
              micro_batch: int | None = None, activation_checkpointing: bool = False):
    """The `PretrainConfig` of one benchmark run: `objective` (MLM at 40 %) for `steps` steps at a
    constant learning rate, from scratch, no checkpoint before the last step."""
    from sweeper.contract.configs import AdamWConfig, InitSource, PhaseConfig, PretrainConfig
    from sweeper.contract.registry import objective_of

    info = objective_of(objective)
    return PretrainConfig(
        name=f"bench-{objective}", run_key="bench", run_dir=str(run_dir), corpus_dir=corpus_dir,
        model_config=model_config, objective=objective, mask_ratio=0.4 if objective == "mlm" else None,
        clm_fraction=1.0 if objective == "clm" else 0.0, switch_step=steps if objective == "clm" else 0,
        init=InitSource(kind="scratch"), total_steps=steps, checkpoint_steps=(),
        phases=(PhaseConfig(objective=objective, loss=info.loss, start_step=0, end_step=steps,
                            settings={**info.settings, "mask_ratio": 0.4} if objective == "mlm" else {}),),
        global_batch_size=batch, seq_len=seq_len, peak_lr=1e-3,
        optimizer=AdamWConfig(betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1, grad_clip=1.0),
        warmup_steps=0, decay_steps=0, log_every=log_every, save_every=0, seed=0, data_seed=0, threads=threads,
        workers=0, use_gpu=device == "cuda", compile=compile_blocks, micro_batch_size=micro_batch,
        activation_checkpointing=activation_checkpointing,
    )


def sweeper_loop(corpus_dir: str, model_config: dict, objective: str, steps: int, batch: int, seq_len: int,
                 warmup: int, threads: int, run_dir: Path, compile_blocks: bool = False, device: str = "cpu") -> float:
    """Tokens/s of trainables.pretrain_loop under Ray Train local mode (after `warmup` steps)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from trainables.pretrain_loop import train_loop_per_worker

    run_dir.mkdir(parents=True)
    run = bench_run(corpus_dir, run_dir, model_config, objective, steps, batch, seq_len, log_every=warmup,
                    threads=threads, device=device, compile_blocks=compile_blocks)
    TorchTrainer(train_loop_per_worker, train_loop_config={"run": run}, scaling_config=ScalingConfig(num_workers=0),
                 run_config=RunConfig(name=run.name, storage_path=str(run_dir.parent))).fit()
    log = json.loads((run_dir / f"step-{steps}" / "train_log.json").read_text())
    # Rows every `warmup` steps, each a window of equal tokens; drop the first (the warm-up).
    timed = [row["tokens_per_s"] for row in log if row["step"] > warmup]
    return len(timed) / sum(1 / rate for rate in timed)  # total tokens / total time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="cuda: bf16 autocast (and flash-attn varlen in the sweeper's loop when installed); prints MFU",
    )
    parser.add_argument(
        "--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak, for MFU (H100 SXM: 989)"
    )
    parser.add_argument("--compile", action="store_true",
                        help="also time the sweeper's loop with pretraining.compile (torch.compile per block)")
    args = parser.parse_args()

    import torch

    from sweeper.contract.catalog import MODEL_PRESETS
    from sweeper.contract.configs import CorpusConfig
    from trainables.corpus_prep import prepare_corpus

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench-pretrain-"))
    corpus_dir = str(work / "corpus")
    prepare_corpus(CorpusConfig(source="wordnet", text_column="text", tokenizer="train-wordpiece",
                                vocab_size=2048, max_documents=3000), corpus_dir)
    config = {**MODEL_PRESETS[args.preset], "vocab_size": 2048}
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{args.threads} threads; preset {args.preset}, batch {args.batch} x {args.seq_len} tokens, "
          f"{args.steps} steps ({args.warmup} warm-up)")

    def utilisation(tokens_per_s: float) -> str:
        """Model FLOPs utilisation: 6 x parameters x tokens/s over the GPU's peak (GPU only)."""
        if args.device != "cuda":
            return ""
        return f"  MFU {mfu(config, tokens_per_s, args.peak_tflops):.1%}"

    print(f"{'objective':10s} {'bare tok/s':>12s} {'sweeper tok/s':>14s} {'ratio':>7s}")
    for objective in ("mlm", "clm"):
        bare = bare_loop(corpus_dir, config, objective, args.steps, args.batch, args.seq_len, args.warmup, args.device)
        ours = sweeper_loop(corpus_dir, config, objective, args.steps, args.batch, args.seq_len, args.warmup,
                            args.threads, work / f"run-{objective}", device=args.device)
        print(f"{objective:10s} {bare:12,.0f} {ours:14,.0f} {ours / bare:7.3f}{utilisation(ours)}", flush=True)
        if args.compile:
            compiled = sweeper_loop(corpus_dir, config, objective, args.steps, args.batch, args.seq_len, args.warmup,
                                    args.threads, work / f"run-{objective}-compiled", compile_blocks=True,
                                    device=args.device)
            print(f"{objective + '+compile':10s} {bare:12,.0f} {compiled:14,.0f} {compiled / bare:7.3f}  "
                  f"(compiled / eager sweeper: {compiled / ours:.3f}){utilisation(compiled)}", flush=True)


if __name__ == "__main__":
    main()
