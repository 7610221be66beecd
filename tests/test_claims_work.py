"""The FLOPs per unit of work that gapbench claims holds as data equal what gapbench's own formulas give."""

import pytest

from gapbench.claims.match import works


def test_training_work_equals_the_formulas():
    from gapbench.workloads.models import bert_finetune, llm_train

    w = works()
    for key, preset in (("llama2-70b-train", "llama2-70b-slice"), ("llama2-13b-train", "llama2-13b"),
                        ("llama2-7b-train", "llama2-7b")):
        p = llm_train.PRESETS[preset]
        cfg = p.full_config or p.config
        assert w[key]["flops_per_unit"] == llm_train.llama_train_flops_per_token(cfg, p.seq_len), key
    b = bert_finetune.PRESETS["bert-large-128"]
    assert w["bert-large-128"]["flops_per_unit"] == bert_finetune.bert_train_flops(b.config, 1, b.seq_len)


@pytest.mark.slow
def test_sdxl_work_equals_the_counted_flops():
    from gapbench.workloads.models import diffusion_infer

    f = diffusion_infer.stage_flops("sdxl", 1)
    w = works()["sdxl"]
    p = diffusion_infer.PRESETS["sdxl"]
    assert (w["text_flops"], w["unet_step_flops"], w["vae_flops"]) == (f["text"], f["unet_step"], f["vae"])
    assert w["steps"] == p.steps and w["flops_per_unit"] == f["text"] + p.steps * f["unet_step"] + f["vae"]
