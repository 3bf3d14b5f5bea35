"""The `truerun` command line."""
