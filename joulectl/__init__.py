"""joulectl: GPU and CPU power control for GPU fleets."""

__version__ = "0.1.0"
