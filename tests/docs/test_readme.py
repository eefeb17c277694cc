"""The README is the front door: at most 8 KB, its example runs (on SQLite, as written),
and every link it has into the repository names a file that exists. (Its second example,
the testing fixture's, runs in ``tests/backends/testkit/test_docs_example.py``.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_readme_fits_on_a_screen_or_two() -> None:
    assert len(README.read_bytes()) <= 8 * 1024


def test_the_readme_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```$", README.read_text(), re.MULTILINE | re.DOTALL)
    assert len(blocks) == 3, "the example, the testing fixture's, the Kafka and SQS consumers"
    assert "exactly_once" in blocks[1]
    for _ in range(2):  # as written, again: the same output, nothing left in the folder
        done = subprocess.run(
            [sys.executable, "-c", blocks[0]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["ack", "Outcome.PROCESSED", "ack", "Outcome.DUPLICATE"]
        assert list(tmp_path.iterdir()) == []


def test_every_link_into_the_repository_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert local, "the README links into the docs"
    for link in local:
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"


def test_the_readme_kafka_and_sqs_consumers_are_the_adapters_own() -> None:
    """Shown, not run (no broker here): the block compiles, its imports are the adapters'
    classes, and each keyword it passes is a parameter of that class (the consumers run
    in tests/backends/brokers/test_kafka.py and test_sqs.py)."""
    import ast
    import inspect

    from sa_inbox.brokers.kafka import Consumer as KafkaConsumer
    from sa_inbox.brokers.sqs import Consumer as SqsConsumer

    block = re.findall(r"^```python\n(.*?)^```$", README.read_text(), re.MULTILINE | re.DOTALL)[2]
    compile(block, "README.md", "exec")
    tree = ast.parse(block)
    classes = {"KafkaConsumer": KafkaConsumer, "SqsConsumer": SqsConsumer}
    made = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in classes
    ]
    assert sorted(node.func.id for node in made) == sorted(classes)  # type: ignore[attr-defined]
    for node in made:
        parameters = inspect.signature(classes[node.func.id]).parameters  # type: ignore[attr-defined]
        assert {k.arg for k in node.keywords} <= set(parameters), node.func.id  # type: ignore[attr-defined]
    assert len(block.strip().splitlines()) < 15
