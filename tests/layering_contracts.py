"""The family contracts of .importlinter, made from the manifests: ``python -m tests.layering_contracts --write``.

The house's floors are written by hand at the top of .importlinter; below the marker line, one contract per
family folder forbids every other family except the bases its manifest declares (``BASES``, followed
transitively: ELECTRA may import BERT, and whatever BERT's bases are), and one contract keeps every shared floor
free of every family. tests/test_layering.py checks that the file holds what this module makes.
"""
import argparse
import os
import sys

from kerasplm import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, ".importlinter")
MARKER = "# ---- made by `python -m tests.layering_contracts --write` from the manifests; do not edit below ----\n"
SHARED_FLOORS = ("kerasplm.runs", "kerasplm.options", "kerasplm.registry", "kerasplm.lazy", "kerasplm.layers",
                 "kerasplm.text", "kerasplm.training", "kerasplm.generation", "kerasplm.data", "kerasplm.jobs",
                 "kerasplm.export", "kerasplm.models.base", "kerasplm.models.presets", "kerasplm.serving",
                 "kerasplm.cli")


def family_bases():
    """``{family: its declared BASES}`` for every family folder of kerasplm/models."""
    found = {}
    for manifest in registry.manifests():
        if manifest.__name__.startswith("kerasplm.models."):
            found[registry.family_of_manifest(manifest)] = tuple(getattr(manifest, "BASES", ()))
    return found


def reachable_bases(family, bases):
    seen, todo = set(), list(bases[family])
    while todo:
        base = todo.pop()
        if base not in seen:
            seen.add(base)
            todo.extend(bases.get(base, ()))
    return seen


def family_contracts():
    bases = family_bases()
    unknown = {f: sorted(set(b) - set(bases)) for f, b in bases.items() if set(b) - set(bases)}
    if unknown:
        raise ValueError(f"BASES name families that have no folder: {unknown}")
    lines = [MARKER]
    lines += ["[importlinter:contract:shared-floors-know-no-family]",
              "name = The shared floors import no family (each family's folder is found by the registry instead)",
              "type = forbidden", "source_modules ="]
    lines += [f"    {m}" for m in SHARED_FLOORS]
    lines += ["forbidden_modules ="] + [f"    kerasplm.models.{f}" for f in sorted(bases)] + [""]
    for family in sorted(bases):
        allowed = reachable_bases(family, bases)
        if family in allowed:
            raise ValueError(f"family {family!r} reaches itself through its BASES")
        forbidden = sorted(set(bases) - allowed - {family})
        if not forbidden:
            continue
        named = ", ".join(sorted(allowed)) or "none"
        lines += [f"[importlinter:contract:family-{family}]",
                  f"name = Family {family} imports no other family but its bases ({named})",
                  "type = forbidden", "source_modules =", f"    kerasplm.models.{family}", "forbidden_modules ="]
        lines += [f"    kerasplm.models.{f}" for f in forbidden] + [""]
    return "\n".join(lines)


def expected_file(current):
    head = current.split(MARKER)[0]
    return head + family_contracts()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite .importlinter's family contracts")
    args = parser.parse_args(argv)
    with open(PATH, encoding="utf-8") as f:
        current = f.read()
    expected = expected_file(current)
    if args.write:
        with open(PATH, "w", encoding="utf-8") as f:
            f.write(expected)
        return 0
    sys.stdout.write(expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
