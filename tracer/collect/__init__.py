"""Collectors. They run inside a framework's own environment, so they use the
standard library only and import nothing from the rest of the tool but trace.py."""
