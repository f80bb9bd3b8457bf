"""Checkpoints: one plain ``torch.save`` file per model, holding its kind, constructor arguments
(the architecture), ``state_dict`` and training notes; read back by :func:`load` alone.

The file is a dict of plain Python values and tensors, so ``torch.load(path, weights_only=True)``
reads it without running any code from the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .base import DecoderModel
from .presets import KINDS

__all__ = ["FORMAT", "CHECKPOINT_DIR", "save", "load", "shipped_checkpoint"]

FORMAT = "pyrolik-models/1"
#: Where the small pretrained digits checkpoints live (``digits_<kind>.pt``).
CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "checkpoints"


def _plain(value: Any, where: str = "meta") -> Any:
    """``value`` as plain Python data (what ``weights_only`` loading accepts), or TypeError."""
    if value is None or isinstance(value, bool):
        return value
    for kind in (int, float, str):  # also turns str subclasses (torch.__version__) into str
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise TypeError(f"{where} holds a {type(value).__name__}; checkpoints store only numbers, "
                    "strings, lists, dicts and tensors")


def shipped_checkpoint(kind: str) -> Path:
    """Path of the pretrained scikit-learn-digits checkpoint of ``kind``."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose one of {sorted(KINDS)}")
    return CHECKPOINT_DIR / f"digits_{kind}.pt"


def save(model: DecoderModel, path: str | os.PathLike, *, meta: dict[str, Any] | None = None,
         dtype: torch.dtype | None = torch.float32) -> Path:
    """Write ``model`` to ``path``; ``meta`` (plain values) records how it was trained.

    Floating tensors are stored as ``dtype`` (float32 by default, to keep files small; ``None``
    keeps them as they are).
    """
    if not isinstance(model, DecoderModel) or model.kind not in KINDS:
        raise TypeError(f"save expects a model from models/ ({sorted(KINDS)}), got "
                        f"{type(model).__name__}")
    state = {
        k: (v.detach().to("cpu", dtype) if dtype is not None and v.is_floating_point()
            else v.detach().cpu())
        for k, v in model.state_dict().items()
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "kind": model.kind, "config": model.config(),
                "state_dict": state, "meta": _plain(dict(meta or {}))}, path)
    return path


def load(kind: str | None, path: str | os.PathLike | None = None, *,
         dtype: torch.dtype | None = None, device: str | torch.device | None = None
         ) -> DecoderModel:
    """Read a checkpoint written by :func:`save` and return the model, in ``eval()`` mode.

    Parameters
    ----------
    kind : str or None
        ``"vae"``, ``"gan"``, ``"gmmn"`` or ``"iwae"``: must match the file (``None`` accepts any).
    path : path-like or None
        The checkpoint; ``None`` loads the shipped digits checkpoint of ``kind``.
    dtype : torch.dtype or None
        Floating dtype of the returned weights (default: ``torch.get_default_dtype()``).
    device : str or torch.device or None
        Where to put the weights (default: CPU).

    Returns
    -------
    DecoderModel
        The model; ``model.meta`` holds the training notes stored with it.
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose one of {sorted(KINDS)} (or None)")
    if path is None:
        if kind is None:
            raise ValueError("give a kind or a path: load('vae') loads the shipped digits VAE")
        path = shipped_checkpoint(kind)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise ValueError(f"{path} is not a models/ checkpoint (format {FORMAT!r}); write it with "
                         "models.save(model, path)")
    if kind is not None and ckpt["kind"] != kind:
        raise ValueError(f"{path} holds a {ckpt['kind']!r} model, not {kind!r}")
    model = KINDS[ckpt["kind"]](**ckpt["config"])
    model.load_state_dict(ckpt["state_dict"], strict=True)
    model.to(device=device or "cpu", dtype=dtype or torch.get_default_dtype())
    model.meta = ckpt.get("meta", {})
    return model.eval()
