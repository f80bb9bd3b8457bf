"""The wheel: built from the source tree, it holds every subpackage and data file, and installs and
runs from a fresh virtual environment (not from the checkout)."""

from __future__ import annotations

import os
import pathlib
import site
import subprocess
import sys
import sysconfig
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


def _running_site_dirs() -> list[str]:
    """The site-packages folders of the environment running the tests, whatever its kind (a
    virtualenv, a conda environment, the system interpreter), with the user site where it is on."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def _venv_seeing_running_env(env_dir: pathlib.Path) -> pathlib.Path:
    """A fresh virtual environment that imports the dependencies (torch, pyro, arviz, ...) from the
    running environment: its site-packages folders are listed in a .pth file of the new one. Not
    `system_site_packages=True`, which would give the *base* interpreter's packages, not those of the
    virtualenv the tests run in. A .pth file's plain lines are added to sys.path without reading the
    .pth files in those folders, so the running environment's editable pyrolik (an import hook or a
    path installed by its own .pth file) stays out: pyrolik comes from the wheel alone."""
    venv.create(env_dir, system_site_packages=False, with_pip=True)
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    assert purelib != sysconfig.get_path("purelib")
    pathlib.Path(purelib, "_running_environment.pth").write_text("\n".join(_running_site_dirs()) + "\n")
    return python


def test_wheel_installs_and_runs_in_a_fresh_venv(wheel, tmp_path):
    # the dependencies come from the running environment (the machine reaches no index for torch's
    # CPU build); pyrolik itself comes from the wheel alone
    python = _venv_seeing_running_env(tmp_path / "venv")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed",
                    str(wheel)], check=True,
                   capture_output=True)
    script = (
        "import warnings; warnings.simplefilter('ignore', FutureWarning)\n"
        "import pathlib, sys, torch, pyrolik, pyrolik_models\n"
        "from pyrolik_models.oracles.linear_gaussian import LinearGaussian\n"
        "for m in (pyrolik, pyrolik_models):\n"
        "    assert pathlib.Path(m.__file__).is_relative_to(sys.prefix), m.__file__\n"
        "assert not pathlib.Path(torch.__file__).is_relative_to(sys.prefix), torch.__file__\n"
        f"assert {str(ROOT)!r} not in map(str, sys.path), sys.path\n"
        "assert not [n for n in sys.modules if n.startswith('__editable__')], 'editable pyrolik'\n"
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
