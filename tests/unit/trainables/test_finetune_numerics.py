"""Fine-tuning precision (`finetuning.precision`) and weight decay that spares biases and
normalisation weights (`finetuning.weight_decay_exempt`): the parameter groups, the keys (the
defaults are what every trial ran with before, and hash as before), the spec, and whole trials."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from torch import nn

from sweeper.contract.configs import AdamWConfig, FinetuneProtocol, TrialConfig, TrialRuntime
from sweeper.contract.registry import family_of, get_task
from trainables.backbones import HuggingFaceBackbone
from trainables.finetune_loop import parameter_groups, run_trial
from trainables.model import LlamaEncoderConfig, LlamaEncoderModel
from trainables.tasks import data as task_data
from trainables.tasks.classification import SequenceClassification
from trainables.tasks.packing import PackedBackbone



BACKBONE = {"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2}
PROTOCOL = FinetuneProtocol(learning_rate=3e-3, batch_size=8, max_steps=3, epochs=1.0, max_length=64,
                            warmup_ratio=0.1, optimizer=AdamWConfig())


def hugging_face_rule(model: nn.Module) -> set[str]:
    """The names the Hugging Face Trainer decays (its own method: it reads nothing of the Trainer)."""
    from transformers import Trainer

    return set(Trainer.get_decay_parameter_names(None, model))


def decayed_names(model: nn.Module) -> set[str]:
    decayed, spared = parameter_groups(model, "bias_and_norm")
    assert spared["weight_decay"] == 0.0 and "weight_decay" not in decayed  # the optimizer's own for the rest
    names = {id(p): name for name, p in model.named_parameters()}
    assert len(decayed["params"]) + len(spared["params"]) == len(names)
    return {names[id(p)] for p in decayed["params"]}


def classifier(backbone: nn.Module) -> nn.Module:
    return SequenceClassification.build(PackedBackbone(backbone), {"labels": ["a", "b", "c"]})


def test_the_study_encoder_spares_its_rms_norm_weights_and_the_head_bias():
    model = classifier(LlamaEncoderModel(LlamaEncoderConfig(**BACKBONE)))
    decayed = decayed_names(model)
    spared = {name for name, _ in model.named_parameters()} - decayed
    norms = {f"{name}.weight" for name, m in model.named_modules() if isinstance(m, nn.RMSNorm)}
    assert len(norms) == 2 * BACKBONE["num_hidden_layers"] + 1  # two per block and the final one
    assert spared == norms | {name for name, _ in model.named_parameters() if name.endswith("bias")}
    assert any(name.endswith("bias") for name in spared)  # the head's
    assert decayed == hugging_face_rule(model)


def test_a_hugging_face_bert_spares_what_the_trainer_spares():
    from transformers import AutoModel, BertConfig

    config = BertConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=64)
    model = classifier(HuggingFaceBackbone(AutoModel.from_config(config, attn_implementation="sdpa")))
    decayed = decayed_names(model)
    spared = {name for name, _ in model.named_parameters()} - decayed
    assert decayed == hugging_face_rule(model)
    layer_norms = {name for name, m in model.named_modules() if isinstance(m, nn.LayerNorm)}
    assert spared == {name for name, _ in model.named_parameters()
                      if name.endswith("bias") or name.rsplit(".", 1)[0] in layer_norms}
    assert len(layer_norms) == 2 * config.num_hidden_layers + 1  # attention and output per layer, embeddings
    assert all(name.endswith(("weight", "bias")) for name in spared) and not any("dense.weight" in n for n in spared)


def test_none_decays_every_parameter_as_before():
    model = classifier(LlamaEncoderModel(LlamaEncoderConfig(**BACKBONE)))
    assert [id(p) for p in parameter_groups(model, "none")] == [id(p) for p in model.parameters()]


def test_the_defaults_hash_as_before_and_each_other_value_gets_its_own_key():
    before = PROTOCOL.key_fields()
    assert "precision" not in before and "weight_decay_exempt" not in before  # the pinned layout
    texts = {str(sorted(replace(PROTOCOL, **change).key_fields().items())) for change in
             ({}, {"precision": "bf16"}, {"weight_decay_exempt": "bias_and_norm"},
              {"precision": "bf16", "weight_decay_exempt": "bias_and_norm"})}
    assert len(texts) == 4


def test_the_spec_takes_the_settings_and_names_a_bad_value():
    from sweeper.spec.finetuning import FinetuningSpec
    from sweeper.spec.parsing import build_dataclass
    from sweeper.spec.reading import Context, LineIndex, SpecError

    context = Context("x.yaml", LineIndex(""))
    spec = build_dataclass(FinetuningSpec, {"tasks": ["sst2"], "precision": "bf16",
                                            "weight_decay_exempt": "bias_and_norm"}, "finetuning", context)
    assert (spec.precision, spec.weight_decay_exempt) == ("bf16", "bias_and_norm")
    default = build_dataclass(FinetuningSpec, {"tasks": ["sst2"]}, "finetuning", context)
    assert (default.precision, default.weight_decay_exempt) == ("fp32", "none")
    with pytest.raises(SpecError, match="precision"):
        build_dataclass(FinetuningSpec, {"tasks": ["sst2"], "precision": "fp16"}, "finetuning", context)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, wordpiece_dir):
    task = get_task("wordnet-supersense-cls")
    folder = tmp_path_factory.mktemp("cls")
    task_data.prepare_task_data(task, family_of(task.family).implementation, wordpiece_dir, 64, str(folder),
                                64, 32, {})
    return str(folder)


def test_bf16_weights_and_spared_norms_train_a_trial(prepared):
    task = get_task("wordnet-supersense-cls")
    results = {}
    for precision, exempt in (("fp32", "none"), ("fp32", "bias_and_norm"), ("bf16", "bias_and_norm")):
        results[precision, exempt] = run_trial(TrialConfig(
            trial_key=f"{precision}-{exempt}", task=task, family=family_of(task.family).implementation, seed=0,
            checkpoint_path=None, protocol=replace(PROTOCOL, precision=precision, weight_decay_exempt=exempt),
            task_data_dir=prepared, runtime=TrialRuntime(micro_batch_size=4, eval_batch_size=16),
            random_init_config=BACKBONE))
    losses = {key: result["train_loss"] for key, result in results.items()}
    assert all(r["status"] == "ok" and r["train_steps"] == 3 and math.isfinite(r["test_score"])
               for r in results.values()), results
    assert len(set(losses.values())) == 3, losses  # each setting trains other weights
    # bf16 keeps 8 bits of mantissa: its loss stays within a few 1e-2 of the float32 one's
    assert np.isclose(losses["bf16", "bias_and_norm"], losses["fp32", "bias_and_norm"], rtol=5e-2)
