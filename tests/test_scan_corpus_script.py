"""benchmarks/scan_corpus.py on a made-up corpus: the tuned splits scored each on its own with details, the fresh
held-out split only with --fresh-held-out-once and then as totals, never read otherwise."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "scan_corpus.py"


@pytest.fixture(scope="module")
def corpus_script():
    spec = importlib.util.spec_from_file_location("scan_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["scan_corpus"] = module     # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("scan_corpus", None)


@pytest.fixture
def tree(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "dev.py").write_text("import torch\ntorch.cuda.synchronize()\nx = 1\n")
    (repo / "old.py").write_text("import torch\ny = torch.zeros(1).cuda()\n")
    (repo / "fresh.py").write_text("import torch\nz = torch.zeros(1).cuda()\nw = 'cuda'\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "t"],
                   check=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "o__r.toml").write_text(f'''[repo]
name = "o/r"
commit = "{head}"

[[file]]
path = "dev.py"
split = "development"
labels = [[2, "torch-cuda"]]

[[file]]
path = "old.py"
split = "held-out"
labels = [[2, "torch-cuda"]]

[[file]]
path = "fresh.py"
split = "fresh-held-out"
labels = [[2, "torch-cuda"]]
''')
    return repo, corpus


def test_default_scores_both_tuned_splits_and_never_the_fresh_one(corpus_script, tree, capsys, monkeypatch):
    repo, corpus = tree
    scanned = []
    real = corpus_script.scan_files
    monkeypatch.setattr(corpus_script, "scan_files", lambda root, paths: scanned.append(paths) or real(root, paths))
    assert corpus_script.main([f"o/r={repo}", "--corpus", str(corpus), "--misses"]) == 0
    out = capsys.readouterr().out
    assert "development split" in out and "held-out split (scored once before, now tuned on)" in out
    assert "fresh" not in out and all("fresh.py" not in p for paths in scanned for p in paths)


def test_fresh_held_out_once_prints_totals_only(corpus_script, tree, capsys):
    repo, corpus = tree
    assert corpus_script.main([f"o/r={repo}", "--corpus", str(corpus), "--fresh-held-out-once"]) == 0
    out = capsys.readouterr().out
    assert "fresh held-out split (scored once)" in out and "recall by kind: torch-cuda 1/1" in out
    assert "missed" not in out and "false alarm" not in out and "fresh.py" not in out
    with pytest.raises(SystemExit):
        corpus_script.main([f"o/r={repo}", "--corpus", str(corpus), "--fresh-held-out-once", "--misses"])


def test_a_checkout_that_is_not_a_folder_is_refused(corpus_script, tree, capsys):
    _, corpus = tree
    with pytest.raises(SystemExit) as e:
        corpus_script.main([f"o/r={corpus / 'absent'}", "--corpus", str(corpus)])
    assert e.value.code == 2 and "is not a folder" in capsys.readouterr().err
