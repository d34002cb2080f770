"""Format-2 runs of the BERT family (filled in as the family moves to run format 3)."""

BUILDERS = {}
