"""Discrete-event simulator that drives `atoll.engine` and `atoll.state` on a virtual clock."""
