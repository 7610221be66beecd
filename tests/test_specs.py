"""Accelerator specs: matching the names torch reports, dense peaks, the CPU estimate, user overrides."""

import os

import pytest

from gapbench import specs
from gapbench.errors import GapbenchError

# product names as torch.cuda.get_device_name / torch.npu / habana report them
TORCH_NAMES = {
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": "h100-nvl",
    "NVIDIA H200": "h200",
    "NVIDIA H20": "h20",
    "NVIDIA A100-SXM4-80GB": "a100-80gb",
    "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
    "NVIDIA L40S": "l40s",
    "NVIDIA B200": "b200",
    "AMD Instinct MI300X": "mi300x",
    "AMD Instinct MI325X": "mi325x",
    "AMD Instinct MI250X/MI250": "mi250x",
    "AMD Instinct MI355X": "mi355x",
    "GAUDI2": "gaudi2",
    "GAUDI3": "gaudi3",
    "Ascend910B2": "ascend-910b",
}


@pytest.mark.parametrize("name,key", sorted(TORCH_NAMES.items()))
def test_real_torch_names_match(name, key):
    s = specs.match({"type": "cuda", "product": name})
    assert s is not None and s.key == key


@pytest.mark.parametrize("name", ["NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 4090", "",
                                  "AMD Instinct MI300A"])
def test_unknown_or_different_parts_do_not_match(name):
    assert specs.match({"type": "cuda", "product": name}) is None


def test_required_rows_have_source_date_and_dense_peaks():
    rows = {s.key: s for s in specs.load_specs()}
    for key in set(TORCH_NAMES.values()):
        s = rows[key]
        assert s.source and s.date and s.bandwidth_tbs and s.memory_gb and s.tdp_w
        assert s.confidence in ("high", "medium", "low")
        assert set(s.tflops) <= set(specs.DTYPES)
    # dense, not sparse: the figures datasheets print with sparsity are exactly twice these
    assert rows["h100-sxm"].tflops["bf16"] == pytest.approx(989.4)
    assert rows["h100-sxm"].tflops["fp8"] == pytest.approx(1978.9)
    assert rows["mi300x"].tflops["bf16"] == pytest.approx(1307.4)
    assert rows["mi300x"].tflops["fp8"] == pytest.approx(2614.9)
    for s in rows.values():
        if "bf16" in s.tflops and "fp8" in s.tflops and s.key not in ("gaudi3",):  # Gaudi 3 runs fp8 at the bf16 rate
            assert s.tflops["fp8"] == pytest.approx(2 * s.tflops["bf16"], rel=0.02), s.key  # L40S prints 362.05 and 733
    assert rows["h20"].confidence == "low" and rows["ascend-910b"].confidence == "low"


def test_mi250x_peaks_are_per_gcd():
    s = specs.match({"type": "cuda", "product": "AMD Instinct MI250X"})
    assert s.logical_devices == 2
    assert s.tflops["bf16"] == pytest.approx(191.5) and s.bandwidth_tbs == pytest.approx(1.6384)


def test_peak_api_used_for_mfu():
    ident = {"type": "cuda", "product": "NVIDIA H100 80GB HBM3"}
    assert specs.peak_tflops(ident, "bf16") == pytest.approx(989.4)
    assert specs.peak_tflops(ident, "bfloat16") == pytest.approx(989.4)
    assert specs.peak_tflops(ident, "float8_e4m3fn") == pytest.approx(1978.9)
    assert specs.peak_tflops(ident, "nonsense") is None
    assert specs.peak_bandwidth_tbs(ident) == pytest.approx(3.35)
    assert specs.peak_tflops({"type": "cuda", "product": "Unknown GPU"}, "bf16") is None
    assert specs.peak_tflops({"type": "cuda", "product": "NVIDIA A100-SXM4-80GB"}, "fp8") is None  # no fp8 on A100


def test_cpu_peak_from_cores_clock_and_isa():
    ident = {"type": "cpu", "product": "Some CPU", "cores": 4, "cpu_max_mhz": 3000.0,
             "isa": ["avx", "avx2", "fma", "avx512f", "avx512_bf16"]}
    s = specs.match(ident)
    assert s.estimate and s.type == "cpu"
    assert s.tflops["fp32"] == pytest.approx(4 * 3.0e9 * 64 / 1e12)
    assert s.tflops["fp64"] == pytest.approx(4 * 3.0e9 * 32 / 1e12)
    assert s.tflops["bf16"] == pytest.approx(4 * 3.0e9 * 128 / 1e12)
    assert "fp8" not in s.tflops and s.bandwidth_tbs is None
    avx2 = specs.peak_tflops({**ident, "isa": ["avx", "avx2", "fma"]}, "fp32")
    assert avx2 == pytest.approx(4 * 3.0e9 * 32 / 1e12)
    assert specs.peak_tflops({**ident, "isa": ["avx", "avx2", "fma"]}, "bf16") == pytest.approx(avx2)  # fp32 stands in
    assert specs.peak_bandwidth_tbs({**ident, "memory_bandwidth_tbs": 0.1}) == pytest.approx(0.1)
    assert specs.match({"type": "cpu", "product": "Some CPU", "isa": []}).tflops == {}  # no clock: no peak


