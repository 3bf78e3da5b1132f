"""The detector stack: rules, peer groups, own-history statistics, presence and maintenance,
run together on every tick (see stack.py for what runs where, and why)."""

from detectors.stack.history import DriftFactory, default_drift
from detectors.stack.stack import DetectorStack

__all__ = ["DetectorStack", "DriftFactory", "default_drift"]
