"""Continued MLM pretraining of a causal LM as its own model (trainables.causal_mlm): four
families built offline from transformers' config classes (tests/tiny_causal_lms.py) train with
MLM on packed, document-separated rows, their loss falls, their checkpoints load with plain
`AutoModel`, a resume equals the uninterrupted run, and attention that stays causal is refused.
The plan side (sweeper.plan.hf_init): sizes from config.json, families transformers does not
ship refused at plan time, `hf_init` choosing the path."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from sweeper.plan.hf_init import HfSourceProblem, resolve_hf_init
from sweeper.plan.load import load_study
from sweeper.contract.text_sources import iter_corpus_texts
from trainables.causal_mlm import CausalLMForMaskedLM, attention_check, masked_lm_from_causal_lm, \
    masked_lm_from_checkpoint
from trainables.objectives import LossContext, RowDraws, TokenBatch, mlm_loss
from trainables.pretrain_loop import read_training_state, save_hf, write_training_state
from trainables.train_step import train_step

from cli_process import sweeper_cli
from tiny_causal_lms import CAUSAL_KINDS, build_tiny_causal_lm


CPU = torch.device("cpu")
SETTINGS = {"mask_ratio": 0.4, "random_replace": 0.0, "keep_original": 0.0}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("causal-lms")
    return {kind: build_tiny_causal_lm(kind, root / kind) for kind in CAUSAL_KINDS}


def packed_batch(folder, rows: int = 4, seq: int = 48) -> tuple[TokenBatch, int]:
    """Rows of WordNet documents tokenised by the source's tokenizer, each closed by EOS, packed
    back to back (document ids, positions restarting at 0); the mask id is one past the vocabulary."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    stream, documents, positions = [], [], []
    for doc, text in enumerate(iter_corpus_texts("wordnet", "text", 200)):
        ids = tokenizer(text)["input_ids"][:seq // 4] + [tokenizer.eos_token_id]  # several per row
        stream += ids
        documents += [doc] * len(ids)
        positions += list(range(len(ids)))
        if len(stream) >= rows * seq:
            break
    shape = (rows, seq)
    ids, docs, pos = (torch.tensor(x[:rows * seq]).view(shape) for x in (stream, documents, positions))
    docs = docs - docs[:, :1] + torch.arange(rows)[:, None] * 1000  # a row starts a document of its own
    pos = torch.where(docs == docs[:, :1], pos - pos[:, :1], pos)
    special = ids == tokenizer.eos_token_id
    return TokenBatch(ids, docs, pos, special), len(tokenizer)


def train(model, batch, mask_id, steps: int, start: int = 0, optimizer=None):
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
    losses = []
    for step in range(start, start + steps):
        context = LossContext(draws=RowDraws(0, step), mask_token_id=mask_id, vocab_size=model.config.vocab_size)
        losses.append(train_step(model, optimizer, batch, mlm_loss, SETTINGS, context, micro_batch_size=2).loss)
    return losses, optimizer


@pytest.mark.parametrize("kind", CAUSAL_KINDS)
def test_each_family_continues_mlm_pretraining_and_its_loss_falls(sources, kind, tmp_path):
    batch, tokens = packed_batch(sources[kind])
    model = masked_lm_from_causal_lm(str(sources[kind]), tokens + 1)  # + [MASK]
    assert attention_check(model, CPU).endswith("bidirectional, packed")
    embeddings = model.causal_lm.get_input_embeddings().weight
    assert embeddings.shape[0] == tokens + 1
    # grow_rows' float32 mean of the old rows (|x| ~ 0.02): summed in another order <= 1e-6 apart.
    assert torch.allclose(embeddings[tokens], embeddings[:tokens].mean(0), atol=1e-6), "[MASK] starts at the mean"
    tied = model.causal_lm.get_output_embeddings().weight is embeddings
    assert tied == model.config.tie_word_embeddings, "the LM head stays tied or untied as the family has it"
    model.train()
    losses, _ = train(model, batch, tokens, steps=12)
    # A random 64-wide model starts at ln(1537) ~ 7.3; 12 AdamW steps at 3e-3 on one batch bring
    # the masked tokens' loss down by well over a nat (measured 2-4): 15 % is far from noise.
    assert losses[-1] < 0.85 * losses[0], losses

    save_hf(model, tmp_path, None)
    plain = AutoModel.from_pretrained(tmp_path)  # the fine-tuning grid's load, no custom code
    assert plain.config.model_type == model.config.model_type and plain.config.vocab_size == tokens + 1
    trained = model.causal_lm.base_model.state_dict()
    assert all(torch.equal(value, trained[key]) for key, value in plain.state_dict().items())


def test_padded_documents_compute_what_the_document_mask_computes(sources):
    """The fallback of a family that fails the packing probe: each document in its own row."""
    batch, tokens = packed_batch(sources["gemma3"])
    model = masked_lm_from_causal_lm(str(sources["gemma3"]), tokens + 1).eval()
    with torch.no_grad():
        packed = model(batch.input_ids, document_ids=batch.document_ids, position_ids=batch.position_ids).logits
        model.padded = True
        padded = model(batch.input_ids, document_ids=batch.document_ids, position_ids=batch.position_ids).logits
    scale = packed.abs().max()
    # The same attention summed over other key counts: float32 rounding, ~1e-7 of the scale.
    assert (packed - padded).abs().max() <= 1e-5 * scale
    model.padded = False
    with torch.no_grad():  # and the document mask matters: one row without it moves the logits
        leaky = model(batch.input_ids, position_ids=batch.position_ids).logits
    assert (packed - leaky).abs().max() > 1e-2 * scale


def test_resume_from_a_checkpoint_equals_the_uninterrupted_run(sources, tmp_path):
    """Weights (tied embeddings, the grown vocabulary) and AdamW state through the files a
    checkpoint holds, then the same steps: bit for bit the run that never stopped."""
    folder = sources["modernbert-decoder"]
    batch, tokens = packed_batch(folder)
    whole = masked_lm_from_causal_lm(str(folder), tokens + 1)
    whole.train()
    train(whole, batch, tokens, steps=6)

    first = masked_lm_from_causal_lm(str(folder), tokens + 1)
    first.train()
    _, optimizer = train(first, batch, tokens, steps=3)
    save_hf(first, tmp_path, None)
    write_training_state(tmp_path, optimizer.state_dict(), 3, [])
    resumed = masked_lm_from_checkpoint(tmp_path)
    attention_check(resumed, CPU)
    resumed.train()
    optimizer = torch.optim.AdamW(resumed.parameters(), lr=3e-3, betas=(0.9, 0.95))
    optimizer.load_state_dict(read_training_state(tmp_path / "training_state.pt")["optimizer"])
    train(resumed, batch, tokens, steps=3, start=3, optimizer=optimizer)
    expected = dict(whole.named_parameters())
    assert all(torch.equal(param, expected[name]) for name, param in resumed.named_parameters())


def masked(model: CausalLMForMaskedLM, replace) -> CausalLMForMaskedLM:
    """`model` whose base model is handed `replace(mask)` in place of the adapter's mask: a
    family that reads the mask its own way."""
    def hook(module, args, kwargs):
        kwargs["attention_mask"] = replace(kwargs["attention_mask"])
        return args, kwargs

    model.causal_lm.base_model.register_forward_pre_hook(hook, with_kwargs=True)
    return model


def test_attention_that_stays_causal_is_refused_and_a_leaky_one_trains_padded(sources):
    folder = str(sources["qwen3"])
    causal = masked(masked_lm_from_causal_lm(folder, 2000),
                    lambda mask: torch.ones(mask.shape[-1], mask.shape[-1], dtype=torch.bool).tril()[None, None])
    with pytest.raises(ValueError, match="cannot be made bidirectional.*never trained causally"):
        attention_check(causal, CPU)
    leaky = masked(masked_lm_from_causal_lm(folder, 2000), lambda mask: torch.ones_like(mask))
    line = attention_check(leaky, CPU)
    assert leaky.padded and leaky.attention.startswith("padded (packing probe failed") and leaky.attention in line


# --- the plan: config.json only ------------------------------------------------------------

SPEC = """
study: native
model: {{preset: nano}}
data: {{vocab_size: 1024, seq_len: 64, max_documents: 200}}
pretraining:
  steps: 20
  global_batch_size: 4
  warmup_steps: 2
  decay_steps: 2
  runs:
    - objective: mlm
      init_from: [{sources}]
      steps: [10]{extra}
finetuning: {{tasks: [wordnet-supersense-cls], learning_rates: [0.001], seeds: [0]}}
"""


def spec_file(tmp_path, sources: list[str], extra: str = "", resources: str = ""):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(sources=", ".join(f'"hf:{s}"' for s in sources), extra=extra) + resources)
    return path


