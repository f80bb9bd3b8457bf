"""The wheel: built from the source tree, it holds every subpackage and data file, and installs and
runs from a fresh virtual environment (not from the checkout)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import venv
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(ROOT), "-w", str(out)], check=True, capture_output=True, cwd=out)
    (path,) = out.glob("pyrolik-*.whl")
    return path


def _packages(root: pathlib.Path, prefix: str) -> set[str]:
    return {prefix + "/" + str(p.parent.relative_to(root)).replace(os.sep, "/")
            if p.parent != root else prefix for p in root.rglob("__init__.py")}


def test_wheel_holds_every_subpackage_and_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    folders = {n.rsplit("/", 1)[0] for n in names if n.endswith("/__init__.py")}
    expected = _packages(ROOT / "pyrolik", "pyrolik") | _packages(ROOT / "models", "pyrolik_models")
    assert expected <= folders, f"missing from the wheel: {sorted(expected - folders)}"
    assert "pyrolik/py.typed" in names
    checkpoints = {p.name for p in (ROOT / "models" / "checkpoints").glob("*.pt")}
    assert checkpoints and {f"pyrolik_models/checkpoints/{c}" for c in checkpoints} <= names
    assert any(n.endswith("licenses/LICENSE") for n in names)


def test_wheel_installs_and_runs_in_a_fresh_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    # the dependencies (torch, pyro, arviz, ...) come from this interpreter's site-packages: the
    # machine reaches no index for torch's CPU build; pyrolik itself comes from the wheel alone
    venv.create(env_dir, system_site_packages=True, with_pip=True)
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed",
                    str(wheel)], check=True,
                   capture_output=True)
    script = (
        "import warnings; warnings.simplefilter('ignore', FutureWarning)\n"
        "import pathlib, sys, torch, pyrolik, pyrolik_models\n"
        "from pyrolik_models.oracles.linear_gaussian import LinearGaussian\n"
        "for m in (pyrolik, pyrolik_models):\n"
        "    assert pathlib.Path(m.__file__).is_relative_to(sys.prefix), m.__file__\n"
        "lg = LinearGaussian.random(data_dim=3, latent_dim=2)\n"
        "x = lg.marginal().sample((2,))\n"
        "r = pyrolik.ais(lg, x, num_steps=5, num_chains=4, seed=0, progress=False)\n"
        "assert torch.isfinite(r.log_likelihood).all()\n"
        "assert pyrolik_models.load('vae') is not None\n"
        "print(pyrolik.__version__)\n"
    )
    out = subprocess.run([str(python), "-c", script], capture_output=True, text=True, cwd=tmp_path,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == __import__("pyrolik").__version__
