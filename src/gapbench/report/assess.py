"""An assessment in words: the verdict line, then the evidence behind each part and what was not known — as rich
renderables for the terminal, Markdown, JSON, or one self-contained HTML page. Every table goes through the
kit's Table, so every string from a scanned file, a trace or a results file is escaped by its format.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from html import escape

from gapbench import __version__
from gapbench.assess.model import NOT_NATIVE, Assessment
from gapbench.compare.gaps import NO_VERDICT, WITHIN_NOISE
from gapbench.report.kit import (
    FLAGGED_MARK,
    MINUS,
    Table,
    fmt_num,
    fmt_pct,
    gap_text,
    html_table,
    md_cell,
    md_table,
    one_line,
)
from gapbench.report.runs import BUSY_HINT
from gapbench.text import json_printable

FORMATS = ("table", "md", "json", "html")
STATUS_WORDS = {"native": "native", "cpu_fallback": "CPU fallback", "unsupported": "unsupported",
                "wrong_result": "wrong result", "error": "error", "unknown": "not audited", "skipped": "not audited"}
CLASS_WORDS = {"gemm": "GEMM (matrix multiplies)", "conv": "convolution", "attention": "attention",
               "elementwise": "element-wise (operators with their own rows)",
               "memory": "memory-bound (element-wise, reductions, norms, copies)",
               "optimizer": "optimizer step (priced whole)", "collective": "collectives",
               "overhead": "per-operator cost"}
SHOWN_OPS = 6  # operators named in the verdict line


# ---- the verdict line -----------------------------------------------------------------------------------

def days_text(lo: float, hi: float) -> str:
    return "no porting effort" if hi <= 0 else f"{lo:g}–{hi:g} person-days"


def code_text(a: Assessment) -> str:
    c = a.code.counts
    blockers, manual, auto = c.get("blocker", 0), c.get("manual", 0), c.get("auto", 0)
    return (f"{blockers} blocker{'s' * (blockers != 1)}, {manual} manual and {auto} automatic "
            f"change{'s' * (auto != 1)}, {days_text(*a.code.effort_days)}")


def _op_list(ops: list[str], statuses: dict | None, limit: int = SHOWN_OPS) -> str:
    items = [f"{o} {STATUS_WORDS.get(statuses[o]['status'], statuses[o]['status'])}" if statuses else o
             for o in ops[:limit]]
    return ", ".join(items) + (f", … {len(ops) - limit} more" if len(ops) > limit else "")


def operators_text(a: Assessment) -> str:
    o = a.operators
    if o is None:
        return "operators not assessed (no --entry or --like)"
    n = len(o.ops)
    if o.coverage is None:
        return f"{n} operators, not audited on the target (no --coverage)"
    bad, unknown = o.not_native, o.not_audited
    text = f"{len(bad)} of {n} operators not native" + (f" ({_op_list(bad, o.statuses)})" if bad else "")
    if unknown:
        text += f", {len(unknown)} not audited"
    return text


def speed_text(a: Assessment) -> str:
    s = a.speed
    if s is None:
        return "speed not predicted (" + "; ".join(one_line(m, 160) for m in a.speed_missing[:2]) + ")"
    g = s.verdict(a.allow_flagged)
    if g.verdict == NO_VERDICT:
        return (f"expected speed: no verdict ({fmt_pct(s.gap_pct)}{FLAGGED_MARK} predicted; {len(s.flagged)} of the "
                f"rates it uses were {BUSY_HINT})")
    within = " (within noise: the interval holds 0)" if g.verdict == WITHIN_NOISE else ""
    return (f"expected speed {fmt_pct(s.gap_pct)} [{fmt_pct(s.lo)}, {fmt_pct(s.hi)}] against the source stack "
            f"(predicted){within}")


def verdict_line(a: Assessment) -> str:
    """The first line of every format: code, operators, speed, each with what was not known."""
    return f"moving {a.path} to {a.stack.name}: {code_text(a)}; {operators_text(a)}; {speed_text(a)}"


def warning_lines(a: Assessment) -> list[str]:
    """What makes the verdict line less than it says, before it: files given for the target that ran on another
    stack, and (once per results file) rates the host watch flagged."""
    out = [f"warning: {m}." for m in a.mismatches]
    s = a.speed
    if s is not None:
        seen: dict[str, list[str]] = {}
        for side in (s.source, s.target):
            if side.flagged:
                seen.setdefault(side.path or side.platform, []).extend(side.flagged)
        for where, rates in seen.items():
            rates = list(dict.fromkeys(rates))
            out.append(f"warning: {where}: {len(rates)} rate(s) measured on a disturbed host (the host watch flagged "
                       f"them): {', '.join(rates)}" + ("" if a.allow_flagged else " — the expected speed has no "
                                                        "verdict (--allow-flagged to judge it anyway)") + ".")
    return out


# ---- the evidence, as a document of blocks --------------------------------------------------------------

@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)  # str (a paragraph) or Table


def _code_section(a: Assessment, limit: int) -> Section:
    c, st = a.code, a.stack
    sec = Section(f"Code: the scan for {st.name}")
    sec.blocks.append(f"{c.files_scanned} files scanned in {c.root} (read only: nothing was imported or run)"
                      + (f"; {c.skipped} skipped" if c.skipped else "") + ".")
    if st.proxied:
        sec.blocks.append(f"Verdicts: {st.basis}.")
    sec.blocks.append(Table(["verdict", "findings"], [[v, str(c.counts.get(v, 0))] for v in
                                                      ("blocker", "manual", "auto", "works")],
                            styles=[[v, ""] for v in ("blocker", "manual", "auto", "works")]))
    b, w = c.effort_basis, c.effort_basis.get("weights", {})
    sec.blocks.append(
        f"Effort {days_text(*c.effort_days)} = files with automatic changes × {_pair(w, 'auto_minutes_per_file')} "
        f"min + manual units × {_pair(w, 'manual_hours')} h + blocker units × {_pair(w, 'blocker_days')} days "
        f"({w.get('hours_per_day', 8)} h days), with {b.get('auto_files', 0)} files, {b.get('manual_units', 0)} "
        f"manual units (1 + log2 of each manual rule's findings) and {b.get('blocker_units', 0)} blocker units "
        "(1 + log2 of each blocker problem's files); a blocker makes it a floor.")
    if c.blockers:
        sec.blocks.append(Table(["blocker rule", "findings", "files"],
                                [[r["rule"], str(r["findings"]), str(r["files"])] for r in c.blockers],
                                title="blockers"))
    shown = c.findings[:limit] if limit else c.findings
    if shown:
        rows = [[f"{f.path}:{f.line}", f.verdict, f.rule, one_line(f.message, 120), one_line(f.fix, 160)]
                for f in shown]
        more = f" (the worst {len(shown)} of {len(c.findings)})" if len(shown) < len(c.findings) else ""
        sec.blocks.append(Table(["where", "verdict", "rule", "what", "fix"], rows, text_columns=5,
                                title=f"findings to change{more}", styles=[["", f.verdict, "", "", ""] for f in shown]))
    return sec


def _pair(weights: dict, key: str) -> str:
    v = weights.get(key)
    return f"{v[0]:g}–{v[1]:g}" if isinstance(v, (list, tuple)) and len(v) == 2 else "?"


def _operators_section(a: Assessment, limit: int) -> Section:
    o = a.operators
    sec = Section("Operators the step needs")
    if o is None:
        sec.blocks.append("Not assessed: give --entry MODULE:FUNCTION (your step: importing it runs your code) or "
                          "--like WORKLOAD:PRESET (a built-in model of the same family).")
        return sec
    how = ("your function, imported and run (--entry, opt-in)" if o.how == "entry"
           else "a built-in workload of the same family (--like)")
    fwd, bwd = sum(o.forward.values()), sum(o.backward.values())
    sec.blocks.append(f"Traced {o.traced}: {how}, {'under fake tensors (shapes only)' if o.fake else 'on real tensors'}"
                      f"; {len(o.ops)} ATen operators, {fwd} calls in forward, {bwd} in backward.")
    if o.coverage is None:
        sec.blocks.append("Not audited on the target: no --coverage file (run gapbench coverage on the target stack, "
                          "with --grad for the backward kernels).")
        return sec
    sec.blocks.append(f"Status in {o.coverage} (audited on {o.where}):")
    counts: dict[str, int] = {}
    for op in o.ops:
        word = STATUS_WORDS.get(o.statuses.get(op, {}).get("status", "unknown"), "not audited")
        counts[word] = counts.get(word, 0) + 1
    order = ["native", *[STATUS_WORDS[s] for s in NOT_NATIVE], "not audited"]
    sec.blocks.append(Table(["status", "operators"], [[k, str(counts[k])] for k in order if k in counts]))
    listed = o.not_native + o.not_audited
    rows = [[op, STATUS_WORDS.get(o.statuses.get(op, {}).get("status", "unknown"), "not audited"),
             o.statuses.get(op, {}).get("entry") or "—", one_line(o.statuses.get(op, {}).get("reason") or "", 140)]
            for op in (listed[:limit] if limit else listed)]
    if rows:
        sec.blocks.append(Table(["operator", "status", "OpInfo entry", "reason"], rows, text_columns=4,
                                title="not native or not audited", styles=[
                                    ["", o.statuses.get(r[0], {}).get("status", ""), "", ""] for r in rows]))
    sec.blocks += [f"warning: {w}" for w in o.warnings]
    return sec


def _ms(x: float) -> str:
    return f"{fmt_num(x * 1e3, 3)} ms"


def _speed_section(a: Assessment) -> Section:
    sec = Section("Speed: predicted from measured rates")
    s = a.speed
    if s is None:
        sec.blocks += ["Not predicted:"] + [f"- {m}" for m in a.speed_missing]
        return sec
    src, tgt = s.source, s.target
    rows, used = [], []
    tgt_by = {c.cls: c for c in tgt.classes}
    for c in src.classes:
        t = tgt_by.get(c.cls)
        rows.append([CLASS_WORDS.get(c.cls, c.cls), str(c.calls), fmt_num(c.flops / 1e9, 3) if c.flops else "—",
                     fmt_num(c.bytes / 1e6, 3) if c.bytes else "—", _ms(c.seconds), _ms(t.seconds) if t else "—"])
        used.append([c.cls, "; ".join(c.rates), "; ".join(t.rates) if t else "—"])
    sec.blocks.append(Table(["class", "calls", "GFLOP", "MB moved", f"{src.platform} (source)",
                             f"{tgt.platform} (target)"], rows, text_columns=1,
                            title="the traced step's work by class, and its predicted time on each side"))
    sec.blocks.append(Table(["class", f"{src.platform}: rows used (most used first)",
                             f"{tgt.platform}: rows used"], used, text_columns=3,
                            title="the measured rates behind each class"))
    sec.blocks.append(f"Predicted step: {src.platform} {_ms(src.step_s)} [{_ms(src.lo)}, {_ms(src.hi)}], "
                      f"{tgt.platform} {_ms(tgt.step_s)} [{_ms(tgt.lo)}, {_ms(tgt.hi)}]. Expected speed of the target "
                      f"against the source: {fmt_pct(s.gap_pct)} [{fmt_pct(s.lo)}, {fmt_pct(s.hi)}] "
                      f"({s.level:.0%} interval; > 0: the target is faster).")
    sec.blocks.append(_method_text(s))
    sec.blocks += [line for p in (src, tgt) if (line := _shapes_line(p))]
    sec.blocks += [line for p in (src, tgt) if (line := _convs_line(p))]
    sec.blocks += [line for p in (src, tgt) if (line := _attention_line(p))]
    sec.blocks += [line for p in (src, tgt) if (line := _grouped_line(p))]
    sec.blocks += [line for p in (src, tgt) if (line := _optimizer_line(p))]
    m = s.measured
    if m is not None:
        err = m.step_error_pct
        sec.blocks.append(Table(
            ["", f"{src.platform} (source)", f"{tgt.platform} (target)", "gap"],
            [["measured s/iteration", _ms(m.measured_s[0]), _ms(m.measured_s[1]), gap_text(m.measured_gap, True)],
             ["predicted s/iteration", _ms(m.predicted_s[0]), _ms(m.predicted_s[1]), fmt_pct(s.gap_pct)],
             ["error", fmt_pct(err[0]), fmt_pct(err[1]), f"{m.error_pp:+.1f} pp".replace("-", MINUS)]],
            numeric=(1, 2, 3), title=f"predicted against measured ({m.workload}, the traced variant measured on both)"))
    else:
        sec.blocks.append(f"No measured check: {s.measured_note}.")
    return sec


SHOWN_SHAPES = 24  # the most a --gemm-shapes list in a hint names


def _shapes_line(p) -> str:
    """Which GEMM shapes of the step a side priced at a farther measured shape, and the command that measures
    them there: cold, as the step meets its operands (a row measured cold is taken over a hot one)."""
    return _listed_line(p.platform, p.unmeasured_gemm, p.unmeasured_share, "GEMM shape(s)", "GEMM FLOPs", "",
                        "gemm", "--flush-cache --gemm-shapes")


def _convs_line(p) -> str:
    """The same for the step's convolutions (conv:listed measures them, forward and backward)."""
    return _listed_line(p.platform, p.unmeasured_conv, p.unmeasured_conv_share, "convolution(s)",
                        "convolution FLOPs", " of their kind", "conv", "--conv-shapes")


