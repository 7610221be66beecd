"""The words of the library-path ratios (compare.ratios): one table per platform and workload, a sentence
per platform, and the pieces each format shows. Numbers and intervals come from the Ratio objects; nothing
is recomputed here."""

from __future__ import annotations

from html import escape

from gapbench.compare import Comparison
from gapbench.compare.model import Ratio, RatioSummary
from gapbench.compare.ratios import RATIO_KEYS
from gapbench.report.kit import (
    STYLE_BETTER,
    STYLE_NOISE,
    STYLE_STATUS,
    STYLE_UNKNOWN,
    STYLE_WORSE,
    Table,
    fmt_num,
    fmt_pct,
    html_table,
    md_cell,
    md_table,
    one_line,
    rich_table,
    rich_text,
)

RATIO_TITLES = {
    "portable": "portable ÷ vendor",
    "tuned": "tuned ÷ untuned",
    "linear": "F.linear ÷ matmul",
    "blas": "preferred BLAS ÷ default",
    "library": "other library ÷ default",
    "compiler": "torch.compile ÷ default",
    "vendor": "forced kernel ÷ SDPA's choice",
    "fallback": "unfused math ÷ SDPA's choice",
    "best": "best ÷ default",
}
WORKLOAD_WORDS = {"gemm-libs": "GEMM", "attention-libs": "attention"}
LEGEND = ("Speed ratios between paths on one platform (> 1: the named path is faster than the default path); "
          "median ratio [95% interval, the two medians' intervals combined in log space]; ≈ marks an interval that "
          "holds 1. A ratio of several paths names the fastest.")


def ratio_factor(x: float) -> str:
    return f"{fmt_num(x, 3)}×"


def ratio_text(r: Ratio) -> str:
    """'0.71× [0.66, 0.75] triton', '≈ 1.02× [0.97, 1.08] linear', or the status that left it without a number."""
    if r.value is None:
        return f"{r.numerator}: {r.status}" if r.numerator and not r.status.startswith("default") else r.status
    if r.numerator == r.denominator:
        return f"1× ({r.numerator}, the default, is fastest)"
    text = ratio_factor(r.value)
    if r.ci95 is not None and r.ci95 != (1.0, 1.0):
        text += f" [{fmt_num(r.ci95[0], 3)}, {fmt_num(r.ci95[1], 3)}]"
    if r.significant is False:
        text = "≈ " + text
    return f"{text} {r.numerator}"


def ratio_style(r: Ratio) -> str:
    if r.value is None:
        return STYLE_STATUS
    if r.numerator == r.denominator:
        return STYLE_NOISE
    if r.significant is None:
        return STYLE_UNKNOWN
    if not r.significant:
        return STYLE_NOISE
    return STYLE_BETTER if r.value > 1 else STYLE_WORSE


def problem_text(workload: str, problem: dict) -> str:
    """'bf16 4096x4096x4096' for a GEMM, 'bf16 B4 H64/KV8 S4096 D128 fwd+bwd' for attention."""
    p = dict(problem)
    parts = [str(p.pop("dtype", ""))]
    if all(k in p for k in ("m", "n", "k")):
        parts.append(f"{p.pop('m')}x{p.pop('n')}x{p.pop('k')}")
    if all(k in p for k in ("batch", "heads", "kv_heads", "seq", "head_dim")):
        parts.append(f"B{p.pop('batch')} H{p.pop('heads')}/KV{p.pop('kv_heads')} S{p.pop('seq')} D{p.pop('head_dim')}")
    parts += [str(p.pop("mode"))] if "mode" in p else []
    parts += [f"{k}={p[k]}" for k in sorted(p)]
    return " ".join(x for x in parts if x)


