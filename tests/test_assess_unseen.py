"""benchmarks/assess_models.py and benchmarks/assess_unseen.py: the split of the unseen models is the file's rule,
every model builds and trains one step at a reduced size, and the held-aside models are refused without
--held-aside-once. No measuring."""

from __future__ import annotations

import hashlib
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import assess_models, assess_unseen  # noqa: E402

MODELS = assess_models.models()


def test_round_one_split_by_the_files_rule_and_each_later_round_held_aside_until_scored():
    rounds = {}
    for n, m in MODELS.items():
        rounds.setdefault(m.get("round", 1), {})[n] = m
    last = max(rounds)
    assert sorted(rounds) == list(range(1, last + 1)) and last >= 2
    first = rounds[1]
    assert len(first) == 6 and all(len(rounds[r]) == 3 for r in range(2, last + 1))
    split = {n: m["round1_split"] for n, m in first.items()}
    assert sorted(split.values()) == ["development"] * 3 + ["held-aside"] * 3
    assert assess_models.split_by_rule(list(first)) == split
    # the rule written out again, independently of the module
    order = sorted(first, key=lambda n: hashlib.sha256(n.encode("utf-8")).hexdigest())
    assert [split[n] for n in order] == ["development", "held-aside"] * 3
    assert assess_models.load()["split"]["rule"] == "sha256-alternate"
    # each round before the last was scored once and its models are development models since; the last is held aside
    for r in range(1, last):
        assert all(m["split"] == "development" and m[f"round{r}_split"] in ("development", "held-aside")
                   for m in rounds[r].values())
        if r > 1:
            assert all(m[f"round{r}_split"] == "held-aside" for m in rounds[r].values())
    assert all(m["split"] == "held-aside" for m in rounds[last].values())

    # no family comes back in a later round
    def family(m: dict) -> str:
        return m["architecture"].split("For")[0].replace("LMHeadModel", "")

    seen = {family(m) for m in first.values()}
    for r in range(2, last + 1):
        assert not seen & {family(m) for m in rounds[r].values()}
        seen |= {family(m) for m in rounds[r].values()}


def test_each_model_has_a_fixed_seed_and_input_shape_and_an_entry_per_dtype():
    seeds = [m["seed"] for m in MODELS.values()]
    assert len(set(seeds)) == len(seeds) and all(isinstance(s, int) for s in seeds)
    for n, m in MODELS.items():
        assert m["input"]["batch"] >= 1
        for d in assess_models.DTYPES:
            spec = assess_models.entry_spec(n, d)
            assert callable(getattr(assess_models, spec.split(":")[1]))


@pytest.mark.parametrize("name", list(MODELS))
def test_each_model_builds_and_trains_one_step_at_a_reduced_size(name):
    torch.set_num_threads(1)
    step = assess_models.step(name, "fp32", scale=0.125)
    params = [p for p in step.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params[:4]]
    loss = float(step())
    assert math.isfinite(loss)
    assert all(p.grad is not None for p in params[:4])
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, params[:4], strict=True))  # AdamW stepped


def test_the_same_seed_builds_the_same_model():
    a = assess_models.build("t5", scale=0.125)[0]
    b = assess_models.build("t5", scale=0.125)[0]
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def test_held_aside_models_are_refused_without_the_flag(tmp_path, monkeypatch):
    held = [n for n, m in MODELS.items() if m["split"] == "held-aside"]
    dev = [n for n, m in MODELS.items() if m["split"] == "development"]
    assert assess_unseen.chosen("development", None) == dev
    measured = []
    monkeypatch.setattr(assess_unseen, "measure", lambda *a, **k: measured.append(a) or [])
    monkeypatch.setattr(assess_unseen, "evaluate", lambda *a, **k: measured.append(a) or [])
    for n in held:
        with pytest.raises(assess_unseen.Refused, match="held aside"):
            assess_unseen.main(["--models", n, "--out", str(tmp_path / "o")])
    with pytest.raises(assess_unseen.Refused):
        assess_unseen.main(["--models", dev[0], held[0], "--out", str(tmp_path / "o")])
    assert measured == []  # refused before anything was measured or scored
    # with the flag, the held-aside ones (and only they) would be scored
    assert assess_unseen.chosen("held-aside", None) == held
    with pytest.raises(SystemExit) as e:
        assess_unseen.chosen("held-aside", [dev[0]])
    assert e.value.code == 2
    assert assess_unseen.DEFAULT_OUT["held-aside"] != assess_unseen.DEFAULT_OUT["development"]


