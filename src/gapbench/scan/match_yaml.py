"""CI workflows read as YAML (PyYAML's composer: nodes with their lines, nothing constructed, no tag run).

What the line patterns cannot see in a workflow, found here:

- the keys that make CUDA an axis of the build: a matrix's `cuda: ["11.8", "12.1"]`, its `include:`/`exclude:`
  rows (`- { cuda: '12.1.0', torch: '2.4.0' }`), a reusable workflow's `cuda-version` input, the `with:` that
  passes it on; one finding per line a person would edit (each row, each item of a block list), none where the
  value is empty (`cuda: ''` on a ROCm row) or says "no CUDA" (`false`, `cpu`, `none`);
- a compute capability beside a CUDA axis: `arch: 86` in a matrix row that also sets `cuda: "11.7"`, each line
  of `arch: [80, 90]` beside `cuda:` in a matrix (one number alone names no GPU: only next to a CUDA key);
- `if:` conditions that run a step or job only for CUDA (`matrix.cuda != ''`, `inputs.cuda-version != 'cpu'`);
- steps and jobs whose `if:` runs them only for another stack (`matrix.rocm != ''`): their lines are a port
  branch, already ported;
- the lines that only label (a step's `name:`, `id:`, a cache `key:`, a `description:`): a CUDA version in a
  step's title is no lock-in, so the line patterns' findings there are dropped.

`run:` and `script:` bodies stay with the line patterns (they are shell lines). A file that does not parse, or
is not a CI workflow (no `jobs`, `steps`, `stages`, `runs` at its top), is left to the line patterns alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gapbench.scan.branches import is_port_name
from gapbench.scan.match_python import _short
from gapbench.scan.match_text import TextMatch
from gapbench.scan.rules import Rule, RuleSet

try:   # a dependency (pyproject); without it a workflow is read by the line patterns alone
    import yaml
    _LOADER = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
except ImportError:     # pragma: no cover - declared in pyproject.toml
    yaml = None

# Top-level keys of a CI document: GitHub Actions (jobs, on; a composite action's runs), GitLab (stages),
# Azure Pipelines / Buildkite / Drone (steps, stages, jobs), CircleCI (workflows, jobs).
_CI_KEYS = frozenset({"jobs", "steps", "stages", "runs", "workflows", "pipelines"})
# Keys whose value only labels a step, a job or a cache: no line a port edits.
_LABEL_KEYS = frozenset({"name", "id", "description", "run-name", "key", "restore-keys", "title", "summary",
                         "label", "group", "display_name", "displayName"})
# A value that says "no CUDA here".
_OFF = frozenset({"", "false", "no", "off", "none", "null", "~", "cpu", "0", "[]"})
# `${{ ... }}` wrappers and the operators of an Actions expression.
_EXPR = re.compile(r"^\s*\$\{\{(.*)\}\}\s*$", re.DOTALL)
_OR_AND = re.compile(r"\|\||&&")
_CONTEXT_NAME = re.compile(r"!?\s*\b(?:matrix|inputs|env|vars|needs\.[\w-]+\.outputs|steps\.[\w-]+\.outputs)"
                           r"\.([\w-]+)")
_EMPTY_OR_OFF = re.compile(r"""^\s*(?:''|""|'cpu'|"cpu"|false|'false'|'none'|null)\s*$""", re.IGNORECASE)
# Keys whose value names another job, workflow or action of the pipeline: no setting.
_REFERENCE_KEYS = frozenset({"needs", "uses", "extends", "depends_on", "dependencies", "workflow"})
# Keys whose value is a script body (shell lines, left to the line patterns).
_BODY_KEYS = frozenset({"run", "script", "before_script", "after_script", "shell", "command", "commands", "args"})
# A value that only passes a context's value on (the matrix row or the input is the edit).
_CONTEXT_PASSED = re.compile(r"^\s*\$\{\{\s*(?:matrix|inputs|steps\.[\w-]+\.outputs|needs\.[\w-]+\.outputs)"
                             r"\.[\w.-]+\s*\}\}\s*$")
# A value that only passes the workflow's own input on.
_INPUT_PASSED = re.compile(r"^\s*\$\{\{\s*inputs\.[\w-]+\s*\}\}\s*$")
# A compute capability, or a list of them: 86, "8.6", sm_90, 90a, "75;80;86", "7.5 8.0"
_CC = re.compile(r"^\s*(?:(?:sm_?|compute_)?(?:[3-9]\d|1[0-2]\d)[af]?|[3-9]\.\d|1[0-2]\.\d)"
                 r"(?:\s*[;, ]\s*(?:(?:sm_?|compute_)?(?:[3-9]\d|1[0-2]\d)[af]?|[3-9]\.\d|1[0-2]\.\d))*\s*$")
# Mappings whose keys are names (jobs, services, stages), not settings.
_ID_PARENTS = frozenset({"jobs", "services", "workflows", "stages"})
MAX_NODES = 200_000     # a document larger than this (in nodes) is left to the line patterns


@dataclass
class YamlFacts:
    found: list[TextMatch] = field(default_factory=list)
    quiet: set[int] = field(default_factory=set)     # lines that only label: line findings there are dropped
    ported: list[tuple[int, int]] = field(default_factory=list)   # steps/jobs run only for another stack


class YamlRules:
    def __init__(self, ruleset: RuleSet):
        self.keys = ruleset.structural("yaml-key")
        self.values = ruleset.structural("yaml-value")
        self.ifs = ruleset.structural("yaml-if")
        self.arch_keys = ruleset.structural("yaml-arch-key")

    def facts(self, text: str) -> YamlFacts | None:
        """What the workflow's structure says, or None when the text is no CI workflow PyYAML can read."""
        if yaml is None:
            return None
        try:
            docs = list(yaml.compose_all(text, Loader=_LOADER))
        except (yaml.YAMLError, RecursionError, MemoryError, ValueError):
            return None
        if not any(_is_ci(d) for d in docs):
            return None
        walk = _Walk(self)
        try:
            for d in docs:
                if _is_ci(d):
                    walk.node(d)
        except (RecursionError, _TooLarge):
            return None
        walk.facts.quiet -= walk.busy
        walk.facts.quiet |= walk.passed
        return walk.facts


