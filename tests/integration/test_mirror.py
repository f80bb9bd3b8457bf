"""The tests mirror the package: ``pyrolik/<sub>/<module>.py`` is tested in
``tests/<sub>/test_<module>.py``, or the table below names where it is tested instead (modules that
only make sense through the estimators or the command line). A new module needs one or the other."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TESTED_ELSEWHERE = {
    "results/convert.py": "results/test_datatree.py",  # the converters: every group, every kind
    "results/layout.py": "io/test_export.py",  # the declarations, read back by every round trip
    "_validate.py": "infer/test_annealing.py",  # bad input at every estimator's boundary
    "_version.py": "io/test_export.py",  # versions recorded in every export
    "advice.py": "results/test_warnings.py",
    "exceptions.py": "integration/test_public_api.py",
    "app/commands.py": "app/test_cli.py",
    "app/loading.py": "app/test_cli.py",
    "distortion/anneal.py": "distortion/test_curve.py",
    "distortion/bounds.py": "distortion/test_curve.py",
    "distortion/plots.py": "distortion/test_curve.py",
    "execution/batches.py": "infer/test_annealing.py",  # batch_size changes only MC noise
    "io/datasets.py": "curves/test_curve.py",
    "model/dataset.py": "infer/test_global_latents.py",  # the whole data set as one example
    "model/messenger.py": "integration/test_idioms_more.py",
    "model/modules.py": "integration/test_idioms.py",
    "results/bdmc.py": "results/test_warnings.py",  # the gap, its MCSE, an inverted gap
}


def _modules() -> list[Path]:
    return sorted(p.relative_to(ROOT / "pyrolik") for p in (ROOT / "pyrolik").rglob("*.py")
                  if not p.name.startswith("__"))


def test_every_module_has_its_test_file_or_says_where_it_is_tested():
    missing = []
    for rel in _modules():
        mirror = ROOT / "tests" / rel.parent / f"test_{rel.stem.lstrip('_')}.py"
        if not mirror.exists() and str(rel.as_posix()) not in TESTED_ELSEWHERE:
            missing.append(f"{rel.as_posix()} (expected {mirror.relative_to(ROOT).as_posix()})")
    assert not missing, "modules with no test file:\n" + "\n".join(missing)


def test_the_table_names_real_files_and_no_mirrored_module():
    for module, where in TESTED_ELSEWHERE.items():
        assert (ROOT / "pyrolik" / module).exists(), f"{module} no longer exists: drop it"
        assert (ROOT / "tests" / where).exists(), f"{where} (for {module}) does not exist"
        mirror = ROOT / "tests" / Path(module).parent / f"test_{Path(module).stem.lstrip('_')}.py"
        assert not mirror.exists(), f"{module} has {mirror.name} now: drop it from the table"


def test_test_folders_mirror_subpackages():
    subpackages = {p.name for p in (ROOT / "pyrolik").iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    # integration: end-to-end and document tests; models: the pyrolik_models package (models/);
    # data: result files written by earlier versions
    assert folders - {"integration", "models", "data"} <= subpackages, folders - subpackages
