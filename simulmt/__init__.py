"""simulmt: streaming simultaneous machine translation."""

__version__ = "0.1.0"