def test_this_machines_cpu_gets_a_peak():
    from gapbench import devices

    ident = devices.resolve("cpu").identity()  # what a run records: the clock, ISA and cores are in it
    s = specs.match(ident)
    assert s is not None and s.type == "cpu"
    if ident.get("cpu_max_mhz") and ident.get("isa"):
        assert s.tflops.get("fp32", 0) > 0


def test_user_specs_file_extends_and_overrides(tmp_path, monkeypatch):
    f = tmp_path / "mine.toml"
    f.write_text('''
[[accelerator]]
key = "my-npu"
name = "My NPU"
type = "npu"
match = ['MyNPU-\\d+']
tflops = { bf16 = 100.0 }
bandwidth_tbs = 1.0
source = "my lab"
date = "2026-01"

[[accelerator]]
key = "h100-sxm"
name = "H100 derated"
match = ['H100 80GB HBM3']
tflops = { bf16 = 900.0 }
source = "my lab"
date = "2026-01"

[[accelerator]]
key = "my-cpu"
name = "Test CPU row"
type = "cpu"
match = ['Test CPU 9000']
bandwidth_tbs = 0.05
source = "STREAM on my box"
date = "2026-01"
''')
    monkeypatch.setenv("GAPBENCH_SPECS", str(f))
    assert specs.peak_tflops({"type": "npu", "product": "MyNPU-7"}, "bf16") == 100.0
    assert specs.peak_tflops({"type": "cuda", "product": "NVIDIA H100 80GB HBM3"}, "bf16") == 900.0
    cpu = specs.match({"type": "cpu", "product": "Test CPU 9000", "cores": 2, "cpu_max_mhz": 1000, "isa": ["fma"]})
    assert cpu.bandwidth_tbs == 0.05 and cpu.tflops["fp32"] == pytest.approx(2 * 1e9 * 32 / 1e12)
    monkeypatch.setenv("GAPBENCH_SPECS", str(tmp_path / "absent.toml"))
    with pytest.raises(GapbenchError, match="GAPBENCH_SPECS"):
        specs.load_specs()
    bad = tmp_path / "bad.toml"
    bad.write_text('[[accelerator]]\nkey = "x"\nname = "x"\ntflops = { bf17 = 1 }\nsource = "s"\ndate = "d"\n')
    monkeypatch.setenv("GAPBENCH_SPECS", str(bad))
    with pytest.raises(GapbenchError, match="tflops"):
        specs.load_specs()
    monkeypatch.delenv("GAPBENCH_SPECS")
    assert os.environ.get("GAPBENCH_SPECS") is None
    assert specs.peak_tflops({"type": "cuda", "product": "NVIDIA H100 80GB HBM3"}, "bf16") == pytest.approx(989.4)


def test_references_carry_source_and_refer_to_known_specs():
    keys = {s.key for s in specs.load_specs()}
    refs = specs.load_references()
    assert refs and all(r.source and r.date and r.platform in keys for r in refs)
    gaps = specs.load_published_gaps()
    table = {g.label: g.gap_pct for g in gaps if g.platform == "mi300x" and g.baseline == "h100-sxm"}
    assert table == {"LLM training (Llama 2 70B)": -20.9, "SDXL inference": -19.1, "BERT-large fine-tuning": -15.7,
                     "FP8 GEMM": -35.3, "memory bandwidth": 55.2}
    for g in gaps:  # each gap is what its two published figures say, to the rounding shown
        assert g.value is not None and g.gap_pct == round((g.value / g.baseline_value - 1) * 100, 1)
        assert g.variant, f"{g.label}: a published gap needs a variant filter"
    assert all("not measured by gapbench" in g.source for g in gaps)
    assert {"h100-sxm", "h100-sxm@mi300x-vs-h100", "mi300x@mi300x-vs-h100"} <= set(specs.reference_platforms())


def test_dtype_names_normalise():
    assert specs.normalize_dtype("torch.bfloat16") == "bf16"
    assert specs.normalize_dtype("float8_e5m2") == "fp8"
    assert specs.normalize_dtype("half") == "fp16"
    assert specs.normalize_dtype("fp32") == "fp32"
    assert specs.normalize_dtype("complex64") is None