def _attention_line(p) -> str:
    """The same for the step's attentions (attention:listed measures them, forward and backward)."""
    return _listed_line(p.platform, p.unmeasured_attention, p.unmeasured_attention_share, "attention(s)",
                        "attention FLOPs", " of their kind", "attention", "--attention-shapes")


def _grouped_line(p) -> str:
    """The same for the step's grouped GEMMs at their routed group sizes (grouped-gemm:listed measures them)."""
    return _listed_line(p.platform, p.unmeasured_grouped, p.unmeasured_grouped_share, "grouped GEMM(s)",
                        "grouped GEMM FLOPs", " of their layout", "grouped-gemm", "--grouped-shapes")


def _optimizer_line(p) -> str:
    """Which optimizer steps of the step a side has no row for at their parameter set, and the command that
    measures them there (for the optimizers the optimizer workload builds)."""
    from gapbench.workloads.micro.options import OPTIMIZERS

    how = {"nearest": "at the nearest measured parameter set", "per-operator": "operator by operator (no row of "
           "that optimizer and dtype on one side or both)"}
    lines = []
    for name, dtype, spec, kind in p.unmeasured_optimizer:
        text = (f"{p.platform}: the {name} step over {spec} ({dtype}) has no measured row at its parameter set and "
                f"was priced {how[kind]}")
        if name in OPTIMIZERS:
            flag = "" if name == "adamw" else f" --optimizer {name}"
            text += (f"; measure it on that machine with `gapbench run -w optimizer:listed --dtype {dtype}{flag} "
                     f"--param-sets {spec} --flush-cache`")
        lines.append(text)
    return "; ".join(lines) + "." if lines else ""