def ratio_tables(comp: Comparison) -> list[Table]:
    """One table per platform and library workload: a row per problem, a column per ratio kind present."""
    out = []
    for pr in comp.library_ratios:
        name = comp.platforms[pr.platform].name
        for workload in dict.fromkeys(r.workload for r in pr.ratios):
            rs = [r for r in pr.ratios if r.workload == workload]
            kinds = [k for k in RATIO_KEYS if any(r.kind == k for r in rs)]
            problems: dict[str, dict[str, Ratio]] = {}
            for r in rs:
                problems.setdefault(problem_text(workload, r.problem), {})[r.kind] = r
            rows, styles = [], []
            for label, by_kind in problems.items():
                rows.append([label] + [ratio_text(by_kind[k]) if k in by_kind else "—" for k in kinds])
                styles.append([""] + [ratio_style(by_kind[k]) if k in by_kind else "" for k in kinds])
            out.append(Table(["problem"] + [RATIO_TITLES[k] for k in kinds], rows, text_columns=1, styles=styles,
                             title=f"{workload} on {name}: speed ratios between paths"))
    return out


# the ratio kinds a platform's sentence speaks of, per workload; the tables show every kind
HEADLINE = {"gemm-libs": ("portable", "tuned", "library", "best"), "attention-libs": ("portable", "fallback", "best")}


def _span(s: RatioSummary, signed: bool = False, inverse: bool = False) -> str:
    """'(7 shapes, 1.1–2×)': how many problems and the range of their ratios, in the clause's direction."""
    unit = "shape" if s.workload == "gemm-libs" else "problem"
    what = f"{s.n} {unit}{'s' * (s.n > 1)}"
    lo, hi = (1 / s.hi, 1 / s.lo) if inverse else (s.lo, s.hi)
    if signed:
        lo_t, hi_t = fmt_pct((lo - 1) * 100), fmt_pct((hi - 1) * 100)
    else:
        lo_t, hi_t = ratio_factor(lo).rstrip("×"), ratio_factor(hi)
    beyond = s.above + s.below
    noise = f"; {beyond} of {s.n} beyond noise" if 0 < beyond < s.n else ""
    if s.n == 1:
        return f"({what}{noise})"
    if lo_t == hi_t.rstrip("×"):
        return f"({what}, each {hi_t}{noise})"
    return f"({what}, {lo_t} to {hi_t}{noise})" if signed else f"({what}, {lo_t}–{hi_t}{noise})"


def summary_phrase(s: RatioSummary) -> str:
    """One clause of a platform's sentence from a summary's facts."""
    g, paths = s.geomean, "/".join(s.paths)
    on = f"on {s.dtype} {WORKLOAD_WORDS.get(s.workload, s.workload)}"
    if s.kind == "best" and s.lo == s.hi == 1.0:
        return f"the default path is the fastest {on} {_span(s)}"
    if s.within_noise:
        return _noise_phrase(s, paths, on)
    if s.kind == "portable":
        if g < 1:
            return (f"the vendor library leads portable kernels ({paths}) by {ratio_factor(1 / g)} {on} "
                    f"{_span(s, inverse=True)}")
        return f"portable kernels ({paths}) lead the vendor library by {ratio_factor(g)} {on} {_span(s)}"
    if s.kind == "tuned":
        cost = f"; {fmt_num(s.setup_s, 3)} s of tuning per shape" if s.setup_s is not None else ""
        verb = "gains" if g >= 1 else "loses"
        return f"tuning ({paths}) {verb} {fmt_pct((g - 1) * 100).lstrip('+−')} {on} {_span(s, signed=True)[:-1]}{cost})"
    if s.kind == "best":
        return f"the best path ({paths}) runs at {ratio_factor(g)} the default {on} {_span(s)}"
    subject = {"linear": "F.linear", "blas": f"the preferred BLAS library ({paths})", "library": paths,
               "compiler": f"torch.compile ({paths})", "vendor": f"a forced SDPA kernel ({paths})",
               "fallback": "unfused math"}[s.kind]
    against = {"linear": "matmul", "vendor": "SDPA's own choice", "fallback": "SDPA's choice"}.get(s.kind, "the default")
    return f"{subject} runs at {ratio_factor(g)} {against} {on} {_span(s)}"


