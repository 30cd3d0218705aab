"""simulmt."""
