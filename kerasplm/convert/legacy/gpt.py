"""Format-2 runs of the GPT family (filled in as the family moves to run format 3)."""

BUILDERS = {}