def _noise_phrase(s: RatioSummary, paths: str, on: str) -> str:
    """A clause for a summary whose every ratio holds 1 within its interval."""
    subject = {"portable": f"portable kernels ({paths}) and the vendor library", "tuned": f"tuning ({paths})",
               "linear": "F.linear and matmul", "best": f"the best path ({paths}) and the default"}.get(
                   s.kind, f"{paths} and the default")
    verb = "changes nothing beyond noise" if s.kind == "tuned" else "are within noise of each other"
    return f"{subject} {verb} {on} ({s.n} {'shape' if s.workload == 'gemm-libs' else 'problem'}" \
           f"{'s' * (s.n > 1)}, geometric mean {ratio_factor(s.geomean)})"


def _absent(rs: list[Ratio], kind: str) -> str:
    """'no tuned path here (tunableop: unsupported: why)' when no ratio of the kind has a number."""
    failed = [r for r in rs if r.kind == kind and r.value is None and r.numerator]
    if not failed:
        return ""
    r = failed[0]
    return f"no {RATIO_TITLES[kind].split(' ÷ ')[0]} path here ({r.numerator}: {r.status}: {one_line(r.reason, 140)})"


def ratio_sentences(comp: Comparison) -> list[str]:
    """Per platform and library workload: 'NAME: on this stack the vendor library leads portable kernels by
    1.4× on bf16 GEMM (7 shapes, 1.1–2×); tuning (tunableop) gains 8% on bf16 GEMM (…); …'."""
    lines = []
    for pr in comp.library_ratios:
        name = comp.platforms[pr.platform].name
        for workload in dict.fromkeys(r.workload for r in pr.ratios):
            rs = [r for r in pr.ratios if r.workload == workload]
            clauses = []
            for kind in HEADLINE.get(workload, ()):
                found = [summary_phrase(s) for s in pr.summaries if s.workload == workload and s.kind == kind]
                clauses += found or [c for c in [_absent(rs, kind)] if c]
            if clauses:
                lines.append(f"{name}: on this stack " + "; ".join(clauses) + ".")
    return lines


# ---- the pieces each format shows -----------------------------------------------------------------------

def terminal_renderables(comp: Comparison) -> list:
    if not comp.library_ratios:
        return []
    out: list = [rich_text(LEGEND, style="dim")]
    out += [rich_table(t) for t in ratio_tables(comp)]
    out += [rich_text(line) for line in ratio_sentences(comp)]
    return out


def markdown_lines(comp: Comparison) -> list[str]:
    if not comp.library_ratios:
        return []
    lines = ["", "#### Library paths", "", md_cell(LEGEND)]
    for t in ratio_tables(comp):
        lines += ["", f"**{md_cell(t.title)}**", ""] + md_table(t)
    lines += [""] + [f"- {md_cell(s)}" for s in ratio_sentences(comp)]
    return lines


def html_parts(comp: Comparison) -> list[str]:
    if not comp.library_ratios:
        return []
    parts = ["<h2>Library paths</h2>", f'<p class="muted">{escape(LEGEND)}</p>']
    for t in ratio_tables(comp):
        parts.append(f"<h3>{escape(t.title)}</h3>")
        parts.append(html_table(t, "ratios"))
    parts.append("<ul>" + "".join(f"<li>{escape(s)}</li>" for s in ratio_sentences(comp)) + "</ul>")
    return parts


def json_document(comp: Comparison) -> dict:
    """The ratios' numbers (Comparison.to_dict) with each ratio's text and the sentences beside them."""
    names = [p.name for p in comp.platforms]
    out = {}
    for pr in comp.library_ratios:
        d = pr.to_dict()
        for r, rd in zip(pr.ratios, d["ratios"], strict=True):
            rd["text"] = ratio_text(r)
        out[names[pr.platform]] = d
    return {"platforms": out, "sentences": ratio_sentences(comp), "legend": LEGEND}
