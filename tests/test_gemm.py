"""gemm's operands, its check, its fp8 accumulation modes and its presets, on the CPU, the test accelerator and
a device of meta tensors (shapes without values: where the operands are drawn shows without an accelerator)."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from gapbench.devices import resolve
from gapbench.devices.base import Backend, Device
from gapbench.engine.variant import keys_of, run_variant
from gapbench.workloads import get
from gapbench.workloads.base import Context
from gapbench.workloads.micro import gemm as gemm_mod


class _Seen(TorchDispatchMode):
    """Records every ATen call and every tensor it made: a spy on what really ran, not a stand-in for it."""

    def __init__(self):
        super().__init__()
        self.calls = []
        self.made = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((func, args, kwargs or {}))
        self.made += [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        return out


def _argument(call, name: str):
    """The value an ATen call had for its argument `name` (as given, or the schema's default it left out)."""
    func, args, kwargs = call
    for i, arg in enumerate(func._schema.arguments):
        if arg.name == name:
            return kwargs[name] if name in kwargs else args[i] if i < len(args) else arg.default_value
    raise KeyError(name)


class _MetaBackend(Backend):
    """torch's meta device: tensors with shapes, strides and devices but no values."""

    name = device_type = torch_type = "meta"
    indexed = False

    def dtype_unsupported(self, index, dtype):
        return "meta tensors hold no float64 values" if dtype == "fp64" else ""


def _ctx(device="cpu", preset="tiny", **opts):
    return Context(device=resolve(device), preset=preset, budget_s=5, min_time_s=0.01, repeats=3, options=opts)


# ---- int8: B column-major -------------------------------------------------------------------------------------

def test_int8_b_is_column_major_and_its_product_is_exact_on_the_cpu():
    op = gemm_mod._make_op("int8", 64, 48, 32, resolve("cpu"))
    assert op.b.shape == (32, 48) and op.b.stride() == (1, 32)  # (k, n), column-major: B's "T" of "TN"
    assert op.a.stride() == (32, 1)
    assert op.check() is None  # torch's CPU _int_mm takes that layout and gives the exact product
    rows, cols = gemm_mod.sample_indices(64, 48)
    good = op.fn

    def off_by_one():
        o = good().clone()
        o[rows[0], cols[0]] += 1
        return o

    op.fn = off_by_one
    assert "exceeds tolerance 0" in op.check()


# ---- fp8: the accumulation each row measured --------------------------------------------------------------

def test_fp8_rows_name_their_accumulation_and_the_test_accelerator_has_one():
    """The test accelerator's _scaled_mm (torch's CPU one) accepts use_fast_accum and ignores it: one row per
    shape, "fp32", that says why there is no "fast" one; never two rows of one path."""
    w = get("gemm")
    ctx = _ctx("test", dtype=["fp8"])
    variants = w.variants("tiny", ctx)
    assert [v.params for v in variants] == [{"dtype": "fp8", "accum": "fp32", "m": 64, "n": 64, "k": 64}]
    m = run_variant(w, variants[0], ctx)
    assert m.status == "ok", m.reason
    assert m.metrics["use_fast_accum"] is False
    assert "bit-identical" in m.metrics["fast_accum"] and "one accumulation" in m.metrics["fast_accum"]
    assert gemm_mod.fp8_accumulations(ctx.device)[0] == ("fp32",)


def test_each_accumulation_passes_its_flag_to_scaled_mm():
    dev = resolve("test")
    for accum, flag in (("fp32", False), ("fast", True)):
        op = gemm_mod._make_op("fp8", 64, 32, 128, dev, accum=accum)
        assert op.b.stride() == (1, 128)  # column-major, as _scaled_mm requires
        with _Seen() as seen:
            op()
        (call,) = [c for c in seen.calls if c[0].overloadpacket.__name__ == "_scaled_mm"]
        assert _argument(call, "use_fast_accum") is flag
        assert op.tol == (gemm_mod.FAST_ACCUM_TOLERANCE if flag else gemm_mod.TOLERANCE["fp8"])
        assert op.check() is None


def test_where_the_stack_tells_the_accumulations_apart_each_is_a_row_and_a_sweep():
    accel, accums = True, ("fp32", "fast")
    _, std = gemm_mod.plan("standard", accel, ["fp8"], accums)
    fixed = [v.params for v in std if "m" in v.params]
    assert {p["accum"] for p in fixed} == {"fp32", "fast"}
    assert len(fixed) == 2 * len({(p["m"], p["n"], p["k"]) for p in fixed})
    assert [v.params for v in std if "sweep" in v.params] == [
        {"dtype": "fp8", "sweep": "max", "accum": "fp32"}, {"dtype": "fp8", "sweep": "max", "accum": "fast"}]
    _, sweeps = gemm_mod.plan("sweep", accel, ["bf16", "fp8"], accums)
    assert [v.params for v in sweeps] == [{"dtype": "bf16", "sweep": "max"},
                                          {"dtype": "fp8", "sweep": "max", "accum": "fp32"},
                                          {"dtype": "fp8", "sweep": "max", "accum": "fast"}]


# ---- operands drawn on the device, reproducibly -------------------------------------------------------------

def test_operands_are_drawn_on_the_device_not_on_the_host():
    """On meta tensors nothing has values, so an operand drawn on the host and copied would show as a host
    tensor of the operand's size; drawn on the device, no host tensor bigger than a scale is ever made."""
    dev = Device(_MetaBackend())
    for dtype in ("fp32", "bf16", "fp16", "fp8", "int8"):
        with _Seen() as seen:
            op = gemm_mod._make_op(dtype, 256, 128, 192, dev)
        host = [tuple(t.shape) for t in seen.made if t.device.type != "meta" and t.numel() > 1]
        assert not host, (dtype, host)
        assert op.a.device.type == "meta" and op.b.device.type == "meta"
        assert op.a.shape == (256, 192) and op.b.shape == (192, 128)


def test_operands_come_from_a_seeded_generator_of_their_device():
    dev = resolve("test")
    for dtype in ("fp32", "bf16", "fp8"):
        one, two = gemm_mod._make_op(dtype, 64, 32, 48, dev), gemm_mod._make_op(dtype, 64, 32, 48, dev)
        assert one.generator.device == one.a.device == dev.torch_device
        assert one.generator.initial_seed() == gemm_mod.SEED
        for x, y in ((one.a, two.a), (one.b, two.b)):
            assert torch.equal(x.view(torch.uint8), y.view(torch.uint8)) if dtype == "fp8" else torch.equal(x, y)


# ---- the float64 check on a sampled block ------------------------------------------------------------------

def test_the_check_takes_sampled_rows_and_columns_only_and_catches_one_wrong_element():
    m = n = k = 256
    op = gemm_mod._make_op("fp32", m, n, k, resolve("cpu"))
    with _Seen() as seen:
        assert op.check() is None
    biggest = max(t.numel() for t in seen.made if t.dtype == torch.float64)
    assert biggest <= gemm_mod.SAMPLE * k < k * n  # never all of B (or all of A) in float64
    rows, cols = gemm_mod.sample_indices(m, n)
    assert len(rows) == len(cols) == gemm_mod.SAMPLE
    good = op.fn

    def one_off():  # one element of the sampled block 1% of its scale off
        o = good().clone()
        i, j = rows[5], cols[7]
        o[i, j] += 0.01 * float(op.a[i].abs() @ op.b[:, j].abs())
        return o

    op.fn = one_off
    assert "exceeds tolerance" in op.check()


def test_the_check_of_fp8_on_the_test_accelerator_catches_a_wrong_column():
    op = gemm_mod._make_op("fp8", 128, 96, 256, resolve("test"))
    assert op.check() is None
    cols = gemm_mod.sample_indices(128, 96)[1]
    good = op.fn

    def column_doubled():
        o = good().clone()
        o[:, cols[3]] *= 2
        return o

    op.fn = column_doubled
    assert "exceeds tolerance" in op.check()


def test_the_reference_is_computed_on_the_device_unless_it_lacks_float64():
    assert gemm_mod._reference_device(resolve("test")) == resolve("test").torch_device
    assert gemm_mod._reference_device(Device(_MetaBackend())) == torch.device("cpu")


# ---- presets --------------------------------------------------------------------------------------------------

def test_no_preset_measures_a_shape_twice():
    w = get("gemm")
    for preset in set(w.presets) - {"listed"}:  # listed measures the shapes it is given (below)
        for accel in (False, True):
            for accums in (("fp32",), ("fp32", "fast")):
                _, variants = gemm_mod.plan(preset, accel, list(gemm_mod.DTYPES), accums)
                keys = keys_of(w, preset, variants)
                assert len(keys) == len(set(keys)), (preset, accel, accums)
    for device in ("cpu", "test"):
        for preset in w.presets:
            opts = {"gemm_shapes": "64x48x32,64×48×32,8x8x8"} if preset == "listed" else {}
            keys = keys_of(w, preset, w.variants(preset, _ctx(device, preset, **opts)))
            assert len(keys) == len(set(keys)), (device, preset)


def test_the_shapes_preset_is_the_standard_one_without_its_sweeps():
    w = get("gemm")
    assert "shapes" in w.presets
    for device in ("cpu", "test"):
        std = [v.params for v in w.variants("standard", _ctx(device, "standard"))]
        shapes = [v.params for v in w.variants("shapes", _ctx(device, "shapes"))]
        assert shapes == [p for p in std if "sweep" not in p]
        assert shapes and all("m" in p for p in shapes)
    _, accel = gemm_mod.plan("shapes", True, ["bf16"])
    assert [(v.params["m"], v.params["n"], v.params["k"]) for v in accel].count((8192, 8192, 8192)) == 1


def test_the_sweep_preset_with_two_dtypes_is_exactly_their_sweeps():
    w = get("gemm")
    variants = w.variants("sweep", _ctx("test", "sweep", dtype=["bf16", "fp8"]))
    assert [v.params for v in variants] == [{"dtype": "bf16", "sweep": "max"},
                                            {"dtype": "fp8", "sweep": "max", "accum": "fp32"}]
