"""End-to-end jobs (train, evaluate, translate) over a run directory: what the CLI and notebooks call."""
