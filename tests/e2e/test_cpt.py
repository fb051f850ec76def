"""Continued pretraining for real: from the study's own decayed checkpoint and from a Hugging
Face Llama causal LM built from config and saved locally (with a tokenizer that has no [MASK]).

The study lives in an object store (a real S3 endpoint on the loopback): every stage reads and
writes it through sweeper.store.storage, the continued run downloads its source checkpoint, trials
download checkpoints and tokenised data, and a rerun, `status` and `report` work on the URI. The
URI carries keys of its own, which no output and no object of the study may hold (the run trains
in Train's local mode; tests/e2e/test_fsdp_study.py checks a worker group's, with W&B)."""
from __future__ import annotations


import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from sweeper.store import folders, storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_table
import trainables.model  # registers the architecture
from sweeper.contract.text_sources import iter_corpus_texts

from conftest import ROOT, run_sweeper
from local_s3 import holding, objects_under

from test_secrets import KEY, SECRET, aws_environment  # noqa: F401 (what the unit tests share; the autouse fixture)

pytestmark = pytest.mark.e2e


def save_tiny_causal_lm(directory):
    """A 2-layer Llama and a BPE tokenizer trained on the shipped corpus: what a hub model looks like."""
    texts = list(iter_corpus_texts("wordnet", "text", 300))
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(directory)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    return len(fast)


SPEC = """
study: cpt
model: {{preset: nano}}
data: {{vocab_size: 1024, seq_len: 64, max_documents: 400}}
pretraining:
  steps: 20
  global_batch_size: 4
  warmup_steps: 2
  decay_steps: 4
  log_every: 10
  runs:
    - {{objective: clm, checkpoint_steps: [10]}}
    - objective: mlm
      init_from: [nano-clm-20, "hf:{hf}"]
      steps: [10]
      warmup_steps: 1
      decay_steps: 2
finetuning:
  tasks: [wordnet-supersense-cls]
  learning_rates: [0.001]
  seeds: [0]
  batch_size: 8
  micro_batch_size: 8
  max_steps: 2
  max_length: 32
  max_train_examples: 32
  max_eval_examples: 16
"""


def test_continued_pretraining_from_study_and_hub_checkpoints_in_an_object_store(ray_head, tmp_path, object_store):
    hf_dir = tmp_path / "tiny-llama"
    hf_vocab = save_tiny_causal_lm(hf_dir)
    spec = tmp_path / "cpt.yaml"
    spec.write_text(SPEC.format(hf=hf_dir))
    plan = run_sweeper("plan", str(spec), "-v", address=ray_head[0])
    assert "nano-clm-dec20-mlm40-30" in plan.stdout and "hf-tiny-llama-mlm40-10" in plan.stdout, plan.stdout
    # Keys of its own in the URI (the environment holds others): they must stay with the driver.
    study = object_store("cpt/study").replace("testing:testing@", f"{KEY}:{SECRET}@")
    result = run_sweeper("run", str(spec), "--storage", study, address=ray_head[0])
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert KEY not in result.stdout + result.stderr and SECRET not in result.stdout + result.stderr, \
        "credentials are never printed"
    assert not list(ROOT.glob("s3*")), "nothing of the study lands in a local folder named after the URI"

    own = storage.join(study, "pretraining", "nano-clm-dec20-mlm40-30", "step-10")
    marker = storage.read_json(storage.join(own, "sweeper_checkpoint.json"))
    assert marker["objective"] == "mlm" and marker["phase"] == "mlm"
    assert marker["tokens_seen"] == (20 + 10) * 4 * 64, "continues the data stream after the source's 20 steps"

    hub = folders.local_copy(storage.join(study, "pretraining", "hf-tiny-llama-mlm40-10", "step-10"),
                             "sweeper_checkpoint.json")
    encoder = trainables.model.LlamaEncoderForMaskedLM.from_pretrained(hub)
    tokenizer = AutoTokenizer.from_pretrained(hub)
    assert tokenizer.mask_token == "[MASK]" and len(tokenizer) == hf_vocab + 1
    assert encoder.config.vocab_size == hf_vocab + 1 and encoder.config.hidden_size == 64
    source = LlamaForCausalLM.from_pretrained(hf_dir)
    assert not torch.equal(encoder.model.layers[0].mlp.up_proj.weight, source.model.layers[0].mlp.up_proj.weight)
    # 10 AdamW steps at lr <= 5e-4, each <= 1.02 lr (betas 0.9, 0.95): <= 5e-3; a fresh init is ~0.1 away.
    assert torch.allclose(encoder.model.layers[0].mlp.up_proj.weight, source.model.layers[0].mlp.up_proj.weight,
                          atol=1e-2), "trained 10 steps on from the hub weights, not from scratch"

    trials = read_table(StudyLayout(study), TRIALS).to_pandas()
    assert sorted(trials["checkpoint_id"]) == sorted(
        ["nano-clm-20", "nano-clm-20-10", "nano-clm-dec20-mlm40-30", "hf-tiny-llama-mlm40-10"])
    assert (trials["status"] == "ok").all()
    assert storage.exists(storage.join(study, "report.md"))
    assert storage.list_names(storage.join(study, "figures")), "figures uploaded beside the report"
    assert not storage.list_names(storage.join(study, "tune")), "Tune's scratch state is not kept"

    rerun = run_sweeper("run", str(spec), "--storage", study, address=ray_head[0])
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "3 already done" in rerun.stdout and "4 already recorded, 0 blocked by failed runs, 0 to run" in rerun.stdout
    assert len(read_table(StudyLayout(study), TRIALS)) == 4, "a rerun duplicates nothing"
    status = run_sweeper("status", study, address=ray_head[0])
    assert status.returncode == 0 and "3 done" in status.stdout and "4 ok" in status.stdout, (
        status.stdout + status.stderr
    )
    report = run_sweeper("report", study, address=ray_head[0])
    assert report.returncode == 0 and "[report] s3://sweeper-tests/" in report.stdout, report.stdout + report.stderr
    printed = "".join(done.stdout + done.stderr for done in (rerun, status, report))
    assert KEY not in printed and SECRET not in printed
    assert holding(objects_under(study), KEY, SECRET) == [], "no object of the study holds the keys"