def test_the_models_rows_take_their_own_passes_and_measure_only_scores_nothing(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(assess_unseen, "gapbench", lambda *a: ran.append(a) or {"command": " ".join(a)})
    assess_unseen.measure(tmp_path, ["vit"], 2, True, False, ["64x64x64"], [], model_runs=9, param_sets=["64*2"])
    runs = {a[a.index("-o") + 1].split("/")[-1]: a[a.index("--runs") + 1] for a in ran}
    assert runs == {"rates-1t.json": "2", "shapes-cold-1t.json": "2", "optims-1t.json": "2", "models-1t.json": "9",
                    "rates-2t.json": "2", "shapes-cold-2t.json": "2", "optims-2t.json": "2", "models-2t.json": "9"}
    # the steps' GEMMs and optimizer steps meet their operands in memory: their rows are measured cold
    assert all("--flush-cache" in a for a in ran if "gemm:listed" in a or "optimizer:listed" in a)
    # --measure-only: measured, then nothing predicted or scored, no score files written
    scored = []
    monkeypatch.setattr(assess_unseen, "traced_all", lambda names, bf16: {})
    monkeypatch.setattr(assess_unseen, "measure", lambda *a, **k: [])
    monkeypatch.setattr(assess_unseen, "evaluate", lambda *a, **k: scored.append(a) or [])
    out = tmp_path / "o"
    assert assess_unseen.main(["--models", "vit", "--out", str(out), "--measure-only"]) == 0
    assert scored == [] and not Path(f"{out}.md").exists() and (out / "runs.json").exists()


def test_routed_groups_are_measured_at_their_own_sizes_where_their_dtype_is_measured(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(assess_unseen, "gapbench", lambda *a: ran.append(a) or {"command": " ".join(a)})
    grouped = {"bf16": ["82+173x64x32", "32x64x82+173"], "fp32": []}
    assess_unseen.measure(tmp_path, ["vit"], 1, True, False, [], [], grouped=grouped)
    listed = [a for a in ran if "grouped-gemm:listed" in a]
    assert len(listed) == 1 and "grouped-1t.json" in listed[0][listed[0].index("-o") + 1]  # bf16: one thread only
    args = listed[0]
    assert args[args.index("--grouped-shapes") + 1] == "82+173x64x32,32x64x82+173"
    assert args[args.index("--dtype") + 1] == "bf16"
    (tmp_path / "grouped-1t.json").write_text("{}")
    assert "grouped-1t.json" in assess_unseen.listed_files(tmp_path, 1)


def test_a_measured_gap_is_known_within_5pp_only_when_both_ends_of_its_interval_are():
    row = {"error_pp": 3.0, "predicted_in_measured_interval": True, "measured_in_predicted_interval": True,
           "measured_gap_pct": 20.0, "measured_interval_pct": [16.0, 24.5]}
    wide = row | {"measured_interval_pct": [16.0, 25.5]}
    unknown = row | {"measured_interval_pct": None}
    assert assess_unseen.summary([row, wide, unknown])["measured_within_5pp"] == 1


@pytest.mark.parametrize("bad", [["--model-runs", "0"], ["--model-runs", "-2"], ["--runs", "0"], ["--model-runs", "x"]])
def test_a_number_of_passes_below_one_is_refused_before_anything_is_measured(tmp_path, monkeypatch, capsys, bad):
    measured = []
    monkeypatch.setattr(assess_unseen, "measure", lambda *a, **k: measured.append(a) or [])
    with pytest.raises(SystemExit) as e:
        assess_unseen.main([*bad, "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and measured == [] and not (tmp_path / "o").exists()
    assert "passes" in capsys.readouterr().err.splitlines()[-1]


def test_rows_measured_on_another_host_are_left_out_of_a_side(tmp_path):
    """A VM can keep its name and CPU string on a host half again as fast: the rows at the steps' shapes from
    there (another OS build, a measured clock 50% higher) are left out of the side, and said so; rows from the
    rates' own host (a clock 2% off) stay."""
    from compare_fixtures import CPU_HOST, gemm
    from gapbench import results
    from gapbench.results import ResultSet
    from test_assess_speed import _m

    here = dict(CPU_HOST, cpu_measured_mhz=2417.6)
    elsewhere = dict(CPU_HOST, os="Linux 6.18", cpu_measured_mhz=3658.0)
    near = dict(CPU_HOST, cpu_measured_mhz=2460.0)
    model = _m(assess_unseen.WORKLOAD, {"model": "vit", "dtype": "fp32"}, 2.0, "steps/s", metrics={"category": "model"})
    files = {assess_unseen.rates_file(1): (here, [gemm(1.0)]), assess_unseen.models_file(1): (here, [model]),
             assess_unseen.cold_shapes_file(1): (elsewhere, [gemm(3.0, size=512)]),
             assess_unseen.shapes_file(1): (near, [gemm(2.0, size=256)])}
    for name, (host, rows) in files.items():
        results.save(ResultSet(host=host, device={"type": "cpu"}, measurements=rows), tmp_path / name)
    assert assess_unseen.same_host(here, near) and not assess_unseen.same_host(here, elsewhere)
    assert not assess_unseen.same_host(here, dict(here, hostname="other"))
    foreign = assess_unseen.foreign_files(tmp_path, 1)
    assert list(foreign) == [assess_unseen.cold_shapes_file(1)] and "3658.0 MHz" in foreign["shapes-cold-1t.json"]
    side = assess_unseen.side(tmp_path, 1, "fp32")
    assert sorted(m.variant.get("m", 0) for m in side.measurements if m.workload == "gemm") == [256, 1024]
    md = assess_unseen.markdown([], {}, [], "cmd", [], {f"1t/{f}": why for f, why in foreign.items()})
    assert "Left out, measured on another host" in md and "shapes-cold-1t.json" in md
    assert "Calibrated shifts" not in md
    row = {"pair": "1 vs 2 threads, fp32", "model": "m", "skipped": "x", "kind": "cpu X → cpu X, one trace", "shift": 0.1}
    assert "cpu X → cpu X, one trace: +0.1000." in assess_unseen.markdown([row], {}, [], "cmd", [])


def test_a_step_on_subnormal_gradients_is_said_so_and_its_pair_is_not_scored():
    """Gradients of 1e-39 (subnormal in fp32) count, zeros and normal values do not, in every float dtype; a pair
    whose measured row carries a share over the limit is skipped with why, under it it is not."""
    w = torch.nn.Parameter(torch.ones(4))
    w.grad = torch.tensor([1e-39, 0.0, 0.5, 2e-39])
    b = torch.nn.Parameter(torch.ones(2, dtype=torch.bfloat16))
    b.grad = torch.tensor([1.0, 1e-39], dtype=torch.bfloat16)
    n = torch.nn.Parameter(torch.ones(3))  # no gradient: not counted
    assert assess_models.subnormal_share([w, b, n]) == pytest.approx(3 / 5)
    assert assess_models.subnormal_share([n]) == 0.0

    from test_assess_speed import _m

    def row(share):
        return _m(assess_unseen.WORKLOAD, {"model": "funnel", "dtype": "fp32"}, 2.0, "steps/s",
                  metrics={"category": "model", "subnormal_grads": share})

    assert "subnormal" in assess_unseen._subnormal(row(0.0), row(0.6)) and "60.0%" in assess_unseen._subnormal(row(0.6))
    assert assess_unseen._subnormal(row(0.0), row(assess_models.SUBNORMAL_LIMIT), None) == ""


def test_a_reference_unknown_held_aside_or_scored_is_refused_before_anything_is_measured(tmp_path, monkeypatch):
    held = [n for n, m in MODELS.items() if m["split"] == "held-aside"]
    dev = [n for n, m in MODELS.items() if m["split"] == "development"]
    measured = []
    monkeypatch.setattr(assess_unseen, "traced_all", lambda names, bf16: measured.append(names) or {})
    monkeypatch.setattr(assess_unseen, "measure", lambda *a, **k: measured.append(a) or [])
    for argv, match in ((["--reference", "nosuch"], "unknown reference model nosuch"),
                        (["--reference", held[0]], "is held aside"),
                        (["--models", dev[0], "--reference", dev[0]], "is scored")):
        with pytest.raises(SystemExit, match=match) as e:
            assess_unseen.main([*argv, "--out", str(tmp_path / "o"), "--measure-only"])
        assert e.value.code == 2
    assert measured == []
    # a development reference is traced and measured beside the scored models, in the same runs
    assert assess_unseen.main(["--models", dev[1], "--reference", dev[0], "--out", str(tmp_path / "o"),
                               "--measure-only"]) == 0
    assert measured[0] == [dev[1], dev[0]] and measured[1][1] == [dev[1], dev[0]]


def test_a_reference_measured_beside_the_models_corrects_each_pair_by_its_error_and_the_kinds_weight():
    from gapbench.assess import calibration
    from gapbench.assess.calibration import log_error

    out = ROOT / "results" / "cpu-epyc-2core-assess-r19-held-aside"  # electra, qwen2 and phi in one session
    works = assess_unseen.traced_all(["electra", "phi"], False)
    raw = {r["model"]: r for r in assess_unseen.evaluate(out, ["electra", "phi"], False, works, model_sigma=0.0)}
    e_ref = log_error(raw["electra"]["predicted_gap_pct"], raw["electra"]["measured_gap_pct"])
    (row,) = assess_unseen.evaluate(out, ["phi"], False, works, reference="electra")
    weight = calibration.default().weight_of(row["kind"]).weight
    assert row["reference"]["model"] == "electra" and row["reference"]["error"] == pytest.approx(e_ref, abs=1e-3)
    assert row["reference"]["weight"] == weight > 0
    assert 1 + row["predicted_gap_pct"] / 100 == pytest.approx(
        (1 + raw["phi"]["predicted_gap_pct"] / 100) * math.exp(-weight * row["reference"]["error"]), abs=1e-3)
    assert row["measured_gap_pct"] == raw["phi"]["measured_gap_pct"]  # the yardstick does not move
    md = assess_unseen.markdown([row], assess_unseen.summary([row]), [], "python …", [])
    assert f"1 vs 2 threads, fp32: electra {row['reference']['error']:+.4f} × {weight:.2f}" in md
