"""Mutated results files through the four verbs that read them: does any answer end in an internal error, a
hang, a traceback, invalid JSON, or a file that breaks the schema accepted?

    PYTHONPATH=src python benchmarks/fuzz_inputs.py [--files 10000] [--seed 1] [--subprocess 40] [--out FILE]

Each mutated file (a seeded mutator: a hostile value in a random field, a deleted field, a field of another
type, an extra field, a reversed interval, truncation, flipped bytes, NaN and Infinity tokens, lone
surrogates, deep nesting, thousands of measurements) goes through `compare FILE BASE`, `compare --json BASE
FILE`, `report FILE BASE -o OUT` and `history --import FILE` as in-process calls of gapbench.cli.main (the
same exit codes as the program) under a per-call alarm, and a sample of them as real subprocesses. Special
inputs run once each: a FIFO, /dev/zero, a folder, a file over the size cap, 50,000 measurements.

Counted per call: exit codes; internal errors (exit 1 saying "internal error", or an exception out of
main); hangs (past the per-call limit); tracebacks on stderr; errors of more than one line; invalid JSON
from `compare --json` (a strict reader: no NaN); schema-invalid files accepted (exit 0 for a file that a
mutation broke on purpose, or that fails the shipped results.schema.json under the jsonschema library, an
implementation independent of gapbench's own). The target is zero for all of them.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEEDS = ["cpu-epyc-2core-quick-1thread.json", "cpu-epyc-2core-quick-2threads.json",
         "cpu-epyc-2core-collectives-gloo-2ranks.json", "cpu-epyc-2core-models-tiny.json",
         "cpu-epyc-2core-parity-tiny-1thread.json", "cpu-epyc-coverage-float32.json"]
CALL_LIMIT_S = 30

# values that break a typed field on purpose, and ones a field may hold or not
HOSTILE = [None, True, False, 0, -1, -0.0, 1.5, 1e308, 1.7976931348623157e308, 5e-324, 1e-300, 10**30, "", "7", "x" * 300, "[red]x[/]",
           "<script>alert(1)</script>", "\u202eevil", [], {}, [1, 2, 3], {"a": {"b": {"c": [1]}}}, 2**63, -2**63]
TEXT_TOKENS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" + "0" * 400, '"\\ud800"', '"\\udfff x"',
               "[" * 300 + "]" * 300, '{"a":' * 300 + "1" + "}" * 300, "1" * 5000, '"' + "y" * 20000 + '"']


class Hang(BaseException):  # not an Exception: main() must not catch it
    pass


# ---- the mutator ---------------------------------------------------------------------------------------

def paths(doc, prefix=()):
    """Every (path, value) of a document."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