def _listed_line(platform: str, unmeasured, share: float, what: str, flops: str, kind: str, workload: str,
                 flag: str) -> str:
    if not unmeasured:
        return ""
    by_dtype: dict[str, list[str]] = {}
    for dtype, shape in unmeasured[:SHOWN_SHAPES]:
        by_dtype.setdefault(dtype, []).append(shape)
    cmds = "; ".join(f"`gapbench run -w {workload}:listed --dtype {d} {flag} {','.join(sh)}`"
                     for d, sh in by_dtype.items())
    more = len(unmeasured) - SHOWN_SHAPES
    return (f"{platform}: {len(unmeasured)} {what} of this step, {share:.0%} of its {flops}, have no measured row "
            f"at their shape and were priced at the nearest one{kind}; measure them on that machine with {cmds}"
            + (f" (and {more} smaller ones)" if more > 0 else "") + ".")


def _method_text(s) -> str:
    how = {True: "per-operator cost plus work (host and device are one processor)",
           False: "the larger of per-operator cost and work (the host issues operators while the device runs)"}
    sides = "; ".join(f"{p.platform}: {how[p.synchronous]}, per-operator time of launch kind={p.per_op}, "
                      f"run-to-run spread {p.spread:.1%} ({p.spread_basis})" for p in (s.source, s.target))
    how_text = ("How: each operator call costs max(FLOPs / rate, bytes / bandwidth at the nearest measured size) — "
                "the rate of a GEMM at the nearest measured shape of its dtype, of a convolution or attention at the "
                "nearest measured shape of its dtype and pass — collectives their message over the measured "
                "algorithm bandwidth, an optimizer step whole at its measured step rate where both sides have one, "
                f"summed over the step — {sides}. The interval is a seeded Monte Carlo "
                f"({s.draws} draws, seed {s.seed}) over each rate's own 95% interval and each platform's "
                "run-to-run spread")
    shifted = (f" The expected speed is the predicted steps' ratio less the model's calibrated median error on pairs "
               f"of this kind, a factor of {math.exp(-s.shift):.3f} on the ratio ({s.shift_basis})." if s.shift else "")
    shifted += _reference_text(s)
    if s.model_sigma:
        return (how_text + f", and the model's own error (σ = {s.model_sigma:.3g} in log gap: {s.model_basis})."
                + shifted)
    return how_text + ("; it covers the measurements' noise, not the model's own error (no calibration applies "
                       "here).") + shifted


