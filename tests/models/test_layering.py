"""Layering of ``kerasplm/models``: a model may import the ground floor (layers, text, training losses, the
generation engine) but never the jobs and tools built on models (tasks, export, convert, serving, cli), not
even inside a function."""
import ast
import pathlib

import kerasplm.models

MODELS = pathlib.Path(kerasplm.models.__file__).parent
UPPER_FLOORS = ("kerasplm.jobs", "kerasplm.families", "kerasplm.export", "kerasplm.convert", "kerasplm.serving", "kerasplm.cli")


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name


def test_models_import_no_upper_floor():
    found = [f"{path.name}:{node.lineno} {module}" for path in sorted(MODELS.glob("*.py"))
             for node, module in _imports(ast.parse(path.read_text()))
             if module == "kerasplm.cli" or module.startswith(tuple(f + "." for f in UPPER_FLOORS))
             or module in UPPER_FLOORS]
    assert not found, f"kerasplm/models imports the floors above it: {found}"


def test_models_import_kerasplm_at_module_level():
    """Function-level imports hide cycles; the one allowed is the registry's ``import kerasplm.models`` (the
    package imports the registry, so the registry can only import the package when asked for a preset)."""
    allowed = {("presets.py", "kerasplm.models")}
    found = []
    for path in sorted(MODELS.glob("*.py")):
        tree = ast.parse(path.read_text())
        in_functions = {id(inner) for node in ast.walk(tree)
                        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for inner in ast.walk(node)}
        found += [f"{path.name}:{node.lineno} {module}" for node, module in _imports(tree)
                  if module.split(".")[0] == "kerasplm" and id(node) in in_functions
                  and (path.name, module) not in allowed]
    assert not found, f"function-level kerasplm imports in kerasplm/models: {found}"