class _TooLarge(Exception):
    pass


def _is_ci(doc) -> bool:
    return isinstance(doc, yaml.MappingNode) and any(
        isinstance(k, yaml.ScalarNode) and k.value in _CI_KEYS for k, _ in doc.value)


def _line(node) -> int:
    return node.start_mark.line + 1


def _last_line(node) -> int:
    end = node.end_mark
    return max(_line(node), end.line + (1 if end.column > 0 else 0))


def _off(node) -> bool:
    if isinstance(node, yaml.ScalarNode):
        return node.value.strip().lower() in _OFF
    return not node.value


class _Walk:
    """One pass over the nodes (an alias's node is visited once: a YAML bomb stays linear)."""

    def __init__(self, rules: YamlRules):
        self.rules = rules
        self.facts = YamlFacts()
        self.seen: set[int] = set()
        self.flagged: set[int] = set()
        self.busy: set[int] = set()     # lines where a key that is not a label starts
        self.passed: set[int] = set()   # lines of a with: that passes the workflow's own input on to a local action
        self.seen_passed: set[int] = set()     # their value nodes

    def node(self, root) -> None:
        stack = [(root, "")]
        while stack:
            n, key = stack.pop()
            if id(n) in self.seen:
                continue
            self.seen.add(id(n))
            if len(self.seen) > MAX_NODES:
                raise _TooLarge
            if isinstance(n, yaml.MappingNode):
                self._mapping(n, ids=key in _ID_PARENTS)
                stack.extend((v, k.value if isinstance(k, yaml.ScalarNode) else "") for k, v in reversed(n.value))
            elif isinstance(n, yaml.SequenceNode):
                stack.extend((v, "") for v in reversed(n.value))

    def _add(self, rule: Rule, line: int, col: int, shown: str) -> None:
        if line not in self.flagged:
            self.flagged.add(line)
            self.facts.found.append(TextMatch(rule, line, col, _short(shown)))

    def _job_keys(self, n, key: str, v) -> None:
        """A job's runner, container, env and action inputs: runner groups and labels read as values, a job run on
        another stack's runners or container is ported, values passed on from a matrix are no axis of their own."""
        if key == "runs-on" and isinstance(v, yaml.MappingNode) and self.rules.values:
            for k2, v2 in v.value:      # `runs-on: {group: aws-g4dn-2xlarge, labels: [...]}`
                if isinstance(k2, yaml.ScalarNode) and k2.value in ("group", "labels"):
                    self._values(k2, v2)
        if (key == "runs-on" and _runs_on_port(v)) or (key == "container" and _container_port(v)):
            self.facts.ported.append((_line(n), _last_line(n)))     # a job run on another stack's runners
        if key == "env" and isinstance(v, yaml.MappingNode):
            self._env_passed_on(v)
        if key == "with" and isinstance(v, yaml.MappingNode) and _uses_local(n):
            self._passed_on(v)

    def _mapping(self, n, ids: bool = False) -> None:
        """`ids`: the mapping's keys name jobs or services (`build-cuda-windows:`), they are no axis."""
        for k, v in n.value:
            if not isinstance(k, yaml.ScalarNode):
                continue
            key = k.value
            if key in _LABEL_KEYS and isinstance(v, yaml.ScalarNode):
                self.facts.quiet.update(range(_line(v), _last_line(v) + 1))
                continue
            self.busy.add(_line(k))
            if key == "if" and isinstance(v, yaml.ScalarNode):
                self._condition(n, k, v)
                continue
            self._job_keys(n, key, v)
            if id(v) in self.seen_passed:
                continue
            rule = None if ids else next((r for r in self.rules.keys if r.regex.search(key)), None)
            if rule is not None and not _off(v):
                self._axis(rule, k, v)
            elif not ids and self.rules.values and key not in _BODY_KEYS and key not in _REFERENCE_KEYS:
                self._values(k, v)
        if not ids and self.rules.arch_keys:
            self._arch_beside_cuda(n)

    def _arch_beside_cuda(self, n) -> None:
        """`arch: 86` next to `cuda: "11.7"` in one mapping: the capability is the CUDA build's."""
        keys = [(k, v) for k, v in n.value if isinstance(k, yaml.ScalarNode)]
        if not any(r.regex.search(k.value) and not _off(v) for k, v in keys for r in self.rules.keys):
            return
        for k, v in keys:
            rule = next((r for r in self.rules.arch_keys if r.regex.search(k.value)), None)
            if rule is None or any(r.regex.search(k.value) for r in self.rules.keys):    # `cudaarch:` is an axis
                continue
            items = v.value if isinstance(v, yaml.SequenceNode) else [v]
            for item in items:
                if isinstance(item, yaml.ScalarNode) and _CC.match(item.value):
                    line = _line(k) if item is v or v.flow_style else _line(item)
                    self._add(rule, line, k.start_mark.column, f"{k.value}: {_scalar(item)}")

    def _env_passed_on(self, env) -> None:
        """`CUDA_TAG: ${{ matrix.tag }}`: an env value that only passes the matrix's or an input's value on is no
        edit, whatever its name (the matrix row or the input is)."""
        for k2, v2 in env.value:
            if isinstance(v2, yaml.ScalarNode) and _CONTEXT_PASSED.match(v2.value):
                self.passed.update(range(_line(k2), _last_line(v2) + 1))
                self.seen_passed.add(id(v2))

    def _passed_on(self, with_node) -> None:
        """`with: {cuda-version: ${{ inputs.cuda-version }}}` given to a local action or reusable workflow (`uses:
        ./...`): the value only passes this workflow's own input on; the input's declaration is the line to edit."""
        for k2, v2 in with_node.value:
            if isinstance(v2, yaml.ScalarNode) and _INPUT_PASSED.match(v2.value):
                self.seen_passed.add(id(v2))
                self.passed.update(range(_line(k2), _last_line(v2) + 1))

    def _values(self, k, v) -> None:
        """One-line values (or a list's items) that name NVIDIA's stack: `runner: nvidia-h100-1`, `gpu_type:
        nvidia`, `runs-on: [self-hosted, nvidia, h100]`, an input's `default: cu128`."""
        items = v.value if isinstance(v, yaml.SequenceNode) else [v]
        for item in items:
            if not isinstance(item, yaml.ScalarNode) or "\n" in item.value or len(item.value) > 200:
                continue
            rule = next((r for r in self.rules.values if r.regex.search(item.value)), None)
            if rule is not None:
                self._add(rule, _line(item), item.start_mark.column, f"{k.value}: {item.value}")

    def _axis(self, rule: Rule, k, v) -> None:
        """A CUDA key with a value: its line, or each line of a block list's items."""
        if isinstance(v, yaml.SequenceNode) and not v.flow_style:
            for item in v.value:
                if not _off(item):
                    self._add(rule, _line(item), item.start_mark.column, f"{k.value}: {_scalar(item)}")
            return
        self._add(rule, _line(k), k.start_mark.column, f"{k.value}: {_scalar(v)}")

    def _condition(self, owner, k, v) -> None:
        cond = v.value
        m = _EXPR.match(cond)
        if m:
            cond = m.group(1)
        for rule in self.rules.ifs:
            if _requires(cond, lambda name, r=rule: bool(r.regex.search(name))):
                self._add(rule, _line(k), k.start_mark.column, f"if: {cond.strip()}")
                break
        if _requires(cond, is_port_name):
            self.facts.ported.append((_line(owner), _last_line(owner)))