def _reference_text(s) -> str:
    r = s.reference
    if r is None:
        return ""
    if r.error is None:
        return f" {s.reference_basis}."
    said = f" {r.name}, measured on both sides in the same session, missed its own gap by {r.error:+.3f} in log gap"
    if not s.reference_weight:
        return said + f"; {s.reference_basis}."
    return (said + f"; {s.reference_weight:.2f} of that is taken off this prediction, a factor of "
            f"{math.exp(-s.reference_weight * r.error):.3f} on the ratio ({s.reference_basis}).")


def _unknowns(a: Assessment) -> list[str]:
    out = []
    if a.stack.proxied:
        out.append(f"The scanner has no {a.stack.name} verdicts: the {_stack_name(a.stack.scan_target)} verdicts "
                   "stand in (see the code section).")
    o = a.operators
    if o is None:
        out.append("Operators and speed: no step traced (no --entry or --like).")
    else:
        if o.how == "entry":
            out.append(f"{o.traced} was imported and run to trace it (that is what --entry does).")
        if o.coverage is None:
            out.append("Operators not audited on the target: no coverage file.")
        elif o.not_audited:
            out.append(f"{len(o.not_audited)} operators not covered by the audit: {_op_list(o.not_audited, None)}.")
    if a.work is not None:
        out += a.work.notes
        if a.work.fake:
            out.append("The step was traced once on the CPU under fake tensors: operators chosen on data or by the "
                       "device (an attention kernel a GPU picks) are the CPU's.")
    if a.speed is None:
        out += [f"Speed not predicted: {m}." for m in a.speed_missing]
    return out


