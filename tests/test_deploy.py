"""Deploy files: gunicorn settings follow the environment; the units say what we rely on."""

from __future__ import annotations

import configparser
import logging
import runpy
from pathlib import Path
from typing import Any

import pytest

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def _gunicorn_settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    for name in ("ROLEGATE_BIND", "ROLEGATE_WORKERS", "ROLEGATE_WORKER_CLASS",
                 "ROLEGATE_THREADS", "ROLEGATE_ACCESS_LOG", "ROLEGATE_CONTROL_SOCKET",
                 "ROLEGATE_LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # The config sets PROMETHEUS_MULTIPROC_DIR with setdefault; keep it out of this process.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/nonexistent-test-value")
    return runpy.run_path(str(DEPLOY / "gunicorn.conf.py"))


def _unit(name: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / name)
    return parser


def test_gunicorn_defaults_are_loopback_gevent_without_access_log(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """By default: loopback bind, gevent workers with keep-alive, no access log, no app preload."""
    conf = _gunicorn_settings(monkeypatch)
    assert conf["bind"] == ["127.0.0.1:8080"]
    assert conf["worker_class"] == "gevent" and conf["keepalive"] > 0
    assert conf["worker_connections"] >= 1000
    assert conf["accesslog"] is None and conf["preload_app"] is False
    assert conf["control_socket_disable"] is True
    assert callable(conf["on_starting"]) and callable(conf["on_exit"])


def test_gunicorn_settings_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """ROLEGATE_* variables override bind, workers, worker class, threads and the access log."""
    conf = _gunicorn_settings(monkeypatch, ROLEGATE_BIND="0.0.0.0:9000", ROLEGATE_WORKERS="3",
                              ROLEGATE_WORKER_CLASS="sync", ROLEGATE_THREADS="8",
                              ROLEGATE_WORKER_CONNECTIONS="50", ROLEGATE_ACCESS_LOG="-")
    assert conf["bind"] == ["0.0.0.0:9000"] and conf["workers"] == 3
    assert conf["worker_class"] == "sync" and conf["threads"] == 8 and conf["accesslog"] == "-"
    assert conf["worker_connections"] == 50


def test_the_per_request_debug_line_is_skipped_unless_debug(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Below debug, pre_request does nothing (gunicorn's would only log at debug); at debug
    gunicorn's own hook stays and writes its line."""
    conf = _gunicorn_settings(monkeypatch)
    assert conf["pre_request"](None, None) is None  # touches neither worker nor request
    assert "pre_request" not in _gunicorn_settings(monkeypatch, ROLEGATE_LOG_LEVEL="debug")
    assert "pre_request" not in _gunicorn_settings(monkeypatch, ROLEGATE_LOG_LEVEL="DEBUG")


def test_router_unit_is_notify_mixed_kill_and_unprivileged() -> None:
    """The router unit: Type=notify, KillMode=mixed, a dedicated user, `rolegate serve`."""
    service = _unit("rolegate-router.service")["Service"]
    assert service["Type"] == "notify" and service["KillMode"] == "mixed"
    assert service["User"] == "rolegate" and "rolegate serve" in service["ExecStart"]


def test_gatekeeper_unit_restarts_always_and_stops_with_term() -> None:
    """The gatekeeper unit runs `rolegate gatekeeper`, restarts always, and stops with TERM."""
    service = _unit("rolegate-gatekeeper.service")["Service"]
    assert service["ExecStart"].endswith("rolegate gatekeeper")
    assert service["Restart"] == "always" and service["KillSignal"] == "SIGTERM"
    assert service["User"] == "rolegate"


def test_a_workers_settings_read_the_same_once_frozen() -> None:
    """freeze() puts every setting's value on the Config (Config's own properties keep theirs):
    each reads as before, now without Config.__getattr__."""
    from gunicorn.config import Config

    from router.server.frozen_config import freeze

    cfg = Config()
    cfg.set("keepalive", 7)
    cfg.set("forwarded_allow_ips", "10.0.0.1")
    before = {name: getattr(cfg, name) for name in cfg.settings}
    frozen = freeze(cfg)
    assert frozen == len([n for n in cfg.settings if not hasattr(Config, n)]) > 100
    assert {name: getattr(cfg, name) for name in cfg.settings} == before
    assert vars(cfg)["keepalive"] == 7 and cfg.forwarded_allow_ips == ["10.0.0.1"]
    assert "worker_class" not in vars(cfg) and cfg.worker_class_str == "sync"
    assert freeze(object()) == 0


def test_a_setting_written_in_the_worker_after_freezing_is_read() -> None:
    """gunicorn writes no setting in a worker today; if a release does, through Config.set
    or the Setting's own set, the frozen attribute follows at once."""
    from gunicorn.config import Config

    from router.server.frozen_config import freeze, writes_reach_frozen

    assert writes_reach_frozen(Config)
    cfg = Config()
    assert freeze(cfg) > 100
    cfg.set("keepalive", 9)
    assert cfg.keepalive == 9 == vars(cfg)["keepalive"]
    cfg.settings["forwarded_allow_ips"].set("10.0.0.2")
    assert cfg.forwarded_allow_ips == ["10.0.0.2"]


def test_a_gunicorn_whose_writes_go_around_the_setting_keeps_its_own_lookups(
        caplog: pytest.LogCaptureFixture) -> None:
    """A Config that writes a value without the Setting's set (as a future gunicorn might):
    the probe sees a write not reach the copy, so nothing is frozen, a warning says so,
    and every read is gunicorn's own lookup, current after a write."""
    from gunicorn.config import Config

    from router.server.frozen_config import freeze, writes_reach_frozen

    class AroundTheSetting(Config):
        def set(self, name: str, value: Any) -> None:
            setting = self.settings[name]
            setting.value = setting.validator(value)

    assert not writes_reach_frozen(AroundTheSetting)
    cfg = AroundTheSetting()
    with caplog.at_level(logging.WARNING, logger="rolegate"):
        assert freeze(cfg) == 0
    assert any("frozen copy" in r.getMessage() for r in caplog.records)
    assert "keepalive" not in vars(cfg)
    cfg.set("keepalive", 9)
    assert cfg.keepalive == 9