def at(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def typed(path) -> bool:
    """Whether the schema types this field (a hostile value there must be refused unless it is allowed)."""
    free = ("variant", "metrics", "options", "runtime", "libraries", "env", "distributed", "backward")
    if any(p in free for p in path if isinstance(p, str)):
        return False
    names = [p for p in path if isinstance(p, str)]
    if not names:
        return False
    known = {"schema_version", "gapbench_version", "run_id", "started_at", "finished_at", "complete", "suite",
             "label", "host", "device", "measurements", "coverage", "frameworks", "workload", "preset", "value",
             "unit", "higher_is_better", "status", "reason", "stats", "flops", "bytes", "peak_memory_bytes",
             "energy_j", "power_w", "duration_s", "median", "iqr", "min", "max", "n", "ci95", "mean", "stdev",
             "noisy", "summary", "families", "ops", "op", "dtype", "family", "total", "native", "skipped",
             "native_pct", "framework", "version", "cpu_max_mhz", "isa", "memory_bytes", "product", "type",
             "cores", "threads", "count", "index", "cpufreq", "physical_cores"}
    return names[-1] in known or isinstance(path[-1], int)


def breaks(path, value) -> bool:
    """A mutation that surely breaks the schema: a value of the wrong type or out of range in a typed field."""
    last = path[-1] if path else None
    if len(path) == 1:
        need = {"schema_version": lambda v: type(v) is int and v == 1,
                "run_id": lambda v: isinstance(v, str) and 1 <= len(v) <= 100,
                "host": lambda v: isinstance(v, dict), "device": lambda v: isinstance(v, dict),
                "measurements": lambda v: isinstance(v, list)}.get(last)
        return need is not None and not need(value)
    in_measurement = len(path) >= 3 and path[0] == "measurements" and not {"metrics", "variant"} & set(path)
    if not in_measurement:
        return False
    if last == "n" and "stats" in path:
        return not (type(value) is int and 1 <= value <= 10**9)
    if len(path) == 3 and last in ("workload", "unit"):
        return not (isinstance(value, str) and 1 <= len(value) <= 200)
    if len(path) == 3 and last == "status":
        return value not in ("ok", "unsupported", "wrong_result", "too_slow", "oom", "timeout", "crashed", "error")
    numeric = {"value", "flops", "bytes", "peak_memory_bytes", "energy_j", "power_w", "duration_s", "median", "iqr",
               "min", "max", "mean", "stdev"}
    if last in numeric:
        return isinstance(value, (str, bool, list, dict)) or (isinstance(value, (int, float)) and abs(value) > 1.8e308)
    return False


def mutate(doc: dict, rng: random.Random) -> tuple[str, bytes, str, bool]:
    """(kind of mutation, file bytes, what was done, whether it surely breaks the schema)."""
    kind = rng.choice(["value"] * 6 + ["delete"] * 2 + ["extra", "swap", "interval", "ok_value", "truncate", "flip"]
                      + ["token"] * 4 + ["surrogate_key", "empty"] * 2 + ["scale"])
    return (kind, *_mutated(copy.deepcopy(doc), kind, rng))


def _mutated(doc: dict, kind: str, rng: random.Random) -> tuple[bytes, str, bool]:
    return MUTATIONS[kind](doc, rng)


def _value(doc, rng):
    path = rng.choice(_all_paths(doc))
    v = copy.deepcopy(rng.choice(HOSTILE))
    at(doc, path[:-1])[path[-1]] = v
    return dump(doc), f"value {fmt(path)} = {short(v)}", typed(path) and breaks(path, v)


REQUIRED = {("schema_version",), ("run_id",), ("host",), ("device",), ("measurements",)}


def _delete(doc, rng):
    path = rng.choice([p for p in _all_paths(doc) if isinstance(p[-1], str)])
    parent = at(doc, path[:-1])
    ok_value = len(path) == 3 and path[0] == "measurements" and path[2] == "value" and parent.get("status") == "ok"
    del parent[path[-1]]
    hard = path in REQUIRED or (len(path) == 3 and path[0] == "measurements" and path[2] in (
        "workload", "variant", "unit", "status")) or (path[-2:-1] == ("stats",) and path[-1] in (
            "median", "iqr", "min", "max", "n", "ci95"))
    return dump(doc), f"delete {fmt(path)}", hard or ok_value


def _extra(doc, rng):
    target = rng.choice([p for p, v in paths(doc) if isinstance(v, dict)])
    at(doc, target)[rng.choice(["runs", "host_watch", "x-future", "noise_flag"])] = rng.choice(
        [[1.0, 2.0], {"flag": True}, "text", 3])
    return dump(doc), f"extra field in {fmt(target)}", False


def _swap(doc, rng):
    nums = [p for p, v in paths(doc) if p and isinstance(v, (int, float)) and not isinstance(v, bool)]
    path = rng.choice(nums)
    v = str(at(doc, path))
    at(doc, path[:-1])[path[-1]] = v
    return dump(doc), f"swap {fmt(path)} to a string", typed(path) and breaks(path, v)


def _interval(doc, rng):
    ms = [m for m in doc.get("measurements", []) if isinstance(m.get("stats"), dict)]
    if not ms:
        return dump(doc), "interval (nothing to reverse)", False
    s = rng.choice(ms)["stats"]
    if rng.random() < 0.5:
        s["ci95"] = [s["ci95"][1] + 1.0, s["ci95"][0]]
        return dump(doc), "reversed ci95", True
    s["min"], s["max"] = s["max"] + 1.0, s["min"]
    return dump(doc), "min above max", True


def _ok_value(doc, rng):
    ms = [m for m in doc.get("measurements", []) if m.get("status") == "ok"]
    if not ms:
        return dump(doc), "ok value (no ok measurement)", False
    v = rng.choice([0, -1.5, None, False])
    rng.choice(ms)["value"] = v
    return dump(doc), f"ok value {v!r}", True


def _scale(doc, rng):
    ms = doc.get("measurements") or []
    if not ms:
        return dump(doc), "scale (no measurement)", False
    n = rng.choice([200, 1000, 3000])
    doc["measurements"] = [dict(copy.deepcopy(ms[i % len(ms)]), variant=dict(ms[i % len(ms)]["variant"], fuzz_i=i))
                           for i in range(n)]
    return dump(doc), f"{n} measurements", False


def _truncate(doc, rng):
    text = dump(doc)
    cut = rng.randrange(0, len(text) - 2)
    return text[:cut], f"truncated at {cut}", True


def _flip(doc, rng):
    b = bytearray(dump(doc))
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b), "flipped bytes", False


