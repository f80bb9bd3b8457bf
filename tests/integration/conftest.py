"""The documentation site, built once per test session for the site and reference tests."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build_site(out: Path) -> Path:
    """The HTML site of this checkout, built as .ci/run builds it (warnings are errors)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                    os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(ROOT / "docs"), str(out)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return out


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory) -> Path:
    """The built site: ``PYROLIK_DOCS_HTML`` when set (``.ci/run`` passes the one it built), else
    built here once for all pytest-xdist workers (the first to take the lock builds it)."""
    prebuilt = os.environ.get("PYROLIK_DOCS_HTML")
    if prebuilt:
        assert (Path(prebuilt) / "index.html").is_file(), f"PYROLIK_DOCS_HTML={prebuilt}: no site"
        return Path(prebuilt)
    shared = tmp_path_factory.getbasetemp().parent
    out = shared / "docs-html"
    with open(shared / "docs-html.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "index.html").is_file():
            build_site(out)
    return out
