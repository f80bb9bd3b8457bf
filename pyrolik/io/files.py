"""Write and read result files atomically; netCDF through :mod:`pyrolik.io.export` when it is there.

Until ``pyrolik.io.export`` lands, results are written with ``torch.save`` (a zip file whatever the
suffix); :func:`load_result` reads both kinds, telling them apart by their first bytes.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch

from pyrolik.io.checkpoint import atomic_write_bytes

__all__ = ["save_result", "load_result"]

_NETCDF_MAGIC = (b"CDF\x01", b"CDF\x02", b"\x89HDF")


def _export():
    try:
        from pyrolik.io import export
    except ImportError:
        return None
    return export if hasattr(export, "save") and hasattr(export, "load") else None


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(4)


def save_result(result: Any, path: str | os.PathLike) -> Path:
    """Write ``result`` to ``path`` atomically (temporary file, then rename)."""
    path = Path(path)
    export = _export()
    if export is not None:
        return Path(export.save(result, path))
    buf = io.BytesIO()
    torch.save(result, buf)
    atomic_write_bytes(path, buf.getvalue())
    return path


def load_result(path: str | os.PathLike) -> Any:
    """Read a result written by :func:`save_result` (netCDF/zarr via the export module, or torch)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"result file {path} does not exist")
    if path.is_dir() or _head(path) in _NETCDF_MAGIC:
        export = _export()
        if export is None:
            raise ValueError(f"{path} is a netCDF/zarr file but pyrolik.io.export is not available")
        return export.load(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - any failure means this is not a result file
        raise ValueError(f"{path} is not a pyrolik result file ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from err