def _token(doc, rng):
    path = rng.choice([p for p, v in paths(doc) if p and isinstance(v, (int, float, str)) and not isinstance(v, bool)])
    at(doc, path[:-1])[path[-1]] = "@@FUZZ@@"
    tok = rng.choice(TEXT_TOKENS)
    if tok in ("NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" * 5000) or tok.startswith(('"\\ud', "[[[", '{"a":')):
        bad = True  # not JSON, not finite, a lone surrogate, nested past the cap: refused wherever it is
    elif tok.startswith("10"):
        bad = typed(path)  # 10**400: an integer JSON may hold, but no typed field of gapbench's
    else:
        bad = False
    return dump(doc).replace(b'"@@FUZZ@@"', tok.encode(), 1), f"token {fmt(path)} = {tok[:20]}", bad


def _surrogate_key(doc, rng):
    target = rng.choice([p for p, v in paths(doc) if isinstance(v, dict)])
    at(doc, target)["@@KEY@@"] = 1
    return dump(doc).replace(b'"@@KEY@@"', b'"\\udc80k"', 1), f"lone surrogate key in {fmt(target)}", True


def _empty(doc, rng):
    return rng.choice([b"", b"   ", b"\xef\xbb\xbf{}", b"null", b"[]", b"\xff\xfe\x00"]), "not an object", True


MUTATIONS = {"value": _value, "delete": _delete, "extra": _extra, "swap": _swap, "interval": _interval,
             "ok_value": _ok_value, "scale": _scale, "truncate": _truncate, "flip": _flip, "token": _token,
             "surrogate_key": _surrogate_key, "empty": _empty}


def _all_paths(doc):
    return [p for p, _ in paths(doc) if p]


def dump(doc) -> bytes:
    return json.dumps(doc, indent=1).encode()