def _stack_name(key: str) -> str:
    from gapbench.scan.stacks import stacks

    st = stacks().get(key)
    return st.name if st else key


def sections(a: Assessment, limit: int = 20) -> list[Section]:
    secs = [_code_section(a, limit), _operators_section(a, limit), _speed_section(a)]
    unknowns = _unknowns(a)
    if unknowns:
        secs.append(Section("Not known", [f"- {u}" for u in unknowns]))
    return secs


# ---- formats -----------------------------------------------------------------------------------------------

def render_terminal(a: Assessment, limit: int = 20) -> list:
    """Rich renderables, the verdict first."""
    from gapbench.report.kit import rich_table, rich_text

    out: list = [rich_text(w, style="bold yellow") for w in warning_lines(a)] + [rich_text(verdict_line(a),
                                                                                          style="bold")]
    for sec in sections(a, limit):
        out.append(rich_text(""))
        out.append(rich_text(sec.title, style="bold underline"))
        out += [rich_table(b) if isinstance(b, Table) else rich_text(b) for b in sec.blocks]
    return out


def render_markdown(a: Assessment, limit: int = 20) -> str:
    lines = [x for w in warning_lines(a) for x in (f"**{md_cell(w)}**", "")] + [f"**{md_cell(verdict_line(a))}**", ""]
    for sec in sections(a, limit):
        lines += [f"### {md_cell(sec.title)}", ""]
        for b in sec.blocks:
            if isinstance(b, Table):
                lines += ([f"*{md_cell(b.title)}*", ""] if b.title else []) + md_table(b) + [""]
            else:
                lines += [md_cell(b), ""]
    return "\n".join(lines).rstrip() + "\n"


def render_json(a: Assessment) -> str:
    return json_printable(json.dumps({"verdict": verdict_line(a), "warnings": warning_lines(a), **a.to_dict(),
                                      "not_known": _unknowns(a)},
                                     indent=1, default=str, allow_nan=False)) + "\n"


CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1300px;
 padding:0 16px;color:#222;background:#fff}h1{font-size:20px;margin:0 0 4px}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px;
 vertical-align:top}th{background:#f4f4f4;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums;
 white-space:nowrap}.blocker,.unsupported,.wrong_result,.error{color:#a4161a;font-weight:600}.manual,.cpu_fallback{color:#8a5a00}
.auto{color:#0b5c7a}.works,.native{color:#17692b}.muted{color:#777}caption{text-align:left;font-weight:600;padding:2px 0}
"""


def render_html(a: Assessment, limit: int = 20) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
             f"<title>{escape('gapbench assess: ' + a.path)}</title><style>{STYLE}</style></head><body>",
             *(f'<p class="blocker">{escape(w)}</p>' for w in warning_lines(a)),
             f"<h1>{escape(verdict_line(a))}</h1>",
             f'<p class="muted">gapbench {escape(__version__)} assess · target {escape(a.stack.name)}</p>']
    for sec in sections(a, limit):
        parts.append(f"<h2>{escape(sec.title)}</h2>")
        for b in sec.blocks:
            if isinstance(b, Table):
                if b.title:
                    parts.append(f'<p class="muted">{escape(b.title)}</p>')
                parts.append(html_table(b))
            else:
                parts.append(f"<p>{escape(b)}</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render(a: Assessment, fmt: str, limit: int = 20):
    """The assessment in `fmt`: a list of rich renderables for 'table', text for the others."""
    if fmt == "table":
        return render_terminal(a, limit)
    if fmt == "md":
        return render_markdown(a, limit)
    if fmt == "json":
        return render_json(a)
    if fmt == "html":
        return render_html(a, limit)
    raise ValueError(f"unknown format {fmt!r}")
