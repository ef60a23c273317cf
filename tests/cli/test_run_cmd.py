"""`atoll run`'s options: what the README and `--help` promise is what the parser takes."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from atoll.api.configuration import Configuration, configuration_from_mapping
from atoll.cli.main import build_parser
from atoll.cli.run_cmd import log_ignored, webhook_mode, webhook_service


@pytest.mark.parametrize(
    ("argv", "in_cluster", "mode"),
    [
        pytest.param([], False, "url", id="default-outside-a-cluster-is-url"),
        pytest.param([], True, "service", id="default-inside-a-cluster-is-service"),
        pytest.param(["--kubeconfig", "k"], True, "url", id="a-kubeconfig-means-url"),
        pytest.param(["--webhook", "auto"], True, "service", id="auto-as-documented"),
        pytest.param(["--webhook", "off"], True, "off", id="explicit-wins"),
    ],
)
def test_webhook_auto_is_the_default_and_picks_by_where_it_runs(
    tmp_path: Path, argv: list[str], in_cluster: bool, mode: str
) -> None:
    token = tmp_path / "token"
    if in_cluster:
        token.write_text("t")
    args = build_parser().parse_args(["run", *argv])
    assert webhook_mode(args, token) == mode


def test_webhook_service_defaults_to_the_configured_one() -> None:
    cfg = Configuration.model_validate(
        {"namespace": "atoll-system", "internalCertManagement": {"webhookServiceName": "hook"}}
    )
    assert webhook_service(build_parser().parse_args(["run"]), cfg) == "atoll-system/hook"
    args = build_parser().parse_args(["run", "--webhook-service", "ns/svc"])
    assert webhook_service(args, cfg) == "ns/svc"


def test_the_fields_atoll_does_not_use_are_named_at_start() -> None:
    cfg = configuration_from_mapping(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "queueVisibility": {"updateIntervalSeconds": 5},
            "multiKueue": {"gcInterval": "1m"},
        }
    )
    with capture_logs() as logs:
        log_ignored(cfg)
    assert logs == [
        {
            "event": "configuration fields atoll does not use, ignored",
            "fields": ["multiKueue", "queueVisibility"],
            "log_level": "warning",
        }
    ]
    with capture_logs() as logs:
        log_ignored(configuration_from_mapping({}))
    assert logs == []
