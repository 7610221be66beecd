"""diffusion-infer: the tiny pipeline end to end, the SDXL configs' sizes, counted FLOPs against the
transformer formula, build_step."""

from __future__ import annotations

import pytest
import torch

from gapbench import devices
from gapbench.workloads import get
from gapbench.workloads.base import Context
from gapbench.workloads.models import diffusion_infer as di
from gapbench.workloads.models.flops import infer_flops_per_token, peak_tflops

CPU = devices.resolve("cpu")


def run_one(preset="tiny", **options):
    w = di.DiffusionInfer()
    c = Context(device=CPU, preset=preset, budget_s=300, min_time_s=0.05, repeats=3, options=options)
    (v,) = w.variants(preset, c)
    return v, w.run(v, c)


def test_registered_name_resolves_to_this_workload():
    assert isinstance(get("diffusion-infer"), di.DiffusionInfer)


def test_tiny_end_to_end():
    v, m = run_one()
    assert m.status == "ok", m.reason
    assert m.unit == "images/s" and m.value > 0
    assert v.params["steps"] == 4 and v.params["image_size"] == 128
    f = m.metrics["stage_flops"]
    assert m.flops == v.flops == f["text"] + 4 * f["unet_step"] + f["vae"]
    stages = m.metrics["stages_s"]
    assert stages["text_s"] > 0 and stages["unet_step_s"] > 0 and stages["vae_s"] > 0
    assert stages["unet_total_s"] == pytest.approx(4 * stages["unet_step_s"])
    assert m.metrics["first_step_s"] > 0 and "mfu" in m.metrics
    assert m.metrics["latent_size"] == 16


def test_steps_batch_and_eager_attention_options():
    v, m = run_one(steps=2, batch_size=2, attention="eager", dtype="fp32")
    assert m.status == "ok", m.reason
    assert (v.params["steps"], v.params["batch_size"], v.params["dtype"]) == (2, 2, "fp32")
    assert m.metrics["batch_size"] == 2
    # images/s counts both images of a call
    assert m.value == pytest.approx(2 / m.metrics["steady_call_s"], rel=0.5)


def test_pipeline_output_is_a_finite_image_of_the_preset_size():
    p = di.PRESETS["tiny"]
    torch.manual_seed(0)
    pipe = di.Pipeline(p, torch.device("cpu"), torch.float32)
    image = pipe(2)
    assert image.shape == (1, 3, 128, 128) and bool(torch.isfinite(image).all())
    embeds, pooled, time_ids = pipe.encode()
    assert embeds.shape == (2, 77, p.unet["cross_attention_dim"])  # CFG: zero negative half + prompt half
    assert bool((embeds[0] == 0).all()) and not bool((embeds[1] == 0).all())
    assert pooled.shape == (2, p.text_2["projection_dim"]) and time_ids.shape == (2, 6)


def test_sdxl_module_sizes():
    counts = di.params_of("sdxl")
    assert counts["unet"] == pytest.approx(2.567e9, rel=0.001)
    assert counts["vae"] == pytest.approx(83.65e6, rel=0.001)
    assert counts["text_1"] == pytest.approx(123.1e6, rel=0.001)
    assert counts["text_2"] == pytest.approx(694.7e6, rel=0.001)
    # the UNet's conditioning widths are the text encoders' outputs, as in SDXL
    assert di.SDXL_UNET["cross_attention_dim"] == di.SDXL_TEXT_1["hidden_size"] + di.SDXL_TEXT_2["hidden_size"]
    assert di.SDXL_UNET["projection_class_embeddings_input_dim"] == 6 * 256 + di.SDXL_TEXT_2["projection_dim"]


def test_counted_text_flops_match_the_transformer_formula():
    """The counted text stage equals 2·N + 4·L·h·s per token for both CLIP towers, plus the projection
    of the pooled token."""
    f = di.stage_flops("sdxl", 1)
    total = 0.0
    for cfg in (di.SDXL_TEXT_1, di.SDXL_TEXT_2):
        h, i, n_layers, s = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], 77
        total += s * infer_flops_per_token(n_layers * (4 * h * h + 2 * h * i), n_layers, h, s)
    total += 2 * di.SDXL_TEXT_2["hidden_size"] * di.SDXL_TEXT_2["projection_dim"]
    assert f["text"] == total
    # a 1024² SDXL UNet evaluation (both CFG halves) is several TFLOPs, the decode about 10
    assert 10e12 < f["unet_step"] < 20e12 and 5e12 < f["vae"] < 20e12


def test_build_step_under_fake_tensors_and_for_real():
    from torch._subclasses.fake_tensor import FakeTensorMode

    w = di.DiffusionInfer()
    with FakeTensorMode():
        w.build_step("tiny", torch.device("cpu"))()
    w.build_step("tiny", torch.device("cpu"))()


def test_sdxl_on_a_small_budget_is_too_slow_not_a_hang():
    w = di.DiffusionInfer()
    c = Context(device=CPU, preset="sdxl", budget_s=5, min_time_s=0.05, repeats=3, options={})
    (v,) = w.variants("sdxl", c)
    if peak_tflops(CPU, v.params["dtype"]) is None:
        pytest.skip("gapbench knows no peak for this CPU, so no estimate before building SDXL")
    assert v.flops > 30 * 10e12
    m = w.run(v, c)
    assert m.status == "too_slow" and "dense" in m.reason, m.reason
    assert m.metrics["estimated_time_per_iter_s"] > 5


def test_auto_batch():
    v, m = run_one(batch_size="auto", steps=1)
    assert v.params["batch_size"] == "auto" and v.flops is None
    assert m.status == "ok", m.reason
    b = m.metrics["batch_size"]
    assert 1 <= b <= 4 and [b, True] in m.metrics["auto_batch_tried"]
    assert m.flops == di.pipeline_flops("tiny", b, 1)
