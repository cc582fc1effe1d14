"""Kept for code written against earlier versions: the device helpers now
live in device.py."""

from .device import get_device, seed_everything

__all__ = ["get_device", "seed_everything"]