def _container_port(v) -> bool:
    """`container: rocm/dev-ubuntu-22.04` (or `container: {image: ...}`): a job run in another stack's image."""
    if isinstance(v, yaml.MappingNode):
        v = next((v2 for k2, v2 in v.value if isinstance(k2, yaml.ScalarNode) and k2.value == "image"), None)
    if not isinstance(v, yaml.ScalarNode):
        return False
    image = v.value.lower()
    return bool(re.search(r"rocm|(?:^|[/:_.-])(?:hip|amd|xpu|oneapi|ascend|cann|npu|musa)(?:$|[/:_.-])", image)) \
        and not re.search(r"nvidia|cuda", image)


def _runs_on_port(v) -> bool:
    """`runs-on: [self-hosted, amd, mi200]`: runner labels naming another stack, none naming NVIDIA's."""
    labels = [i.value for i in (v.value if isinstance(v, yaml.SequenceNode) else [v]) if isinstance(i, yaml.ScalarNode)]
    return any(is_port_name(x) for x in labels) and not any(re.search(r"(?i)nvidia|cuda", x) for x in labels)


def _uses_local(step) -> bool:
    """A step or job that uses an action or reusable workflow of this repository (`uses: ./.github/...`)."""
    return any(isinstance(k, yaml.ScalarNode) and k.value == "uses" and isinstance(v, yaml.ScalarNode)
               and v.value.startswith("./") for k, v in step.value)


