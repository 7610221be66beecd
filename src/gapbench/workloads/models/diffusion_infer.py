"""Diffusion inference: an SDXL-class text-to-image pipeline from diffusers/transformers configs, random weights.

Run by hand as StableDiffusionXLPipeline runs it: two CLIP text encoders on synthetic token ids (penultimate
hidden states concatenated, pooled projection of the second), zero negative embeddings (SDXL's default for an
empty negative prompt), the UNet denoising loop with classifier-free guidance (both halves in one batch of 2)
under the Euler scheduler, and the VAE decode. One iteration = one call generating `batch_size` images.
Value: images/s; the per-stage split (text, UNet per step, VAE) is in metrics.

FLOPs are counted, not estimated: torch.utils.flop_counter on a shape-only (meta-device) pass of each stage,
because a UNet applies its weights at several resolutions and 2·N per pixel does not describe it (docs/models.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch

from gapbench.results import Measurement
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.models.base import ModelWorkload
from gapbench.workloads.models.flops import count_flops, mfu, peak_tflops, time_at_peak_s, too_slow_at_peak
from gapbench.workloads.models.memory import PeakMemory, host_memory_shortfall, largest_batch, release_memory
from gapbench.workloads.models.options import DiffusionOptions
from gapbench.workloads.models.precision import (
    batch_option,
    creating_dtype,
    is_unavailable_kernel,
    no_kernel_reason,
    sdpa_context,
)
from gapbench.workloads.models.prepare import missing_dependency
from gapbench.workloads.models.train import Clock

SDXL_UNET = {
    "act_fn": "silu", "addition_embed_type": "text_time", "addition_embed_type_num_heads": 64,
    "addition_time_embed_dim": 256, "attention_head_dim": [5, 10, 20], "block_out_channels": [320, 640, 1280],
    "center_input_sample": False, "cross_attention_dim": 2048,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "downsample_padding": 1, "flip_sin_to_cos": True, "freq_shift": 0, "in_channels": 4, "layers_per_block": 2,
    "mid_block_scale_factor": 1, "mid_block_type": "UNetMidBlock2DCrossAttn", "norm_eps": 1e-05,
    "norm_num_groups": 32, "out_channels": 4, "projection_class_embeddings_input_dim": 2816, "sample_size": 128,
    "transformer_layers_per_block": [1, 2, 10],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"], "use_linear_projection": True,
}
SDXL_VAE = {
    "act_fn": "silu", "block_out_channels": [128, 256, 512, 512], "down_block_types": ["DownEncoderBlock2D"] * 4,
    "in_channels": 3, "latent_channels": 4, "layers_per_block": 2, "norm_num_groups": 32, "out_channels": 3,
    "sample_size": 1024, "scaling_factor": 0.13025, "up_block_types": ["UpDecoderBlock2D"] * 4,
    "force_upcast": True,
}
# CLIP ViT-L/14 text tower and OpenCLIP ViT-bigG/14 text tower (with its projection), as SDXL ships them
SDXL_TEXT_1 = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                   num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu", projection_dim=768,
                   bos_token_id=49406, eos_token_id=49407, pad_token_id=49407)
SDXL_TEXT_2 = dict(SDXL_TEXT_1, hidden_size=1280, intermediate_size=5120, num_hidden_layers=32,
                   num_attention_heads=20, hidden_act="gelu", projection_dim=1280)
EULER = dict(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
             prediction_type="epsilon", interpolation_type="linear", use_karras_sigmas=False,
             timestep_spacing="leading", steps_offset=1)

TINY_UNET = dict(SDXL_UNET, block_out_channels=[32, 64], attention_head_dim=[2, 4], layers_per_block=1,
                 down_block_types=["DownBlock2D", "CrossAttnDownBlock2D"],
                 up_block_types=["CrossAttnUpBlock2D", "UpBlock2D"], transformer_layers_per_block=[1, 1],
                 cross_attention_dim=64, addition_time_embed_dim=8, projection_class_embeddings_input_dim=6 * 8 + 32,
                 addition_embed_type_num_heads=4, sample_size=16)
TINY_VAE = dict(SDXL_VAE, block_out_channels=[32, 32, 32, 32], layers_per_block=1, sample_size=128)
TINY_TEXT_1 = dict(SDXL_TEXT_1, vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=4, projection_dim=32, bos_token_id=998, eos_token_id=999, pad_token_id=999)
TINY_TEXT_2 = dict(TINY_TEXT_1, hidden_act="gelu")

PROMPT_TOKENS = 20  # synthetic prompt length before EOS and padding to 77
GUIDANCE = 5.0  # SDXL's default guidance scale


@dataclass(frozen=True)
class DiffusionPreset:
    description: str
    unet: dict
    vae: dict
    text_1: dict
    text_2: dict
    image_size: int  # pixels per side; latents are image_size/8
    steps: int
    batch_size: int


PRESETS: dict[str, DiffusionPreset] = {
    "tiny": DiffusionPreset("SDXL-shaped pipeline scaled down: 128×128 images (16×16 latents), 4 steps",
                            TINY_UNET, TINY_VAE, TINY_TEXT_1, TINY_TEXT_2, 128, 4, 1),
    "sdxl": DiffusionPreset("SDXL base: 2.6B-param UNet, both text encoders, VAE; 1024×1024 (128×128 latents), "
                            "30 Euler steps, guidance 5, batch 1", SDXL_UNET, SDXL_VAE, SDXL_TEXT_1, SDXL_TEXT_2,
                            1024, 30, 1),
}


class Pipeline:
    """The SDXL text-to-image pipeline's stages over modules built from configs."""

    def __init__(self, p: DiffusionPreset, device: torch.device, dtype: torch.dtype, attention: str = "sdpa",
                 sdpa_backends: list | None = None, compile: bool = False, unet_only: bool = False):
        from diffusers import AutoencoderKL, EulerDiscreteScheduler, UNet2DConditionModel
        from diffusers.models.attention_processor import AttnProcessor
        from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

        self.p, self.device, self.dtype, self.sdpa_backends = p, device, dtype, sdpa_backends
        self.latent = p.image_size // 8
        # SDXL's VAE overflows in fp16; the pipeline upcasts it (force_upcast)
        self.vae_dtype = torch.float32 if dtype == torch.float16 and p.vae.get("force_upcast") else dtype
        with torch.device(device):
            with creating_dtype(dtype):
                self.unet = UNet2DConditionModel.from_config(p.unet).eval()
                if not unet_only:
                    self.text_1 = CLIPTextModel(CLIPTextConfig(**p.text_1, attn_implementation=attention)).eval()
                    self.text_2 = CLIPTextModelWithProjection(
                        CLIPTextConfig(**p.text_2, attn_implementation=attention)).eval()
            if not unet_only:
                with creating_dtype(self.vae_dtype):
                    self.vae = AutoencoderKL.from_config(p.vae).eval()
        if attention == "eager":
            self.unet.set_attn_processor(AttnProcessor())
            if not unet_only:
                self.vae.set_attn_processor(AttnProcessor())
        self.run_unet = torch.compile(self.unet) if compile else self.unet
        self.scheduler = EulerDiscreteScheduler(**EULER)
        self.ids = _prompt_ids(1, p.text_1, device)

    def set_batch(self, batch: int) -> None:
        self.ids = _prompt_ids(batch, self.p.text_1, self.device)

    @property
    def batch(self) -> int:
        return self.ids.shape[0]

    def encode(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(prompt embeddings, pooled embeddings, time ids), each doubled for classifier-free guidance."""
        out_1 = self.text_1(self.ids, output_hidden_states=True)
        out_2 = self.text_2(self.ids, output_hidden_states=True)
        prompt = torch.cat([out_1.hidden_states[-2], out_2.hidden_states[-2]], dim=-1)
        pooled = out_2.text_embeds
        s = self.p.image_size
        time_ids = torch.tensor([[s, s, 0, 0, s, s]], device=self.device, dtype=prompt.dtype).repeat(2 * self.batch, 1)
        return (torch.cat([torch.zeros_like(prompt), prompt]), torch.cat([torch.zeros_like(pooled), pooled]),
                time_ids)

    def initial_latents(self) -> torch.Tensor:
        g = torch.Generator(device=self.device).manual_seed(0)
        shape = (self.batch, self.p.unet["in_channels"], self.latent, self.latent)
        return torch.randn(shape, generator=g, device=self.device, dtype=self.dtype)

    def unet_step(self, latents: torch.Tensor, t, cond) -> torch.Tensor:
        x = self.scheduler.scale_model_input(torch.cat([latents, latents]), t)
        return self.scheduler.step(self.guided_noise(x, t, cond), t, latents, return_dict=False)[0]

    def guided_noise(self, x: torch.Tensor, t, cond) -> torch.Tensor:
        """The UNet on both halves of the guidance batch, combined with the guidance scale."""
        prompt, pooled, time_ids = cond
        with sdpa_context(self.sdpa_backends):
            noise = self.run_unet(x, t, encoder_hidden_states=prompt,
                                  added_cond_kwargs={"text_embeds": pooled, "time_ids": time_ids}).sample
        uncond, text = noise.chunk(2)
        return uncond + GUIDANCE * (text - uncond)

    def denoise(self, cond, steps: int) -> torch.Tensor:
        self.scheduler.set_timesteps(steps, device=self.device)
        latents = self.initial_latents() * self.scheduler.init_noise_sigma
        for t in self.scheduler.timesteps:
            latents = self.unet_step(latents, t, cond)
        return latents

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        z = latents.to(self.vae_dtype) / self.vae.config.scaling_factor
        with sdpa_context(self.sdpa_backends):
            return self.vae.decode(z).sample

    def __call__(self, steps: int) -> torch.Tensor:
        with torch.inference_mode():
            return self.decode(self.denoise(self.encode(), steps))


def _prompt_ids(batch: int, text_cfg: dict, device) -> torch.Tensor:
    """BOS, PROMPT_TOKENS random tokens, EOS, padded with EOS to 77 (CLIP's tokenizer layout)."""
    g = torch.Generator().manual_seed(7)
    n = text_cfg["max_position_embeddings"]
    body = torch.randint(0, text_cfg["bos_token_id"], (batch, PROMPT_TOKENS), generator=g)
    ids = torch.full((batch, n), text_cfg["eos_token_id"], dtype=torch.long)
    ids[:, 0] = text_cfg["bos_token_id"]
    ids[:, 1:1 + PROMPT_TOKENS] = body
    return ids.to(device)


@lru_cache(maxsize=8)
def stage_flops(preset: str, batch: int) -> dict[str, float]:
    """Model FLOPs of each stage for `batch` images, counted on a meta-device pass (no memory, no compute)."""
    p = _preset(preset)
    pipe = Pipeline(p, torch.device("meta"), torch.float32)
    pipe.set_batch(batch)
    with torch.no_grad():
        cond_holder = {}
        text = count_flops(lambda: cond_holder.setdefault("c", pipe.encode()))
        cond = cond_holder["c"]
        lat = torch.empty(batch, p.unet["in_channels"], pipe.latent, pipe.latent, device="meta")
        t = torch.tensor(999.0, device="meta")
        unet = count_flops(lambda: pipe.unet(torch.cat([lat, lat]), t, encoder_hidden_states=cond[0],
                                                added_cond_kwargs={"text_embeds": cond[1], "time_ids": cond[2]}))
        vae = count_flops(lambda: pipe.vae.decode(lat).sample)
    return {"text": text, "unet_step": unet, "vae": vae}


def pipeline_flops(preset: str, batch: int, steps: int) -> float:
    f = stage_flops(preset, batch)
    return f["text"] + steps * f["unet_step"] + f["vae"]


@lru_cache(maxsize=8)
def params_of(preset: str) -> dict[str, int]:
    """Parameters of each module of the preset's pipeline (counted on the meta device)."""
    pipe = Pipeline(_preset(preset), torch.device("meta"), torch.float32)
    return {name: sum(x.numel() for x in getattr(pipe, name).parameters())
            for name in ("text_1", "text_2", "unet", "vae")}


class DiffusionInfer(ModelWorkload):
    name = "diffusion-infer"
    options = DiffusionOptions
    requires = ("transformers", "diffusers")
    training = False
    unit = "images/s"
    unit_help = "generated images per second: text encoders + N guided UNet steps + VAE decode per image"
    description = "SDXL-class text-to-image inference (diffusers UNet/VAE, CLIP text encoders, random weights)"
    presets = {k: p.description for k, p in PRESETS.items()}

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        p = _preset(preset)
        o = self.opts(ctx)
        batch = batch_option(o, p.batch_size)
        steps = o.steps or p.steps
        flops = None
        if batch != "auto" and not missing_dependency(*self.requires):
            flops = pipeline_flops(preset, batch, steps)
        out = []
        for precision in self.precisions(ctx):
            out.append(Variant({"model": preset, "image_size": p.image_size, "steps": steps, "guidance": GUIDANCE,
                                "scheduler": "euler", "batch_size": batch, **self.model_params(ctx, precision)},
                               flops=flops))
        return out

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        from gapbench.timing import TooSlow, time_fn, time_once

        prep = self.prepare(variant, ctx)
        if isinstance(prep, Measurement):
            return prep
        precision, attn_impl, backends = prep.precision, prep.attn_impl, prep.sdpa_backends
        p = _preset(ctx.preset)
        prm = variant.params
        steps, device = prm["steps"], ctx.device
        counts = params_of(ctx.preset)
        short = host_memory_shortfall(sum(counts.values()) * precision.torch_dtype.itemsize + 2 * 2**30, device)
        if short:
            return self.failed(variant, ctx, "oom", short)

        if prm["batch_size"] != "auto":  # even at the dense peak, would five calls fit the budget?
            floor = time_at_peak_s(pipeline_flops(ctx.preset, prm["batch_size"], steps), device,
                                      precision.peak_dtype(device))
            if floor is not None and floor * 5 > ctx.budget_s:
                return too_slow_at_peak(self, variant, ctx, floor, precision.peak_dtype(device))
        clock = Clock(ctx.budget_s)
        memory = PeakMemory(device)
        memory.reset()
        torch.manual_seed(0)
        try:
            pipe = Pipeline(p, device.torch_device, precision.torch_dtype, attn_impl, backends, prm["compile"])
            metrics: dict = {"params": dict(counts), "dtype": precision.dtype, "vae_dtype": str(pipe.vae_dtype)[6:],
                             "latent_size": pipe.latent}
            batch = prm["batch_size"]
            held: dict = {}

            def probe(b: int) -> None:
                """Each stage once at batch b, cold (the UNet's first call carries any compile)."""
                pipe.set_batch(b)
                with device.math_mode(precision.dtype):
                    held["cold"] = _stage_times(pipe, device, time_once, steps=1)

            if batch == "auto":
                def try_batch(b: int) -> None:
                    pipe.set_batch(b)
                    with torch.inference_mode(), device.math_mode(precision.dtype):
                        pipe.decode(pipe.denoise(pipe.encode(), 1))
                    device.synchronize()

                search = largest_batch(try_batch, 64 if device.is_accelerator else 4, device=device)
                release_memory(device)
                memory.reset()  # the failed tries' allocations are not this batch's peak
                # a batch that fitted can stop fitting once memory is fragmented: keep backing off
                again = largest_batch(probe, search.batch_size, refine=0, device=device)
                batch = again.batch_size
                metrics["auto_batch_tried"] = [list(t) for t in search.tried + again.tried]
            else:
                probe(batch)
            cold = held["cold"]
            flops = pipeline_flops(ctx.preset, batch, steps)
            variant = Variant(variant.params, flops=flops)
            metrics.update(batch_size=batch, flops_per_image=flops / batch,
                           stage_flops=stage_flops(ctx.preset, batch))
            metrics["first_step_s"] = cold["unet_step_s"]
            metrics["first_call_stages_s"] = cold
            estimate = cold["text_s"] + steps * cold["unet_step_s"] + cold["vae_s"]
            if prm["compile"]:
                clock = Clock(ctx.budget_s)  # compilation is a one-off, recorded in first_step_s
            if estimate * 5 > clock.left():  # time_fn needs a probe, a warm-up call and three repeats
                with device.math_mode(precision.dtype):
                    warm_unet = _stage_times(pipe, device, time_once, steps=1)["unet_step_s"]
                estimate = cold["text_s"] + steps * warm_unet + cold["vae_s"]
                if estimate * 5 > clock.left():
                    return self.too_slow(variant, ctx, estimate, batch)

            last: dict[str, torch.Tensor] = {}

            def generate() -> None:
                with device.math_mode(precision.dtype):  # fp32: its matmuls and convolutions outside TF32
                    last["image"] = pipe(steps)

            try:
                timing = time_fn(generate, device, ctx.budget(clock.left()), agreement=ctx.agreement)
            except TooSlow as e:
                return self.too_slow(variant, ctx, e.estimate_s, batch)
        except RuntimeError as e:
            if is_unavailable_kernel(e):
                return self.failed(variant, ctx, "unsupported", no_kernel_reason(prm["attention"], ctx.device))
            raise
        image = last["image"]
        expect = (batch, p.vae["out_channels"], p.image_size, p.image_size)
        if tuple(image.shape) != expect:
            return self.failed(variant, ctx, "wrong_result", f"image shape {tuple(image.shape)}, expected {expect}",
                               metrics=metrics)
        if not bool(torch.isfinite(image).all()):
            bad = int((~torch.isfinite(image)).sum())
            return self.failed(variant, ctx, "wrong_result", f"{bad} of {image.numel()} output pixels are not finite",
                               metrics=metrics)
        if clock.left() > timing.median_s * 1.5:
            with device.math_mode(precision.dtype):
                metrics["stages_s"] = _stage_times(pipe, device, time_once, steps=steps)
            metrics["stages_source"] = "warm instrumented call"
        else:
            metrics["stages_s"] = cold
            metrics["stages_source"] = "cold probe (budget left no instrumented call)"
        achieved = flops / timing.median_s
        peak = peak_tflops(device, precision.peak_dtype(device))
        metrics.update(steady_call_s=timing.median_s, achieved_tflops=achieved * 1e-12, peak_tflops=peak,
                       peak_dtype=precision.peak_dtype(device), mfu=mfu(achieved, peak), peak_memory_source=memory.source,
                       image_std=float(image.float().std()))
        return self.throughput(variant, ctx, timing, batch, metrics=metrics, peak_memory_bytes=memory.peak())

    def build_step(self, preset: str, device: torch.device) -> Callable[[], None]:
        """One classifier-free-guidance UNet forward at the preset's latent size, tensors created on `device`."""
        p = _preset(preset)
        pipe = Pipeline(p, torch.device(device), torch.float32, unet_only=True)
        b, lat = p.batch_size, pipe.latent
        x = torch.randn(2 * b, p.unet["in_channels"], lat, lat, device=device)
        t = torch.tensor(999.0, device=device)
        prompt = torch.randn(2 * b, p.text_1["max_position_embeddings"], p.unet["cross_attention_dim"], device=device)
        pooled = torch.randn(2 * b, p.text_2["projection_dim"], device=device)
        time_ids = torch.randn(2 * b, 6, device=device)

        def step() -> None:
            with torch.no_grad():
                pipe.unet(x, t, encoder_hidden_states=prompt, added_cond_kwargs={"text_embeds": pooled,
                                                                                 "time_ids": time_ids})

        return step

    def build_iteration(self, preset: str, device, options: dict | None = None) -> Callable[[], None]:
        """One measured call for a shape trace (gapbench assess): the text encoders, `steps` guided UNet
        evaluations and the VAE decode at the run's precision, on `device` (a gapbench Device); works under
        FakeTensorMode. The Euler scheduler reads its sigmas as Python numbers, which fake tensors do not have,
        so its per-step arithmetic is written out here with the same element-wise operations on the latents
        (scale the input; x + (x − (x − σ·ε))/σ · dσ, in float32) and placeholder sigmas."""
        p = _preset(preset)
        precision, attn_impl, backends, batch = self.traced_setup(device, options, p.batch_size)
        steps = (options or {}).get("steps") or p.steps
        pipe = Pipeline(p, device.torch_device, precision.torch_dtype, attn_impl, backends)
        pipe.set_batch(batch)

        def call() -> None:
            with torch.inference_mode():
                cond = pipe.encode()
                latents = pipe.initial_latents() * 14.6  # the schedule's first sigma (init_noise_sigma)
                for i in range(steps):
                    sigma, d_sigma = 14.6 / (i + 1), -14.6 / (i + 1) / (i + 2)
                    x = torch.cat([latents, latents]) / ((sigma**2 + 1) ** 0.5)
                    eps = pipe.guided_noise(x, 999 - 250 * i, cond)
                    sample = latents.to(torch.float32)
                    denoised = sample - sigma * eps
                    latents = (sample + (sample - denoised) / sigma * d_sigma).to(eps.dtype)
                pipe.decode(latents)

        return call


def _stage_times(pipe: Pipeline, device, time_once, steps: int) -> dict[str, float]:
    """Seconds of each stage, synchronised around each: text, one UNet step (the mean over `steps`), VAE."""
    out: dict = {}
    with torch.inference_mode():
        cond = None

        def encode():
            nonlocal cond
            cond = pipe.encode()

        out["text_s"] = time_once(encode, device)
        latents = None

        def denoise():
            nonlocal latents
            latents = pipe.denoise(cond, steps)

        total = time_once(denoise, device)
        out["unet_step_s"] = total / steps
        out["unet_total_s"] = total
        out["vae_s"] = time_once(lambda: pipe.decode(latents), device)
    return out


def _preset(name: str) -> DiffusionPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown diffusion-infer preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
