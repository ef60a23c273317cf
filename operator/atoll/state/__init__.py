"""The live cache and the pending queues: mutable, synchronous, no I/O."""
