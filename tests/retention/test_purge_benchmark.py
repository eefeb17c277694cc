"""A tiny run of the purge benchmark (``benchmarks/purge.py``): it runs and checks its state.

The figures are printed by the benchmark and never asserted; only the business state is.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from tests.conftest import backend_url

pytestmark = pytest.mark.benchmark

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "purge.py"


def _benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmarks_purge", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_purge_benchmark_tiny_run(backend: str, tmp_path: Path) -> None:
    url = backend_url(backend, tmp_path)
    out = tmp_path / "purge.json"
    result = CliRunner().invoke(
        _benchmark().main,
        [
            "--dburl",
            url,
            "--rows",
            "3000",
            "--batch-size",
            "400",
            "--repeats",
            "1",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    (figures,) = document["results"]
    (run,) = figures["runs"]
    assert run["deleted"] == 1500 and run["batches"] == 4  # 1500 rows in batches of <= 400
    assert "purge: delete the expired half" in result.output
