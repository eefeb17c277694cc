"""A throwaway Alembic project in a temp dir, driven through Alembic's Python API or its CLI."""

from __future__ import annotations

import configparser
import importlib.util
import io
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import command

from sa_inbox.alembic import Config

BIN = Path(sys.executable).parent
#: Keeps the subprocess from picking up a developer's own alembic.ini or env settings.
SUBPROCESS_TIMEOUT = 120  # seconds


class Project:
    """``root/alembic.ini`` + ``root/migrations`` + a models module on ``root``.

    :param root: the project directory (a pytest ``tmp_path``).
    :param url: the database URL written to ``sqlalchemy.url``.
    """

    def __init__(self, root: Path, url: str) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.url = url
        self.ini = root / "alembic.ini"
        self.migrations = root / "migrations"
        #: unique per project: the pytest process imports it and caches it in sys.modules
        self.models_module = f"app_models_{uuid.uuid4().hex[:10]}"

    # -- set-up -------------------------------------------------------------------------

    def init(self, template: str = "sa_inbox") -> None:
        """``alembic init`` through the Python API with sa-inbox's Config."""
        command.init(Config(str(self.ini)), str(self.migrations), template=template)
        self.configure()

    def configure(self) -> None:
        """Point the ini at the database, the project dir and the models module."""
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(self.ini)
        parser["alembic"]["sqlalchemy.url"] = self.url.replace("%", "%%")
        parser["alembic"]["prepend_sys_path"] = str(self.root)
        if parser.has_section("sa_inbox"):
            parser["sa_inbox"]["target_metadata"] = f"{self.models_module}:metadata"
        with self.ini.open("w") as f:
            parser.write(f)

    def set_options(self, section: str = "sa_inbox", **options: str) -> None:
        """Set ``options`` in ``section`` of the ini (an empty value: the option unset)."""
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(self.ini)
        for key, value in options.items():
            parser[section][key] = value
        with self.ini.open("w") as f:
            parser.write(f)

    def write_models(self, body: str) -> None:
        """(Re)write the models module; ``body`` defines ``metadata``."""
        header = "import sqlalchemy as sa\nfrom sa_inbox import Inbox\n\nmetadata = sa.MetaData()\n"
        (self.root / f"{self.models_module}.py").write_text(header + body)
        sys.modules.pop(self.models_module, None)

    def import_models(self) -> ModuleType:
        """The models module, imported in this process (the same MetaData env.py used)."""
        if self.models_module in sys.modules:
            return sys.modules[self.models_module]
        path = self.root / f"{self.models_module}.py"
        spec = importlib.util.spec_from_file_location(self.models_module, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.models_module] = module
        spec.loader.exec_module(module)
        return module

    def config(self, output_buffer: io.StringIO | None = None) -> Config:
        return Config(str(self.ini), output_buffer=output_buffer, stdout=io.StringIO())

    def autogenerate(self, message: str) -> str:
        """``alembic revision --autogenerate -m message``; the new revision's text."""
        before = set(self.revision_files())
        command.revision(self.config(), message=message, autogenerate=True)
        (new,) = set(self.revision_files()) - before
        return new.read_text()

    # -- reading ------------------------------------------------------------------------

    def revision_files(self) -> list[Path]:
        return sorted((self.migrations / "versions").glob("*.py"))

    def engine(self) -> sa.Engine:
        return sa.create_engine(self.url, poolclass=sa.pool.NullPool)

    def table_names(self) -> set[str]:
        engine = self.engine()
        try:
            return set(sa.inspect(engine).get_table_names())
        finally:
            engine.dispose()

    def version(self) -> list[str]:
        engine = self.engine()
        try:
            with engine.connect() as conn:
                return [
                    row[0]
                    for row in conn.execute(sa.text("SELECT version_num FROM alembic_version"))
                ]
        finally:
            engine.dispose()

    # -- the real command line ------------------------------------------------------------

    def run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``program`` (``alembic`` or ``sa-inbox``) from the venv, in the project dir."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ALEMBIC")}
        return subprocess.run(
            [str(BIN / program), *args],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
            check=False,
        )

    def run_ok(self, program: str, *args: str) -> str:
        result = self.run(program, *args)
        assert result.returncode == 0, (program, args, result.stdout, result.stderr)
        return result.stdout
