"""Evaluation inside a training loop: log p(x) of fixed train and test subsets over the epochs."""

from __future__ import annotations

from pyrolik.training.monitor import TrainingMonitor

__all__ = ["TrainingMonitor"]
