"""The `atoll` command line: thin wrappers over the other layers."""
