"""Renderers: one module per output. They read traces and processing results, never
the live program."""
