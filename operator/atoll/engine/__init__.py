"""Pure admission algorithms over an immutable snapshot: no I/O, no clock, no pydantic."""
