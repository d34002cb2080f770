"""The notebooks run top to bottom (in "ci" mode) and the committed ones carry readable outputs.

* ``test_notebook_runs``: executes each ``notebooks/*.ipynb`` with nbclient in a fresh kernel of THIS
  interpreter, ``KERASPLM_NOTEBOOK_MODE=ci`` and a temporary working directory (``runs/`` and
  ``export/`` land there); any cell error fails the test. ``KERASPLM_DATA_DIR`` points the notebooks at
  ``../shared/data`` when the checkout has it (without it they fall back to bundled or generated data).
  A notebook may write the ids of processes it started to ``notebook_children.pid`` (one per line):
  they must all be gone afterwards.
* ``test_committed_notebook_outputs``: the committed files were executed (every code cell has an
  execution count and no error output), plots carry ``image/png`` outputs, and each file is small.
"""
import base64
import json
import os
import pathlib
import sys
import time

import pytest

from tests.conftest import SHARED_DATA

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
MAX_NOTEBOOK_BYTES = 1_500_000
CELL_TIMEOUT = 600
PID_FILE = "notebook_children.pid"


def _ids(paths):
    return [p.stem for p in paths]


@pytest.fixture
def kernel_name(tmp_path, monkeypatch):
    """A kernelspec that starts ipykernel with this very interpreter (not whatever `python` is on PATH)."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "kerasplm-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "kerasplm test kernel", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return "kerasplm-test"


def _execute(nb, cwd, kernel_name):
    client = nbclient.NotebookClient(nb, kernel_name=kernel_name, timeout=CELL_TIMEOUT,
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its dead parent's init) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def test_kernel_uses_this_interpreter(tmp_path, kernel_name):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys; print(sys.executable)")])
    _execute(nb, tmp_path, kernel_name)
    printed = "".join(o.get("text", "") for o in nb.cells[0].outputs).strip()
    assert os.path.realpath(printed) == os.path.realpath(sys.executable)


def test_notebooks_exist():
    assert {"01_transformer_translation", "02_bert", "03_gpt", "04_elmo", "05_export_and_serving",
            "07_semantic_search"} <= set(_ids(NOTEBOOKS))


def run_notebook(path, tmp_path, kernel_name, monkeypatch):
    """Executes ``path`` in ci mode; fails on any cell error or on a process the notebook left running."""
    monkeypatch.setenv("KERASPLM_NOTEBOOK_MODE", "ci")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    if SHARED_DATA.is_dir():
        monkeypatch.setenv("KERASPLM_DATA_DIR", str(SHARED_DATA))
    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    try:
        _execute(nb, tmp_path, kernel_name)
    finally:
        pid_file = tmp_path / PID_FILE
        if pid_file.exists():
            pids = [int(line) for line in pid_file.read_text().split()]
            deadline = time.monotonic() + 10
            while any(_pid_alive(p) for p in pids) and time.monotonic() < deadline:
                time.sleep(0.2)
            alive = [p for p in pids if _pid_alive(p)]
            for pid in alive:  # do not leak a server into the rest of the test session
                os.kill(pid, 9)
            assert not alive, f"{path.name} left processes running: {alive}"
    print(f"{path.name}: {time.monotonic() - start:.0f}s in ci mode")


def _notebook_run_class(path):
    def test_runs_top_to_bottom(self, tmp_path, kernel_name, monkeypatch):
        run_notebook(path, tmp_path, kernel_name, monkeypatch)

    return type(f"TestNotebook_{path.stem}", (), {"test_runs_top_to_bottom": test_runs_top_to_bottom,
                                                  "__doc__": f"{path.name} runs top to bottom in ci mode."})


# One test class per notebook: under `pytest -n 2 --dist loadscope` (the README's command) a class is a unit of
# its own while the other tests go by file, so the notebook runs, the longest tests of the suite, can go to
# different workers instead of queueing behind each other.
for _path in NOTEBOOKS:
    globals()[f"TestNotebook_{_path.stem}"] = _notebook_run_class(_path)


def _draws_plot(source):
    """A cell that shows a matplotlib figure must come with an image/png output."""
    return "plt.show()" in source or "display(fig)" in source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_committed_notebook_outputs(path):
    size = path.stat().st_size
    assert size < MAX_NOTEBOOK_BYTES, f"{path.name} is {size:,} bytes (limit {MAX_NOTEBOOK_BYTES:,})"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells, f"{path.name} has no code cell"
    assert "parameters" in code_cells[0].metadata.get("tags", []), "the first code cell must be tagged 'parameters'"
    assert "KERASPLM_NOTEBOOK_MODE" in code_cells[0].source
    counts = []
    for i, cell in enumerate(code_cells):
        where = f"{path.name}, code cell {i + 1}"
        assert cell.execution_count is not None, f"{where} was not executed"
        counts.append(cell.execution_count)
        assert not [o for o in cell.outputs if o.output_type == "error"], f"{where} has an error output"
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        if _draws_plot(cell.source):
            assert images, f"{where} draws a plot but has no image/png output"
        for output in images:
            png = base64.b64decode(output["data"]["image/png"])
            assert png[:8] == b"\x89PNG\r\n\x1a\n", f"{where}: image/png is not a PNG"
            assert len(png) < 400_000, f"{where}: a {len(png):,}-byte image (lower the dpi)"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), \
        f"{path.name} was not executed top to bottom in one run (execution counts {counts})"
    # The committed run is the full one, not a ci-mode run.
    assert nb.metadata.get("kerasplm", {}).get("mode") == "full", \
        f"{path.name} must be committed with outputs of a KERASPLM_NOTEBOOK_MODE=full run"
