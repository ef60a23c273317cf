"""The Kueue-format configuration: defaults, parsing, validation errors and overrides."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest
import yaml
from pydantic import ValidationError

from atoll.api.configuration import (
    Configuration,
    ConfigurationError,
    LogFormat,
    PreemptionStrategy,
    RequeuingTimestamp,
    apply_overrides,
    configuration_from_mapping,
    format_duration,
    load_configuration,
    overrides_from_env,
    parse_bind_address,
    parse_duration,
    parse_override,
)

NO_SA_FILE = Path("/nonexistent/serviceaccount/namespace")

FULL_EXAMPLE = dedent(
    """\
    apiVersion: config.kueue.x-k8s.io/v1beta2
    kind: Configuration
    namespace: atoll-system
    manageJobsWithoutQueueName: true
    managedJobsNamespaceSelector:
      matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: NotIn
        values: [kube-system, atoll-system, monitoring]
    internalCertManagement:
      enable: true
      webhookServiceName: atoll-webhook
      webhookSecretName: atoll-webhook-cert
    waitForPodsReady:
      timeout: 10m
      blockAdmission: true
      recoveryTimeout: 2m30s
      requeuingStrategy:
        timestamp: Creation
        backoffLimitCount: 5
        backoffBaseSeconds: 10
        backoffMaxSeconds: 600
    clientConnection:
      qps: 50
      burst: 100
    integrations:
      frameworks: [batch/job, pod, kubeflow.org/mpijob, kubeflow.org/pytorchjob]
      labelKeysToCopy: [team]
    fairSharing:
      preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
    resources:
      excludeResourcePrefixes: [example.com/]
      deviceClassMappings:
      - name: example.com/gpu
        deviceClassNames: [gpu.example.com, gpu-large.example.com]
    featureGates:
      TopologyAwareScheduling: true
    webhook:
      port: 9443
    leaderElection:
      leaderElect: true
      leaseDuration: 20s
      renewDeadline: 15s
      retryPeriod: 3s
      resourceLock: leases
      resourceName: atoll.atoll.dev
      resourceNamespace: atoll-system
    metrics:
      bindAddress: :8080
      enableClusterQueueResources: true
    health:
      healthProbeBindAddress: :8081
    atoll:
      webhookConfigurationName: atoll-mutating
      logFormat: json
      logLevel: debug
    """
)


def _problems(data: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigurationError) as caught:
        configuration_from_mapping(data)
    return caught.value.problems


# --------------------------------------------------------------------------- defaults


def test_defaults_match_kueue_v1beta2() -> None:
    config = load_configuration(None, namespace_file=NO_SA_FILE)

    assert config.api_version == "config.kueue.x-k8s.io/v1beta2"
    assert config.namespace == "kueue-system"
    assert config.manage_jobs_without_queue_name is False
    expression = config.managed_jobs_namespace_selector.match_expressions
    assert expression is not None
    assert [(r.key, r.operator.value, r.values) for r in expression] == [
        ("kubernetes.io/metadata.name", "NotIn", ("kube-system", "kueue-system"))
    ]
    wfpr = config.wait_for_pods_ready
    assert config.wait_for_pods_ready_enabled
    assert wfpr.timeout == 30 * 60
    assert wfpr.recovery_timeout == 30 * 60
    assert wfpr.block_admission is False
    assert wfpr.requeuing_strategy.timestamp is RequeuingTimestamp.EVICTION
    assert wfpr.requeuing_strategy.backoff_limit_count is None
    assert wfpr.requeuing_strategy.backoff_base_seconds == 60
    assert wfpr.requeuing_strategy.backoff_max_seconds == 3600
    assert config.fair_sharing is None
    assert not config.fair_sharing_enabled
    assert config.integrations.frameworks == ("batch/job",)
    assert config.manages_batch_jobs
    assert (config.client_connection.qps, config.client_connection.burst) == (300.0, 500)
    election = config.leader_election
    assert election.leader_elect is True
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (15, 10, 2)
    assert election.resource_name == "c1f6bfd2.kueue.x-k8s.io"
    assert config.lease_namespace == "kueue-system"
    assert config.metrics.bind_address == ":8443"
    assert config.metrics.enable_cluster_queue_resources is False
    assert config.health.health_probe_bind_address == ":8081"
    assert config.webhook.port == 9443
    assert config.internal_cert_management.webhook_service_name == "kueue-webhook-service"
    assert config.resources.device_class_mappings == ()
    assert config.ignored_fields == ()


def test_namespace_comes_from_the_service_account_when_the_file_omits_it(tmp_path: Path) -> None:
    sa_file = tmp_path / "namespace"
    sa_file.write_text("atoll-system\n")

    config = load_configuration(None, namespace_file=sa_file)

    assert config.namespace == "atoll-system"
    assert config.managed_jobs_namespace_selector.matches(
        {"kubernetes.io/metadata.name": "default"}
    )
    assert not config.managed_jobs_namespace_selector.matches(
        {"kubernetes.io/metadata.name": "atoll-system"}
    )


def test_namespace_in_the_file_wins_over_the_service_account(tmp_path: Path) -> None:
    sa_file = tmp_path / "namespace"
    sa_file.write_text("elsewhere")
    path = tmp_path / "config.yaml"
    path.write_text("namespace: atoll-system\n")

    assert load_configuration(path, namespace_file=sa_file).namespace == "atoll-system"


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("")

    config = load_configuration(path, namespace_file=NO_SA_FILE)

    assert config == Configuration()


# --------------------------------------------------------------------------- parsing


def test_full_example_parses(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(FULL_EXAMPLE)

    config = load_configuration(path, namespace_file=NO_SA_FILE)

    assert config.namespace == "atoll-system"
    assert config.manage_jobs_without_queue_name is True
    assert not config.managed_jobs_namespace_selector.matches(
        {"kubernetes.io/metadata.name": "monitoring"}
    )
    wfpr = config.wait_for_pods_ready
    assert (wfpr.timeout, wfpr.recovery_timeout, wfpr.block_admission) == (600, 150, True)
    strategy = wfpr.requeuing_strategy
    assert strategy.timestamp is RequeuingTimestamp.CREATION
    assert (strategy.backoff_limit_count, strategy.backoff_base_seconds) == (5, 10)
    assert strategy.backoff_max_seconds == 600
    assert config.fair_sharing is not None
    assert config.fair_sharing.preemption_strategies == (
        PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        PreemptionStrategy.LESS_THAN_INITIAL_SHARE,
    )
    (mapping,) = config.resources.device_class_mappings
    assert mapping.name == "example.com/gpu"
    assert mapping.device_class_names == ("gpu.example.com", "gpu-large.example.com")
    assert config.resources.exclude_resource_prefixes == ("example.com/",)
    assert config.integrations.label_keys_to_copy == ("team",)
    assert config.unsupported_frameworks == ("kubeflow.org/pytorchjob",)
    assert config.feature_gates == {"TopologyAwareScheduling": True}
    assert (config.client_connection.qps, config.client_connection.burst) == (50.0, 100)
    assert config.leader_election.lease_duration == 20
    assert config.lease_namespace == "atoll-system"
    assert parse_bind_address(config.metrics.bind_address) == ("", 8080)
    assert config.metrics.enable_cluster_queue_resources is True
    assert config.internal_cert_management.webhook_service_name == "atoll-webhook"
    assert config.atoll.log_format is LogFormat.JSON
    assert config.atoll.log_level == "debug"
    assert config.ignored_fields == ()


def test_written_yaml_reads_back_to_the_same_configuration(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(FULL_EXAMPLE)
    config = load_configuration(path, namespace_file=NO_SA_FILE)

    again = configuration_from_mapping(yaml.safe_load(config.to_yaml()))

    assert again == config
    assert yaml.safe_load(config.to_yaml())["waitForPodsReady"]["recoveryTimeout"] == "2m30s"


def test_unknown_fields_from_a_newer_kueue_are_ignored_and_listed() -> None:
    config = configuration_from_mapping(
        {
            "multiKueue": {"gcInterval": "1m"},
            "waitForPodsReady": {"timeout": "5m", "somethingNew": True},
            "resources": {
                "transformations": [{"input": "cpu"}],
                "deviceClassMappings": [
                    {"name": "gpu", "deviceClassNames": ["gpu.example.com"], "future": 1}
                ],
            },
            "aBrandNewTopLevelField": {"x": 1},
        }
    )

    assert config.wait_for_pods_ready.timeout == 300
    assert config.ignored_fields == (
        "aBrandNewTopLevelField",
        "multiKueue",
        "resources.deviceClassMappings[0].future",
        "resources.transformations",
        "waitForPodsReady.somethingNew",
    )
    assert "ignoredFields" not in yaml.safe_load(config.to_yaml())


# --------------------------------------------------------------------------- waitForPodsReady rules


def test_recovery_timeout_defaults_to_the_timeout() -> None:
    config = configuration_from_mapping({"waitForPodsReady": {"timeout": "90s"}})

    assert config.wait_for_pods_ready.recovery_timeout == 90


def test_recovery_timeout_zero_turns_the_recovery_check_off() -> None:
    config = configuration_from_mapping(
        {"waitForPodsReady": {"timeout": "90s", "recoveryTimeout": "0s"}}
    )

    assert config.wait_for_pods_ready.recovery_timeout == 0


def test_zero_timeout_means_the_default_thirty_minutes() -> None:
    config = configuration_from_mapping({"waitForPodsReady": {"timeout": "0s"}})

    assert config.wait_for_pods_ready.timeout == 1800


V1BETA1 = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration"}


def test_a_v1beta1_file_without_the_two_features_has_them_off_as_kueue_v0_17_reads_it() -> None:
    """v1beta1 defaults waitForPodsReady and fair sharing to off; Kueue v0.17 converts that
    to no block in v1beta2, which it runs without them. atoll runs waitForPodsReady unless its
    gate says otherwise, so the v1beta1 file is read with the gate set."""
    config = configuration_from_mapping(dict(V1BETA1))
    assert config.api_version == "config.kueue.x-k8s.io/v1beta2"
    assert not config.wait_for_pods_ready_enabled
    assert config.feature_gates == {"DisableWaitForPodsReady": True}
    assert config.fair_sharing is None
    off = configuration_from_mapping(
        {**V1BETA1, "waitForPodsReady": {"enable": False}, "fairSharing": {"enable": False}}
    )
    assert not off.wait_for_pods_ready_enabled
    assert off.fair_sharing is None
    assert off.ignored_fields == ()


def test_a_v1beta1_file_that_enables_them_gets_v1beta1s_defaults() -> None:
    config = configuration_from_mapping(
        {
            **V1BETA1,
            "waitForPodsReady": {"enable": True, "requeuingStrategy": {"backoffLimitCount": 3}},
            "fairSharing": {"enable": True},
            "featureGates": {"TopologyAwareScheduling": True},
        }
    )
    assert config.wait_for_pods_ready_enabled
    ready = config.wait_for_pods_ready
    assert (ready.timeout, ready.recovery_timeout, ready.block_admission) == (300, 300, True)
    assert ready.requeuing_strategy.backoff_limit_count == 3
    assert config.feature_gates == {"TopologyAwareScheduling": True}
    assert config.fair_sharing is not None
    assert [s.value for s in config.fair_sharing.preemption_strategies] == [
        "LessThanOrEqualToFinalShare",
        "LessThanInitialShare",
    ]
    given = configuration_from_mapping(
        {
            **V1BETA1,
            "waitForPodsReady": {"enable": True, "timeout": "10m", "blockAdmission": False},
            "fairSharing": {"enable": True, "preemptionStrategies": ["LessThanInitialShare"]},
        }
    )
    assert (given.wait_for_pods_ready.timeout, given.wait_for_pods_ready.block_admission) == (
        600,
        False,
    )
    assert given.fair_sharing is not None
    assert [s.value for s in given.fair_sharing.preemption_strategies] == ["LessThanInitialShare"]


def test_a_v1beta1_file_names_what_v1beta2_dropped_and_checks_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta1\n"
        "kind: Configuration\n"
        "namespace: kueue-system\n"
        "manageJobsWithoutQueueName: true\n"
        "queueVisibility: {updateIntervalSeconds: 5}\n"
        "integrations:\n"
        "  frameworks: [batch/job]\n"
        "  podOptions: {namespaceSelector: {}}\n"
    )
    config = load_configuration(path)
    assert config.manage_jobs_without_queue_name
    assert config.ignored_fields == ("integrations.podOptions", "queueVisibility")
    with pytest.raises(ConfigurationError) as caught:
        configuration_from_mapping({**V1BETA1, "waitForPodsReady": {"enable": True, "timeout": 5}})
    assert "waitForPodsReady.timeout" in str(caught.value)


def test_a_v1beta1_file_keeps_pods_ready_off_whatever_it_says_of_the_gate() -> None:
    config = configuration_from_mapping(
        {**V1BETA1, "featureGates": {"DisableWaitForPodsReady": False, "Other": True}}
    )
    assert not config.wait_for_pods_ready_enabled
    assert config.feature_gates == {"DisableWaitForPodsReady": True, "Other": True}


def test_a_v1beta1_null_timeout_or_block_admission_takes_v1beta1s_default() -> None:
    config = configuration_from_mapping(
        {**V1BETA1, "waitForPodsReady": {"enable": True, "timeout": None, "blockAdmission": None}}
    )
    ready = config.wait_for_pods_ready
    assert (ready.timeout, ready.block_admission) == (300, True)


def test_a_v1beta1_file_in_snake_case_and_its_overrides_are_read_as_v1beta2() -> None:
    config = configuration_from_mapping(
        {"api_version": "config.kueue.x-k8s.io/v1beta1", "fairSharing": {"enable": True}}
    )
    assert config.api_version == "config.kueue.x-k8s.io/v1beta2"
    assert config.fair_sharing is not None
    changed = apply_overrides(config, {"waitForPodsReady.timeout": "2m"})
    assert changed.wait_for_pods_ready.timeout == 120
    assert not changed.wait_for_pods_ready_enabled  # still off, as the v1beta1 file said
    assert changed.fair_sharing == config.fair_sharing


def test_v1beta1_style_enable_true_is_accepted_and_changes_nothing() -> None:
    config = configuration_from_mapping({"waitForPodsReady": {"enable": True, "timeout": "1m"}})

    assert config.wait_for_pods_ready_enabled
    assert config.wait_for_pods_ready.timeout == 60
    assert config.ignored_fields == ("waitForPodsReady.enable",)


def test_wait_for_pods_ready_is_turned_off_only_by_the_feature_gate() -> None:
    config = configuration_from_mapping({"featureGates": {"DisableWaitForPodsReady": True}})

    assert not config.wait_for_pods_ready_enabled


# --------------------------------------------------------------------------- invalid values


@pytest.mark.parametrize(
    ("data", "path", "rule"),
    [
        pytest.param(
            {"waitForPodsReady": {"timeout": "5x"}},
            "waitForPodsReady.timeout",
            "unknown unit 'x'",
            id="unknown-duration-unit",
        ),
        pytest.param(
            {"waitForPodsReady": {"timeout": 30}},
            "waitForPodsReady.timeout",
            "must be a string with a unit",
            id="duration-without-unit",
        ),
        pytest.param(
            {"waitForPodsReady": {"timeout": "-1m"}},
            "waitForPodsReady.timeout",
            "greater than or equal to 0",
            id="negative-timeout",
        ),
        pytest.param(
            {"waitForPodsReady": {"recoveryTimeout": "-1s"}},
            "waitForPodsReady.recoveryTimeout",
            "greater than or equal to 0",
            id="negative-recovery-timeout",
        ),
        pytest.param(
            {"waitForPodsReady": {"requeuingStrategy": {"timestamp": "Now"}}},
            "waitForPodsReady.requeuingStrategy.timestamp",
            "'Eviction' or 'Creation'",
            id="requeuing-timestamp",
        ),
        pytest.param(
            {"waitForPodsReady": {"requeuingStrategy": {"backoffLimitCount": -1}}},
            "waitForPodsReady.requeuingStrategy.backoffLimitCount",
            "greater than or equal to 0",
            id="negative-backoff-limit",
        ),
        pytest.param(
            {"waitForPodsReady": {"requeuingStrategy": {"backoffMaxSeconds": "lots"}}},
            "waitForPodsReady.requeuingStrategy.backoffMaxSeconds",
            "valid integer",
            id="non-integer-backoff",
        ),
        pytest.param(
            {"fairSharing": {}},
            "fairSharing.preemptionStrategies",
            "Field required",
            id="fair-sharing-without-strategies",
        ),
        pytest.param(
            {
                "fairSharing": {
                    "preemptionStrategies": ["LessThanInitialShare", "LessThanOrEqualToFinalShare"]
                }
            },
            "fairSharing.preemptionStrategies",
            "must be one of",
            id="fair-sharing-strategies-in-the-wrong-order",
        ),
        pytest.param(
            {"managedJobsNamespaceSelector": {}},
            "managedJobsNamespaceSelector",
            "should not match the 'kube-system' namespace",
            id="selector-matching-kube-system",
        ),
        pytest.param(
            {
                "namespace": "atoll-system",
                "managedJobsNamespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system"],
                        }
                    ]
                },
            },
            "managedJobsNamespaceSelector",
            "should not match the 'atoll-system' namespace",
            id="selector-matching-own-namespace",
        ),
        pytest.param(
            {
                "managedJobsNamespaceSelector": {
                    "matchExpressions": [{"key": "team", "operator": "In"}]
                }
            },
            "managedJobsNamespaceSelector.matchExpressions[0].values",
            "must be non-empty when operator is In",
            id="selector-in-without-values",
        ),
        pytest.param(
            {"resources": {"deviceClassMappings": [{"name": "gpu", "deviceClassNames": []}]}},
            "resources.deviceClassMappings[0].deviceClassNames",
            "at least 1 item",
            id="mapping-without-classes",
        ),
        pytest.param(
            {
                "resources": {
                    "deviceClassMappings": [{"name": "Bad Name!", "deviceClassNames": ["a"]}]
                }
            },
            "resources.deviceClassMappings[0].name",
            "not a qualified name",
            id="mapping-bad-name",
        ),
        pytest.param(
            {
                "resources": {
                    "deviceClassMappings": [
                        {"name": "gpu", "deviceClassNames": ["a"]},
                        {"name": "gpu2", "deviceClassNames": ["a"]},
                    ]
                }
            },
            "resources.deviceClassMappings[1].deviceClassNames[0]",
            "already mapped to resource 'gpu'",
            id="class-mapped-twice",
        ),
        pytest.param(
            {
                "resources": {
                    "deviceClassMappings": [
                        {"name": "gpu", "deviceClassNames": ["a"], "sources": [{"counter": {}}]}
                    ]
                }
            },
            "resources.deviceClassMappings[0].sources",
            "not supported by atoll",
            id="counter-sources",
        ),
        pytest.param(
            {"integrations": {"frameworks": ["batch/job", "example.com/unknown"]}},
            "integrations.frameworks",
            "unknown framework(s) 'example.com/unknown'",
            id="unknown-framework",
        ),
        pytest.param(
            {"leaderElection": {"leaseDuration": "10s", "renewDeadline": "10s"}},
            "leaderElection.renewDeadline",
            "must be less than leaseDuration",
            id="renew-deadline-not-below-lease",
        ),
        pytest.param(
            {"leaderElection": {"retryPeriod": "9s"}},
            "leaderElection.retryPeriod",
            "1.2 × retryPeriod",
            id="retry-period-too-long",
        ),
        pytest.param(
            {"leaderElection": {"resourceLock": "configmaps"}},
            "leaderElection.resourceLock",
            "'leases'",
            id="resource-lock-not-leases",
        ),
        pytest.param(
            {"metrics": {"bindAddress": "localhost"}},
            "metrics.bindAddress",
            "'host:port'",
            id="bind-address-without-port",
        ),
        pytest.param(
            {"webhook": {"port": 70000}},
            "webhook.port",
            "less than or equal to 65535",
            id="webhook-port-out-of-range",
        ),
        pytest.param(
            {"namespace": "Not_A_Namespace"},
            "namespace",
            "should match pattern",
            id="bad-namespace",
        ),
        pytest.param(
            {"manageJobsWithoutQueueName": "perhaps"},
            "manageJobsWithoutQueueName",
            "valid boolean",
            id="bad-boolean",
        ),
        pytest.param(
            {"apiVersion": "config.kueue.x-k8s.io/v1alpha1"},
            "apiVersion",
            "v1alpha1 is not supported; write the file as config.kueue.x-k8s.io/v1beta2 or "
            "config.kueue.x-k8s.io/v1beta1",
            id="v1alpha1",
        ),
        pytest.param(
            {"kind": "ClusterQueue"},
            "kind",
            "'Configuration'",
            id="wrong-kind",
        ),
        pytest.param(
            {"waitForPodsReady": {"enable": False}},
            "waitForPodsReady.enable",
            "featureGates.DisableWaitForPodsReady",
            id="v1beta1-style-wait-for-pods-ready-off",
        ),
        pytest.param(
            {"fairSharing": {"enable": False, "preemptionStrategies": ["LessThanInitialShare"]}},
            "fairSharing.enable",
            "remove fairSharing",
            id="v1beta1-style-fair-sharing-off",
        ),
        pytest.param(
            {"internalCertManagement": {"enable": False}},
            "internalCertManagement.enable",
            "must be true",
            id="external-certificates",
        ),
    ],
)
def test_invalid_value_is_rejected_naming_the_field(
    data: dict[str, object], path: str, rule: str
) -> None:
    problems = _problems(data)

    assert len(problems) == 1, problems
    field, _, message = problems[0].partition(": ")
    assert field == path
    assert rule in message


def test_every_invalid_field_is_reported_at_once() -> None:
    problems = _problems(
        {
            "waitForPodsReady": {"timeout": "soon"},
            "clientConnection": {"burst": -1},
            "health": {"healthProbeBindAddress": ":99999"},
        }
    )

    assert sorted(p.partition(":")[0] for p in problems) == [
        "clientConnection.burst",
        "health.healthProbeBindAddress",
        "waitForPodsReady.timeout",
    ]


def test_load_reports_the_file_that_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("waitForPodsReady:\n  timeout: 5\n")

    with pytest.raises(ConfigurationError) as caught:
        load_configuration(path, namespace_file=NO_SA_FILE)

    assert str(path) in str(caught.value)
    assert "waitForPodsReady.timeout" in str(caught.value)


@pytest.mark.parametrize(
    ("content", "rule"),
    [
        pytest.param("- a\n- b\n", "must be a mapping", id="list"),
        pytest.param("a: [\n", "not valid YAML", id="broken-yaml"),
    ],
)
def test_load_rejects_a_file_that_is_not_a_mapping(tmp_path: Path, content: str, rule: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(content)

    with pytest.raises(ConfigurationError, match=rule):
        load_configuration(path, namespace_file=NO_SA_FILE)


def test_load_rejects_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_configuration(tmp_path / "absent.yaml", namespace_file=NO_SA_FILE)


def test_configuration_is_frozen() -> None:
    config = Configuration()

    with pytest.raises(ValidationError):
        config.namespace = "other"  # type: ignore[misc]


# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("30m", 1800.0, id="minutes"),
        pytest.param("1h30m", 5400.0, id="hours-minutes"),
        pytest.param("1.5h", 5400.0, id="fractional-hours"),
        pytest.param("10s", 10.0, id="seconds"),
        pytest.param("250ms", 0.25, id="milliseconds"),
        pytest.param("1m0.5s", 60.5, id="mixed-fraction"),
        pytest.param("0", 0.0, id="bare-zero"),
        pytest.param("-2s", -2.0, id="negative"),
        pytest.param("1500us", 0.0015, id="microseconds"),
        pytest.param("2µs", 0.000002, id="micro-sign"),
    ],
)
def test_parse_duration_reads_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, abs=1e-12)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        pytest.param("", "empty", id="empty"),
        pytest.param("30", "missing unit", id="no-unit"),
        pytest.param("3d", "unknown unit 'd'", id="days"),
        pytest.param("1h 30m", "unknown unit 'h '", id="space"),
        pytest.param("m", "expected a number", id="no-number"),
        pytest.param("3000000h", "292 years", id="overflow"),
    ],
)
def test_parse_duration_rejects_what_go_rejects(text: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(0.0, "0s", id="zero"),
        pytest.param(5400.0, "1h30m0s", id="hours"),
        pytest.param(90.0, "1m30s", id="minutes"),
        pytest.param(2.5, "2.5s", id="fraction"),
        pytest.param(0.25, "250ms", id="milliseconds"),
        pytest.param(-3.0, "-3s", id="negative"),
    ],
)
def test_format_duration_writes_go_spelling(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)


# --------------------------------------------------------------------------- overrides


def test_override_sets_a_nested_field_and_derived_defaults_follow() -> None:
    base = Configuration()

    config = apply_overrides(base, {"waitForPodsReady.timeout": "5s"})

    assert config.wait_for_pods_ready.timeout == 5
    assert config.wait_for_pods_ready.recovery_timeout == 5
    assert base.wait_for_pods_ready.timeout == 1800


def test_override_keeps_an_explicit_recovery_timeout() -> None:
    base = configuration_from_mapping({"waitForPodsReady": {"recoveryTimeout": "1m"}})

    config = apply_overrides(base, {"waitForPodsReady.timeout": "5s"})

    assert config.wait_for_pods_ready.recovery_timeout == 60


def test_overriding_the_namespace_moves_the_default_selector() -> None:
    config = apply_overrides(Configuration(), {"namespace": "atoll-system"})

    assert not config.managed_jobs_namespace_selector.matches(
        {"kubernetes.io/metadata.name": "atoll-system"}
    )
    assert config.managed_jobs_namespace_selector.matches(
        {"kubernetes.io/metadata.name": "kueue-system"}
    )


@pytest.mark.parametrize(
    ("path", "value", "read"),
    [
        pytest.param(
            "manageJobsWithoutQueueName",
            "true",
            lambda c: c.manage_jobs_without_queue_name,
            id="bool",
        ),
        pytest.param("clientConnection.burst", "42", lambda c: c.client_connection.burst, id="int"),
        pytest.param("clientConnection.qps", "0.5", lambda c: c.client_connection.qps, id="float"),
        pytest.param(
            "featureGates.DisableWaitForPodsReady",
            "true",
            lambda c: c.wait_for_pods_ready_enabled,
            id="map-key",
        ),
        pytest.param(
            "fairSharing.preemptionStrategies",
            "LessThanInitialShare",
            lambda c: c.fair_sharing.preemption_strategies,
            id="comma-list",
        ),
        pytest.param(
            "integrations.frameworks",
            '["batch/job", "pod"]',
            lambda c: c.integrations.frameworks,
            id="json-list",
        ),
        pytest.param(
            "waitForPodsReady.requeuingStrategy.backoffLimitCount",
            "3",
            lambda c: c.wait_for_pods_ready.requeuing_strategy.backoff_limit_count,
            id="optional-int",
        ),
        pytest.param(
            "wait_for_pods_ready.block_admission",
            "yes",
            lambda c: c.wait_for_pods_ready.block_admission,
            id="snake-case-path",
        ),
        pytest.param(
            "managedJobsNamespaceSelector",
            '{"matchLabels": {"team": "a"}}',
            lambda c: c.managed_jobs_namespace_selector.match_labels,
            id="json-object",
        ),
    ],
)
def test_override_converts_the_string_by_field_type(path: str, value: str, read: object) -> None:
    expected = {
        "manageJobsWithoutQueueName": True,
        "clientConnection.burst": 42,
        "clientConnection.qps": 0.5,
        "featureGates.DisableWaitForPodsReady": False,
        "fairSharing.preemptionStrategies": (PreemptionStrategy.LESS_THAN_INITIAL_SHARE,),
        "integrations.frameworks": ("batch/job", "pod"),
        "waitForPodsReady.requeuingStrategy.backoffLimitCount": 3,
        "wait_for_pods_ready.block_admission": True,
        "managedJobsNamespaceSelector": {"team": "a"},
    }[path]
    assert callable(read)

    config = apply_overrides(Configuration(), {path: value})

    assert read(config) == expected


def test_null_override_unsets_an_optional_field() -> None:
    base = configuration_from_mapping(
        {"waitForPodsReady": {"requeuingStrategy": {"backoffLimitCount": 4}}}
    )

    config = apply_overrides(base, {"waitForPodsReady.requeuingStrategy.backoffLimitCount": "null"})

    assert config.wait_for_pods_ready.requeuing_strategy.backoff_limit_count is None


@pytest.mark.parametrize(
    ("overrides", "rule"),
    [
        pytest.param({"waitForPodsReady.timout": "5s"}, "has no field 'timout'", id="typo"),
        pytest.param({"nope": "1"}, "the configuration has no field 'nope'", id="unknown-top"),
        pytest.param(
            {"waitForPodsReady.timeout.seconds": "5"}, "has no field 'seconds'", id="past-a-leaf"
        ),
        pytest.param({"ignoredFields": "x"}, "has no field 'ignoredFields'", id="internal"),
        pytest.param(
            {"managedJobsNamespaceSelector": "{not json"}, "expected a JSON dict", id="bad-json"
        ),
    ],
)
def test_override_of_an_unknown_path_is_rejected(overrides: dict[str, str], rule: str) -> None:
    with pytest.raises(ConfigurationError, match=rule):
        apply_overrides(Configuration(), overrides)


def test_override_with_an_invalid_value_names_the_field() -> None:
    with pytest.raises(ConfigurationError) as caught:
        apply_overrides(Configuration(), {"waitForPodsReady.timeout": "soon"})

    assert caught.value.problems[0].startswith("waitForPodsReady.timeout: invalid duration")


def test_overrides_keep_the_list_of_ignored_fields() -> None:
    base = configuration_from_mapping({"multiKueue": {}})

    config = apply_overrides(base, {"namespace": "atoll-system"})

    assert config.ignored_fields == ("multiKueue",)


def test_overrides_from_env_turn_double_underscores_into_paths() -> None:
    environ = {
        "ATOLL_CONFIG__waitForPodsReady__timeout": "5s",
        "ATOLL_CONFIG__namespace": "atoll-system",
        "ATOLL_OTHER": "x",
        "PATH": "/bin",
    }

    overrides = overrides_from_env(environ)

    assert overrides == {"namespace": "atoll-system", "waitForPodsReady.timeout": "5s"}
    config = apply_overrides(Configuration(), overrides)
    assert (config.namespace, config.wait_for_pods_ready.timeout) == ("atoll-system", 5)


def test_overrides_from_env_reject_an_empty_segment() -> None:
    with pytest.raises(ConfigurationError, match="empty path segment"):
        overrides_from_env({"ATOLL_CONFIG__waitForPodsReady____timeout": "5s"})


def test_parse_override_splits_at_the_first_equals_sign() -> None:
    assert parse_override('managedJobsNamespaceSelector={"a":"="}') == (
        "managedJobsNamespaceSelector",
        '{"a":"="}',
    )
    with pytest.raises(ConfigurationError, match="PATH=VALUE"):
        parse_override("waitForPodsReady.timeout")


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        pytest.param(":8080", ("", 8080), id="port-only"),
        pytest.param("127.0.0.1:9", ("127.0.0.1", 9), id="host"),
        pytest.param("[::1]:8443", ("::1", 8443), id="ipv6"),
        pytest.param("0", None, id="off"),
        pytest.param("", None, id="empty"),
    ],
)
def test_parse_bind_address(address: str, parsed: tuple[str, int] | None) -> None:
    assert parse_bind_address(address) == parsed
