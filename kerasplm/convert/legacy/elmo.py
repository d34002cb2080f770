"""Format-2 runs of the ELMO family (filled in as the family moves to run format 3)."""

BUILDERS = {}