def fmt(path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")[:80]


def short(v) -> str:
    return repr(v)[:40]


# ---- the oracle: is an accepted file really valid? ------------------------------------------------------

class Oracle:
    """The shipped results.schema.json under the jsonschema library, plus what JSON Schema cannot state."""

    def __init__(self):
        import jsonschema

        schema = json.loads((REPO / "src" / "gapbench" / "results.schema.json").read_text())
        self.validator = jsonschema.Draft202012Validator(schema)

    def problems(self, data: bytes) -> str:
        def no_constant(c):
            raise ValueError(f"{c} is not JSON")

        try:
            doc = json.loads(data.decode("utf-8"), parse_constant=no_constant)
            json.dumps(doc).encode("utf-8")  # lone surrogates come back out as escapes, so check the text
            doc_text = json.dumps(doc, ensure_ascii=False)
            doc_text.encode("utf-8")
        except (ValueError, UnicodeError, RecursionError) as e:
            return f"not strict JSON: {str(e)[:80]}"
        if any(isinstance(v, float) and not math.isfinite(v) for _, v in paths(doc)):
            return "a number beyond a double"
        if isinstance(doc, dict) and isinstance(doc.get("measurements"), list) and len(doc["measurements"]) > 200:
            # a scaled file repeats its seed's measurements: the first and last hundred stand for all of them
            doc = dict(doc, measurements=doc["measurements"][:100] + doc["measurements"][-100:])
        err = next(iter(self.validator.iter_errors(doc)), None)
        if err is not None:
            return f"schema: {list(err.absolute_path)}: {err.message[:80]}"
        for m in doc.get("measurements", []):
            s = m.get("stats")
            if isinstance(s, dict) and (s["ci95"][0] > s["ci95"][1] or s["min"] > s["max"]):
                return "a reversed interval"
        return ""


# ---- calling the verbs ----------------------------------------------------------------------------------

def call_inproc(argv: list[str]) -> tuple[int | str, str, str]:
    """(exit code or 'hang'/'exception', stdout, stderr) of gapbench.cli.main(argv) in this process."""
    from gapbench.cli import main

    out, err = io.StringIO(), io.StringIO()

    def alarm(signum, frame):
        raise Hang

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(CALL_LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc: int | str = main(argv)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 2
    except Hang:
        rc = "hang"
    except BaseException as e:  # noqa: BLE001 - anything out of main is a finding
        rc = "exception"
        err.write(f"Traceback (escaped main): {e.__class__.__name__}: {e}\n")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue()


def call_subprocess(argv: list[str]) -> tuple[int | str, str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    try:
        p = subprocess.run([sys.executable, "-m", "gapbench", *argv], capture_output=True, text=True,
                           timeout=CALL_LIMIT_S * 2, env=env, errors="replace")
    except subprocess.TimeoutExpired:
        return "hang", "", ""
    return p.returncode, p.stdout, p.stderr


def strict_json(text: str) -> bool:
    def no_constant(c):
        raise ValueError(c)

    try:
        json.loads(text, parse_constant=no_constant)
        return True
    except ValueError:
        return False


class Tally:
    def __init__(self):
        self.c = Counter()
        self.examples: dict[str, list[str]] = {}

    def note(self, what: str, example: str) -> None:
        print(f"finding: {what}: {example[:300]}", file=sys.stderr)
        self.c[what] += 1
        self.examples.setdefault(what, [])
        if len(self.examples[what]) < 5:
            self.examples[what].append(example[:300])

    def judge(self, verb: str, rc, out: str, err: str, label: str, must_refuse: bool, invalid: str) -> None:
        self.c["calls"] += 1
        self.c[f"exit {rc}"] += 1
        where = f"{verb} [{label}]"
        if rc == "hang":
            self.note("hangs", where)
        if rc == "exception" or (rc == 1 and "internal error" in err):
            self.note("internal errors", f"{where}: {err.strip()[-200:]}")
        if "Traceback" in err:
            self.note("tracebacks", f"{where}: {err.strip()[-200:]}")
        if rc == 2 and len(err.strip().splitlines()) != 1:
            self.note("errors not on one line", f"{where}: {err.strip()[:200]}")
        if verb == "compare --json" and rc == 0 and not strict_json(out):
            self.note("invalid JSON out", where)
        if rc == 0 and (must_refuse or invalid):
            self.note("schema-invalid files accepted", f"{where}: {invalid or 'a breaking mutation'}")


def verbs(path: str, base: str, work: str) -> list[tuple[str, list[str]]]:
    return [("compare", ["compare", path, base]),
            ("compare --json", ["compare", "--json", base, path]),
            ("report", ["report", path, base, "-o", os.path.join(work, "report.html"), "--force"]),
            ("history --import", ["history", "--import", path, "--db", os.path.join(work, "history.sqlite")])]


def specials(work: str) -> list[tuple[str, str, bool]]:
    """(path, label, must refuse) of inputs that are not mutated documents."""
    out = []
    fifo = os.path.join(work, "fifo.json")
    os.mkfifo(fifo)
    out.append((fifo, "a FIFO", True))
    out.append(("/dev/zero", "/dev/zero", True))
    out.append((work, "a folder", True))
    big = os.path.join(work, "big.json")
    with open(big, "wb") as f:
        f.write(b'{"schema_version": 1, "pad": "')
        f.write(b"x" * (65 * 2**20))
        f.write(b'"}')
    out.append((big, "65 MiB", True))
    seed = json.loads((REPO / "results" / SEEDS[0]).read_text())
    many = copy.deepcopy(seed)
    many["measurements"] = [dict(seed["measurements"][i % 13], variant={"i": i}) for i in range(50_000)]
    p = os.path.join(work, "50k.json")
    Path(p).write_text(json.dumps(many))
    out.append((p, "50,000 measurements", False))
    too_many = copy.deepcopy(seed)
    too_many["measurements"] = [{"workload": "w", "variant": {}, "unit": "u", "status": "ok", "value": 1}] * 200_000
    p = os.path.join(work, "200k.json")
    Path(p).write_text(json.dumps(too_many))
    out.append((p, "200,000 measurements", True))
    return out


def seeds() -> list[dict]:
    docs = []
    for name in SEEDS:
        d = json.loads((REPO / "results" / name).read_text())
        if d.get("coverage"):
            d["coverage"]["ops"] = d["coverage"]["ops"][:40]  # the oracle's speed, not the reader's
        docs.append(d)
    fw = copy.deepcopy(docs[0])
    fw["frameworks"] = [{"framework": "torch", "version": "2.13", "status": "works", "device": "cpu", "reason": ""},
                        {"framework": "jax", "version": None, "status": "not_installed", "device": None,
                         "reason": "no module named jax"}]
    docs.append(fw)
    return docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--subprocess", type=int, default=40, help="mutated files also run as real subprocesses")
    ap.add_argument("--out", help="write the summary (JSON) here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    docs = seeds()
    oracle = Oracle()
    tally, sub = Tally(), Tally()
    kinds = Counter()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gapbench-fuzz-") as work:
        os.environ["GAPBENCH_DB"] = os.path.join(work, "default-history.sqlite")
        base = str(REPO / "results" / SEEDS[1])
        for path, label, must in specials(work):
            for verb, argv in verbs(path, base, work):
                rc, out, err = call_inproc(argv)
                tally.judge(verb, rc, out, err, label, must, "")
        sample = set(rng.sample(range(args.files), min(args.subprocess, args.files)))
        for i in range(args.files):
            kind, data, what, must = mutate(rng.choice(docs), rng)
            kinds[kind] += 1
            f = os.path.join(work, f"m{i}.json")
            Path(f).write_bytes(data)
            invalid = None
            for verb, argv in verbs(f, base, work):
                rc, out, err = call_inproc(argv)
                if rc == 0 and invalid is None:
                    invalid = oracle.problems(data)
                tally.judge(verb, rc, out, err, what, must, invalid or "")
                if i in sample:
                    rc, out, err = call_subprocess(argv)
                    sub.judge(verb, rc, out, err, what, must, invalid or "")
            os.unlink(f)
            if (i + 1) % 500 == 0:
                print(f"{i + 1} files, {time.monotonic() - t0:.0f} s: {dict(headline(tally))}", file=sys.stderr)
    summary = {"command": " ".join(["python", "benchmarks/fuzz_inputs.py", *sys.argv[1:]]), "files": args.files,
               "seed": args.seed, "seconds": round(time.monotonic() - t0), "per_call_limit_s": CALL_LIMIT_S,
               "in_process": {**headline(tally), "exits": exits(tally), "examples": tally.examples},
               "subprocess": {"files": len(sample), **headline(sub), "exits": exits(sub), "examples": sub.examples},
               "mutations": dict(kinds.most_common())}
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    bad = sum(summary["in_process"][k] + summary["subprocess"][k] for k in FINDINGS)
    return 1 if bad else 0


FINDINGS = ("internal errors", "hangs", "tracebacks", "errors not on one line", "invalid JSON out",
            "schema-invalid files accepted")


def headline(t: Tally) -> dict:
    return {"calls": t.c["calls"], **{k: t.c[k] for k in FINDINGS}}


def exits(t: Tally) -> dict:
    return {k.removeprefix("exit "): v for k, v in sorted(t.c.items()) if k.startswith("exit ")}


if __name__ == "__main__":
    sys.exit(main())