def test_plan_sizes_native_runs_from_config_json_and_keeps_llama_converted(sources, tmp_path):
    from test_convert import tiny_llama

    tiny_llama(tmp_path / "llama")
    plan = load_study(spec_file(tmp_path, [str(sources["qwen3"]), str(tmp_path / "llama")])).plan
    runs = {run.init_from_hf: run for run in plan.runs}
    qwen, llama = runs[str(sources["qwen3"])], runs[str(tmp_path / "llama")]
    assert (qwen.hf_init, llama.hf_init) == ("native", "convert")
    assert "hf_init" in qwen.identity and "hf_init" not in llama.identity, "converted runs keep their keys"
    assert qwen.model_config == {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                 "num_key_value_heads": 2, "vocab_size": 1536, "intermediate_size": 128}
    assert resolve_hf_init(str(tmp_path / "llama"), "native").mode == "native", "the spec may choose"
    done = sweeper_cli("plan", str(spec_file(tmp_path, [str(sources["qwen3"])])), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "sized at run time" not in done.stdout and "GPU-hours" in done.stdout, done.stdout


@pytest.mark.parametrize("case", ["unknown family", "not a causal LM", "convert refused", "fsdp"])
def test_plan_refuses_what_cannot_be_continued_naming_file_and_line(sources, tmp_path, case):
    folder = tmp_path / "model"
    folder.mkdir()
    config = json.loads((sources["olmo2"] / "config.json").read_text())
    extra, resources, expected = "", "", None
    if case == "unknown family":
        config["model_type"], expected = "olmo99", ("init_from[0]", "'olmo99' is not a")
    elif case == "not a causal LM":
        config["model_type"], expected = "modernbert", ("init_from[0]", "'modernbert' is not a causal LM")
    elif case == "convert refused":
        extra, expected = "\n      hf_init: convert", ("hf_init", "cannot be converted to the encoder exactly")
    else:
        resources = "resources: {pretraining_workers: 2, sharding: fsdp}\n"
        expected = ("resources.sharding", "trains with DDP, not FSDP2")
    (folder / "config.json").write_text(json.dumps(config))
    path = spec_file(tmp_path, [str(folder)], extra, resources)
    done = sweeper_cli("plan", str(path), timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{path}:" in done.stderr and expected[0] in done.stderr and expected[1] in done.stderr, done.stderr
    with pytest.raises(HfSourceProblem, match="cannot read config.json"):
        resolve_hf_init(str(tmp_path / "nowhere-org/none"))


def test_activation_checkpointing_recomputes_the_same_gradients(sources):
    """The family's own checkpointing (`configure` turns it on under activation_checkpointing)."""
    batch, tokens = packed_batch(sources["olmo2"])
    grads = []
    for checkpointing in (False, True):
        model = masked_lm_from_causal_lm(str(sources["olmo2"]), tokens + 1)
        model.train()
        if checkpointing:
            assert model.activation_checkpointing_enable({"use_reentrant": False})
            assert model.causal_lm.is_activation_checkpointing
        context = LossContext(draws=RowDraws(0, 0), mask_token_id=tokens, vocab_size=tokens + 1)
        summed, _ = mlm_loss(model, batch, SETTINGS, context)
        summed.backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
    # The same float32 ops recomputed: equal up to kernel-level reordering (none expected on CPU).
    assert all(torch.allclose(grads[1][name], grad, atol=1e-6, rtol=1e-5) for name, grad in grads[0].items())


def test_auto_converts_only_where_the_conversion_is_exact(tmp_path):
    from test_convert import tiny_llama

    tiny_llama(tmp_path / "exact")
    tiny_llama(tmp_path / "biased", attention_bias=True)
    tiny_llama(tmp_path / "scaled", rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    modes = {name: resolve_hf_init(str(tmp_path / name)).mode for name in ("exact", "biased", "scaled")}
    assert modes == {"exact": "convert", "biased": "native", "scaled": "native"}