def _scalar(node) -> str:
    if isinstance(node, yaml.ScalarNode):
        return node.value
    if isinstance(node, yaml.SequenceNode):
        return "[" + ", ".join(_scalar(i) for i in node.value[:4]) + (", ..." if len(node.value) > 4 else "") + "]"
    return "{...}"


def _requires(cond: str, names) -> bool:
    """Whether the condition holds only where a context value the `names` test picks is set: one of its terms
    (all of them when they are joined by `||`) tests such a value for being set (`matrix.cuda != ''`,
    `inputs.cuda-version != 'cpu'`, `matrix.rocm`, `startsWith(matrix.cuda, '12')`)."""
    ops = set(_OR_AND.findall(cond))
    terms = _OR_AND.split(cond)
    got = [_term_sets(t, names) for t in terms]
    if "||" in ops:
        return all(got) and "&&" not in ops
    return any(got)


_QUOTED = re.compile(r"""'([^']*)'|"([^"]*)\"""")
_SEARCH_CALL = re.compile(r"\b(?:startsWith|contains|endsWith)\s*\(\s*$")


def _term_sets(term: str, names) -> bool:
    term = term.strip().strip("()").strip()
    m = _CONTEXT_NAME.search(term)
    if m is None:
        return False
    if not names(m.group(1)):
        return _term_names_value(term, m, names)
    negated = m.group(0).lstrip().startswith("!")
    rest = term[m.end():].strip().rstrip(")").strip()
    if not rest:
        return not negated
    if rest.startswith("!="):
        return not negated and bool(_EMPTY_OR_OFF.match(rest[2:]))
    if rest.startswith("=="):
        return not negated and not _EMPTY_OR_OFF.match(rest[2:])
    before = term[:m.start()]
    return not negated and bool(_SEARCH_CALL.search(before))


def _term_names_value(term: str, m: re.Match, names) -> bool:
    """A context value compared with, or searched for, a literal the `names` test picks: `matrix.toolkit ==
    'cuda'`, `contains(inputs.toolkit_type, 'cuda')`, `startsWith(matrix.backend, 'rocm')`."""
    if m.group(0).lstrip().startswith("!"):
        return False
    rest = term[m.end():].strip()
    if rest.startswith("=="):
        lit = _QUOTED.match(rest[2:].strip())
    elif _SEARCH_CALL.search(term[:m.start()]) and rest.startswith(","):
        lit = _QUOTED.match(rest[1:].strip())
    else:
        return False
    return lit is not None and bool(names(lit.group(1) if lit.group(1) is not None else lit.group(2)))
