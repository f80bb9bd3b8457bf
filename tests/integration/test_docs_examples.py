"""Every Python block of docs/*.md runs as written, from an installed package.

Each page runs in a fresh interpreter whose only source of pyrolik is an installed layout (``pyrolik``
and ``pyrolik_models`` as ``pip install`` lays them out, not the repository root), in an empty
working directory: an example that imports ``models.*`` (a checkout path) or reads a file of the
repository fails here as it would for a user. A block that starts with ``# name.py`` is a file the
page asks the reader to create: it is written to the working directory, not run. docs/curves.md
runs in ``tests/integration/test_curves_docs.py`` and the README's blocks in ``tests/integration/test_readme.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TESTED_ELSEWHERE = {"curves.md"}
INDEX = "index.md"  # the site's landing page (docs/conf.py): cards and a table of contents
# pages without Python: tables of contents, the tutorials' gallery, the benchmark results included
NO_EXAMPLES = {INDEX, "guides.md", "gallery.md", "benchmarks.md"}
PAGES = sorted(p.name for p in DOCS.glob("*.md") if p.name not in TESTED_ELSEWHERE | NO_EXAMPLES)
FILE_BLOCK = re.compile(r"#\s*(\w+\.py)\b")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def installed_layout(tmp_path: Path) -> Path:
    """``site/pyrolik`` and ``site/pyrolik_models``, as pyproject's package-dir installs them."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "pyrolik").symlink_to(ROOT / "pyrolik")
    (site / "pyrolik_models").symlink_to(ROOT / "models")
    return site


def environment(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYROLIK_")}
    env.update(PYTHONPATH=str(site), MPLBACKEND="Agg", OMP_NUM_THREADS="1",
               PYTHONWARNINGS="ignore::FutureWarning,ignore::DeprecationWarning")
    return env


def run_page(name: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Write the page's file blocks, run its other blocks in order in one interpreter."""
    site = installed_layout(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    code = []
    for block in python_blocks((DOCS / name).read_text()):
        first = block.lstrip().splitlines()[0]
        match = FILE_BLOCK.match(first)
        if match:
            (work / match.group(1)).write_text(block)
        else:
            code.append(block)
    assert code or list(work.iterdir()), f"no python examples in {name}"
    script = work / "_page.py"
    script.write_text("\n".join(code))
    env = environment(site)
    proc = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return work, env


@pytest.mark.parametrize("name", PAGES)
def test_doc_examples_run_from_an_installed_package(name, tmp_path):
    run_page(name, tmp_path)


def test_the_layout_hides_the_checkout(tmp_path):
    """The check above can fail: ``models`` (the checkout's name) is not importable there."""
    site = installed_layout(tmp_path)
    proc = subprocess.run([sys.executable, "-c", "import pyrolik_models.oracles.rbm, pyrolik; "
                           "print(pyrolik.__file__); import models.oracles.rbm"], cwd=tmp_path,
                          env=environment(site), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "No module named 'models'" in proc.stderr
    assert proc.stdout.strip() == str(site / "pyrolik" / "__init__.py")


def test_scale_page_session_and_torchrun_example(tmp_path):
    """docs/scale.md: the model files, the command-line session and the torchrun script."""
    work, env = run_page("scale.md", tmp_path)
    text = (DOCS / "scale.md").read_text()
    (session,) = [b for b in bash_blocks(text) if "pyrolik summary run.ais.nc" in b]
    env = dict(env, PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    # the `pyrolik` command as the installed entry point runs it
    (work / "bin").mkdir()
    launcher = work / "bin" / "pyrolik"
    launcher.write_text(f"#!{sys.executable}\nimport sys\nfrom pyrolik.app.cli import main\n"
                        "sys.exit(main())\n")
    launcher.chmod(0o755)
    env["PATH"] = f"{work / 'bin'}:{env['PATH']}"
    proc = subprocess.run(["bash", "-e", "-c", session], cwd=work, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (work / "run.ais.nc").exists() and (work / "bdmc.nc").exists()
    assert "log p(x) [nats]" in proc.stdout
    (script,) = [b for b in python_blocks(text) if b.lstrip().startswith("# my_eval.py")]
    assert "torchrun --standalone --nproc-per-node 2 my_eval.py" in script
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "my_eval.py"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "log p(x) [nats]" in proc.stdout


def test_nothing_shipped_cites_api_md():
    """API.md is the team's contract and does not ship: docstrings and docs point at the README."""
    shipped = [*ROOT.glob("pyrolik/**/*.py"), *ROOT.glob("models/**/*.py"), *DOCS.glob("*.md"),
               ROOT / "README.md"]
    citing = [str(p.relative_to(ROOT)) for p in shipped if "API.md" in p.read_text()]
    assert citing == []


def test_the_reference_lists_every_guide():
    """Every markdown page is in a table of contents of the site (docs/index.md, docs/guides.md)."""
    entries = []
    for page in DOCS.glob("*.md"):
        for toctree in re.findall(r"```\{toctree\}\n(.*?)```", page.read_text(), flags=re.S):
            entries += re.findall(r"^([\w/]+)$", toctree, flags=re.M)
    assert len(entries) == len(set(entries)), "a page listed twice (Sphinx -W refuses it)"
    assert {p.stem for p in DOCS.glob("*.md")} - {Path(INDEX).stem} <= set(entries)
