"""`rolegate serve`: the router under gunicorn, with an embedded Redis when none is given.

`serve` replaces itself with gunicorn running the packaged settings
(`router/server/gunicorn_conf.py`, also reachable as deploy/gunicorn.conf.py), so
signals (and systemd's notify socket) reach gunicorn's master directly. The
config's hooks call `master_starting` and `master_exiting` here: with REDIS_URL
unset the master starts one embedded server before its workers fork and hands
them its URL through REDIS_URL; with `--seed FILE` it loads FILE into an empty
binding table, at once, or, while Redis does not answer, from a thread of the
master as soon as it does (the router starts either way).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from bindings.connection import connect
from bindings.errors import Conflict, StoreUnavailable
from bindings.models import BindingFile
from bindings.store import BindingStore
from router.cli.bindings import load_bindings_or_exit
from router.server.embedded import EmbeddedRedis
from router.server.export_process import ExportProcess
from router.server.settings import load_settings

#: The factory gunicorn imports in each worker.
APP_SPEC = "router:create_app()"
SEED_ACTOR = "rolegate-serve"
#: How often the master tries the seed again while Redis does not answer.
SEED_RETRY_S = 1.0

_embedded: EmbeddedRedis | None = None
_exporter: ExportProcess | None = None


def default_config() -> Path:
    """The gunicorn settings that ship in the package, wherever it is installed."""
    return Path(__file__).resolve().parent.parent / "server" / "gunicorn_conf.py"


def load_binding_file(path: str | os.PathLike[str]) -> BindingFile:
    """Read and validate a `{"roles": {...}}` file with the service's own models."""
    return BindingFile.model_validate_json(Path(path).read_bytes())


def seed_bindings(store: BindingStore, bindings: BindingFile, source: str) -> list[str]:
    """Create every role of `bindings` if the table is empty; return the roles created."""
    if store.roles():
        return []
    created = []
    now = store.clock()
    for role, binding in bindings.roles.items():
        try:
            store.write(role, binding.with_changes(stage_since=now), expected_version=0,
                        actor=SEED_ACTOR, action="create",
                        reason=f"loaded from {source} on first start")
        except Conflict:
            # Another router sharing this Redis seeded the role first: theirs stands.
            continue
        created.append(role)
    return created


def master_starting(log: logging.Logger | Any) -> None:
    """Gunicorn `on_starting`: start the embedded Redis if needed, seed, start the exporter."""
    global _embedded, _exporter
    # A bad export setting stops the boot here, naming it, not in a restarting child.
    exporting = bool(load_settings().export_otlp_endpoint)
    if not os.environ.get("REDIS_URL") and not os.environ.get("REDIS_SENTINELS"):
        data_dir = os.environ.get("ROLEGATE_DATA_DIR") or ".rolegate"
        _embedded = EmbeddedRedis(data_dir)
        os.environ["REDIS_URL"] = _embedded.start()
        _embedded.supervise(log)
        log.info("REDIS_URL is unset: embedded valkey-server at %s, data in %s",
                 _embedded.url, _embedded.data_dir)
    if exporting:
        _exporter = ExportProcess(log)
        _exporter.start()
        log.info("exporting stored runs to the OTLP collector at %s",
                 os.environ.get("ROLEGATE_EXPORT_OTLP_ENDPOINT"))
    seed = os.environ.get("ROLEGATE_SEED_FILE")
    if not seed:
        return
    try:
        bindings = load_binding_file(seed)
        if not seed_once(bindings, seed, log):
            # Redis is down: start anyway (workers serve the kept table, if any)
            # and seed from a thread of this master once Redis answers.
            threading.Thread(target=_seed_later, args=(bindings, seed, log), daemon=True,
                             name="rolegate-seed").start()
    except BaseException:
        master_exiting(log)
        raise


def seed_once(bindings: BindingFile, seed: str, log: logging.Logger | Any) -> bool:
    """Seed an empty table from `bindings`; False (logged) when Redis did not answer."""
    connection = connect(load_settings().redis_target())
    try:
        created = seed_bindings(BindingStore(connection), bindings, Path(seed).name)
    except StoreUnavailable as exc:
        log.warning("could not seed the binding table from %s yet, Redis did not answer "
                    "(%s); starting anyway and seeding once it does", seed, exc.message)
        return False
    finally:
        connection.close()
    if created:
        log.info("binding table was empty: loaded %s from %s", ", ".join(created), seed)
    return True


def _seed_later(bindings: BindingFile, seed: str, log: logging.Logger | Any) -> None:
    """Try the seed every SEED_RETRY_S until Redis answers (the master's daemon thread)."""
    while True:
        time.sleep(SEED_RETRY_S)
        if seed_once(bindings, seed, _Quiet(log)):
            log.info("Redis answers: seeding from %s done", seed)
            return


class _Quiet:
    """`log` without the warning each failed retry would repeat."""

    def __init__(self, log: logging.Logger | Any) -> None:
        self._log = log

    def warning(self, *args: Any) -> None:
        """Dropped: the first attempt said it."""

    def info(self, *args: Any) -> None:
        """Passed on."""
        self._log.info(*args)


def master_exiting(log: logging.Logger | Any) -> None:
    """Gunicorn `on_exit`: stop the exporter and the embedded Redis this master started."""
    global _embedded, _exporter
    if _exporter is not None:
        _exporter.stop()
        _exporter = None
    if _embedded is not None:
        _embedded.stop()
        log.info("embedded valkey-server stopped")
        _embedded = None


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Worker processes (default: the config's, one per core).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              default=None,
              help="Gunicorn config file (default: the packaged router/server/gunicorn_conf.py).")
@click.option("--data-dir", envvar="ROLEGATE_DATA_DIR", default=".rolegate", show_default=True,
              help="Where the embedded Redis keeps its data (used when REDIS_URL is unset).")
@click.option("--seed", type=click.Path(exists=True, dir_okay=False), envvar="ROLEGATE_SEED_FILE",
              default=None,
              help="Load this bindings file (e.g. bindings.example.json) if the table is empty.")
def serve(host: str, port: int, workers: int | None, config_path: str | None, data_dir: str,
          seed: str | None) -> None:
    """Run the router under gunicorn (embedded Redis when REDIS_URL is unset)."""
    if seed:
        load_bindings_or_exit(seed)
    config = Path(config_path) if config_path else default_config()
    if not config.is_file():
        raise click.UsageError(f"gunicorn config {config} not found; pass --config")
    env = dict(os.environ)
    env["ROLEGATE_DATA_DIR"] = str(Path(data_dir).resolve())
    if seed:
        env["ROLEGATE_SEED_FILE"] = str(Path(seed).resolve())
    argv = [sys.executable, "-m", "gunicorn", "--config", str(config.resolve()),
            "--bind", f"{host}:{port}"]
    if workers is not None:
        argv += ["--workers", str(workers)]
    argv.append(APP_SPEC)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)


def register(main: click.Group) -> None:
    """Add `serve` to the `rolegate` command group."""
    main.add_command(serve)
