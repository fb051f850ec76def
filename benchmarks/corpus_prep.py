"""Corpus preparation throughput and memory: the Ray Data job (trainables.corpus_prep) with 1 and
2 tokenising workers against a single-process `datasets.Dataset.map(batched=True)` on the same
text, and the peak RSS of the driver and the workers at 1x and 2x the corpus size.

    python benchmarks/corpus_prep.py [--megabytes 100] [--files 20]

Starts its own local Ray (2 CPUs). The text is synthetic (tests/e2e/test_corpus_prep.py's
generator) and the tokenizer word-level (one token per word), as in the test; every run sets
TOKENIZERS_PARALLELISM=false, so one worker is one core.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# The synthetic corpus is the e2e test's (which imports the tests' conftest and support modules).
sys.path[:0] = [str(Path(__file__).parent.parent / "tests" / folder) for folder in ("e2e", "support", ".")]
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def peaks(read_log: Path) -> dict[int, int]:
    found: dict[int, int] = {}
    for line in read_log.read_text().splitlines():
        pid, *_, peak = map(int, line.split())
        found[pid] = max(found.get(pid, 0), peak)
    return found


def ray_prep(source: Path, tokenizer: str, out: Path, workers: int) -> tuple[float, dict, int]:
    """(seconds, meta, worst worker peak KiB) of one preparation by the Ray Data job."""
    from sweeper.contract.configs import CorpusConfig
    from trainables.corpus_prep import prepare_corpus

    log = out.with_suffix(".log")
    started = time.perf_counter()
    meta = prepare_corpus(CorpusConfig(source=str(source), tokenizer=tokenizer), str(out), workers=workers,
                          read_log=str(log))
    return time.perf_counter() - started, meta, max(peaks(log).values())


def datasets_map(source: Path, tokenizer_dir: str) -> tuple[float, int]:
    """(seconds, tokens) of `datasets.Dataset.map(batched=True)` in this process over the same files."""
    import datasets
    from transformers import AutoTokenizer

    from sweeper.contract.text_sources import resolve_files

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    files = resolve_files(str(source))
    started = time.perf_counter()
    tokens = 0
    for kind, pattern in (("json", (".jsonl", ".jsonl.gz")), ("parquet", (".parquet",)), ("text", (".txt",))):
        chosen = [f for f in files if f.endswith(pattern)]
        if not chosen:
            continue
        data = datasets.load_dataset(kind, data_files=chosen, split="train", cache_dir=str(source.parent / "hf"))
        data = data.filter(lambda row: bool(row["text"].strip())) if kind == "text" else data
        mapped = data.map(lambda rows: tokenizer(rows["text"], add_special_tokens=False), batched=True,
                          remove_columns=data.column_names, load_from_cache_file=False)
        tokens += sum(len(ids) + 1 for ids in mapped["input_ids"])
    return time.perf_counter() - started, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=100.0, help="text of the 1x corpus")
    parser.add_argument("--files", type=int, default=20)
    args = parser.parse_args()
    import ray

    from test_corpus_prep import save_word_tokenizer, word_list, write_corpus
    from trainables.corpus_prep import peak_rss_kib

    work = Path(tempfile.mkdtemp(prefix="corpus-bench-"))
    tokenizer = save_word_tokenizer(work / "tokenizer", word_list(3000, 0))
    one = write_corpus(work / "x1", args.megabytes, args.files)
    two = write_corpus(work / "x2", 2 * args.megabytes, 2 * args.files)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a cluster found running
    print(f"text: 1x {one / 1e6:.0f} MB in {args.files} files, 2x {two / 1e6:.0f} MB in {2 * args.files} files")
    rates = {}
    for workers in (1, 2):
        seconds, meta, worker_peak = ray_prep(work / "x1", tokenizer, work / f"x1-w{workers}", workers)
        rates[workers] = meta["tokens"] / seconds
        print(f"Ray Data, {workers} worker(s), 1x: {meta['tokens']:,} tokens in {seconds:.1f} s = "
              f"{rates[workers]:,.0f} tokens/s; worker peak RSS {worker_peak / 1024:.0f} MiB")
    driver_1x = peak_rss_kib()
    seconds, meta, worker_peak_2x = ray_prep(work / "x2", tokenizer, work / "x2-w2", 2)
    print(
        f"Ray Data, 2 workers, 2x: {meta['tokens']:,} tokens in {seconds:.1f} s = {meta['tokens'] / seconds:,.0f} "
        f"tokens/s; worker peak RSS {worker_peak_2x / 1024:.0f} MiB ({worker_peak_2x / worker_peak:.2f}x the 1x run's)"
    )
    print(f"driver peak RSS: {driver_1x / 1024:.0f} MiB after the 1x runs, {peak_rss_kib() / 1024:.0f} MiB after "
          f"the 2x run ({peak_rss_kib() / driver_1x:.2f}x)")
    seconds, tokens = datasets_map(work / "x1", tokenizer)  # last: it holds every token list in memory
    baseline = tokens / seconds
    print(f"datasets.Dataset.map(batched=True), 1 process, 1x: {tokens:,} tokens in {seconds:.1f} s = "
          f"{baseline:,.0f} tokens/s")
    print(f"ratios: 1 worker {rates[1] / baseline:.2f}x, 2 workers {rates[2] / baseline:.2f}x datasets.map; "
          f"2 workers / 1 worker {rates[2] / rates[1]:.2f}x")

if __name__ == "__main__":
    main()
