"""A toy model family that lives outside the package: the proof that a family is one place (its manifest, model,
job and exporter here; nothing edited under kerasplm/). tests/test_toy_family.py drives it through the real CLI."""
