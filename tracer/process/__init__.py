"""Pure processing functions over loaded traces: no I/O, no framework imported."""
