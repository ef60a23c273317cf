"""atoll's configuration: the subset of Kueue's `Configuration` that applies to atoll.

Mirrors apis/config/v1beta2/configuration_types.go and defaults.go (`config.kueue.x-k8s.io/v1beta2`,
kind `Configuration`) and the checks of pkg/config/validation.go that concern these fields. A Kueue
configuration file can be given to atoll as it is:

- Fields atoll models keep Kueue's names, defaults and meaning: `namespace`,
  `manageJobsWithoutQueueName`, `managedJobsNamespaceSelector`, `internalCertManagement`,
  `waitForPodsReady`, `clientConnection`, `integrations`, `fairSharing`,
  `admissionFairSharing`, `resources`
  (`excludeResourcePrefixes`, `deviceClassMappings`), `featureGates`, `webhook`,
  `leaderElection`, `metrics`, `health`.
- Fields atoll does not model (for instance `multiKueue`,
  `resources.transformations`, or anything a newer Kueue adds) are ignored, and their paths are
  listed in `Configuration.ignored_fields` so that the operator can say so in its start-up log.
- A field whose value is invalid is an error, reported as `<field path>: <rule>` (see
  `ConfigurationError`). Several errors are reported together.

A `config.kueue.x-k8s.io/v1beta1` file (Kueue up to v0.14 wrote only that) is read as Kueue
v0.17 reads it (`config_from_v1beta1`, after apis/config/v1beta1/configuration_conversion.go and
defaults.go): `fairSharing` and `waitForPodsReady` apply only with `enable: true`, without
`preemptionStrategies` fair sharing gets v1beta1's `[LessThanOrEqualToFinalShare,
LessThanInitialShare]`, and an enabled `waitForPodsReady` gets v1beta1's defaults (timeout 5m,
`blockAdmission: true`; a null counts as absent). `waitForPodsReady` off in v1beta1 (its
default) stays off, as in Kueue v0.17: the file is read with
`featureGates.DisableWaitForPodsReady: true` (the gate of Kueue ≥ 0.19 that atoll follows for
v1beta2, where the feature is on by default), whatever the file says about that gate.
v1beta1's `queueVisibility` (gone from v1beta2) is ignored and named.

Two v1beta2 rules that surprise people coming from v1beta1:

- `waitForPodsReady` is ON by default (since Kueue 0.19) and has no `enable` field. Its timeout
  defaults to 30m (a zero timeout also means 30m), `recoveryTimeout` defaults to the timeout and
  `"0s"` turns the recovery check off. The only way to turn the feature off is Kueue's feature
  gate: `featureGates: {DisableWaitForPodsReady: true}`; read `wait_for_pods_ready_enabled`.
- `fairSharing` has no `enable` field either: its presence turns fair sharing on, and then
  `preemptionStrategies` is required.
- A v1beta1-style `enable: false` under either block is rejected, since v1beta2 would ignore it
  and leave the feature on; `enable: true` is ignored (listed in `ignored_fields`).

Durations are Go duration strings (`"30m"`, `"1h30m"`, `"1.5s"`, `"250ms"`), as Kueue's
`metav1.Duration`, parsed to seconds (`float`). A bare number is rejected: it has no unit.

atoll's own settings live under the top-level key `atoll` (see `AtollSettings`), a key Kueue
does not have.

Overrides (flags and environment). `apply_overrides(config, {"waitForPodsReady.timeout": "5s"})`
returns a new configuration with each dotted path set, validated as if it had been in the file.
Paths use the camelCase field names (snake_case also accepted); a path that names no field is an
error, so a typo cannot pass silently. Values are strings, converted by the type of the field:

- scalars as pydantic reads strings (`"true"`, `"5"`, `"0.5"`, `"30m"`); `null` unsets an
  optional field (`waitForPodsReady.requeuingStrategy.backoffLimitCount=null`);
- lists as a JSON array, or comma-separated
  (`fairSharing.preemptionStrategies=LessThanInitialShare`);
- maps by key (`featureGates.DisableWaitForPodsReady=true`) or, like objects, as a JSON object
  (`managedJobsNamespaceSelector={"matchLabels": {"team": "a"}}`).

The command line passes `--set PATH=VALUE` (see `parse_override`); the environment passes
`ATOLL_CONFIG__<segment>__<segment>=VALUE`, where `__` separates the path segments and the
segments keep their camelCase (`ATOLL_CONFIG__waitForPodsReady__timeout=5s`); see
`overrides_from_env`. Environment overrides apply first, flags last.
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

from atoll.api.meta import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    QUALIFIED_NAME,
    ApiModel,
    DnsLabel,
    Int32,
    LabelSelector,
    LabelSelectorOperator,
    LabelSelectorRequirement,
    StrEnum,
)

API_VERSION: Final = "config.kueue.x-k8s.io/v1beta2"
API_VERSION_V1BETA1: Final = "config.kueue.x-k8s.io/v1beta1"
V1BETA1_PODS_READY_TIMEOUT: Final = "5m"
"""v1beta1's default waitForPodsReady timeout (v1beta2's is 30m)."""
V1BETA1_FAIR_SHARING_STRATEGIES: Final = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
"""v1beta1's default fairSharing.preemptionStrategies (v1beta2 requires them)."""
V1BETA1_ONLY: Final = ("queueVisibility",)
"""Top-level v1beta1 fields v1beta2 dropped; named among the ignored fields."""
KIND: Final = "Configuration"
ENV_PREFIX: Final = "ATOLL_CONFIG__"
"""Prefix of the environment variables that override configuration fields."""
SERVICE_ACCOUNT_NAMESPACE_FILE: Final = Path(
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)
DEFAULT_NAMESPACE: Final = "kueue-system"
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
DISABLE_WAIT_FOR_PODS_READY_GATE: Final = "DisableWaitForPodsReady"
LONG_REQUEUE_INTERVAL_GATE: Final = "SchedulerLongRequeueInterval"
"""Kueue's alpha gate: requeue inadmissible workloads in batches of 10 s instead of 1 s."""
ADMISSION_FAIR_SHARING_GATE: Final = "AdmissionFairSharing"
"""Kueue's gate (beta and on since v0.15): with `admissionFairSharing` configured, a
ClusterQueue with `admissionScope: UsageBasedAdmissionFairSharing` orders its Workloads by
their LocalQueues' recent usage."""
PRIORITY_CLASS_DEFAULTING_GATE: Final = "WorkloadPriorityClassDefaulting"
"""Kueue's gate (alpha in v0.18, beta and on in v0.20): a new object without a priority class
gets the WorkloadPriorityClass `default` when it exists."""
KNOWN_FRAMEWORKS: Final = frozenset(
    {
        "batch/job",
        "kubeflow.org/mpijob",
        "ray.io/rayjob",
        "ray.io/rayservice",
        "ray.io/raycluster",
        "jobset.x-k8s.io/jobset",
        "kubeflow.org/paddlejob",
        "kubeflow.org/pytorchjob",
        "kubeflow.org/tfjob",
        "kubeflow.org/xgboostjob",
        "kubeflow.org/jaxjob",
        "trainer.kubeflow.org/trainjob",
        "workload.codeflare.dev/appwrapper",
        "sparkoperator.k8s.io/sparkapplication",
        "pod",
        "deployment",
        "statefulset",
        "leaderworkerset.x-k8s.io/leaderworkerset",
    }
)
"""Framework names Kueue accepts in `integrations.frameworks`."""
BATCH_JOB_FRAMEWORK: Final = "batch/job"
RUN_FRAMEWORKS: Final = (
    BATCH_JOB_FRAMEWORK,
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/mpijob",
    "trainer.kubeflow.org/trainjob",
    "pod",
    "leaderworkerset.x-k8s.io/leaderworkerset",
)
"""The frameworks atoll runs; the other names are accepted and ignored (with a log line)."""


# --------------------------------------------------------------------------- errors


class ConfigurationError(ValueError):
    """An invalid configuration: each entry of `problems` reads `<field path>: <rule>`."""

    def __init__(self, problems: list[str], *, source: str = "configuration") -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"invalid {source}:\n" + "\n".join(f"  - {p}" for p in problems))


class FieldRuleError(ValueError):
    """A rule broken by a field below the model being validated (its path is `field`)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


# --------------------------------------------------------------------------- durations

_NS_PER_UNIT: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART: Final = re.compile(r"(\d+\.?\d*|\.\d+)([^\d.]*)")
_MAX_NS: Final = 2**63 - 1


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string (`"1h30m"` → 5400.0); `ValueError` saying why not."""
    return parse_duration_ns(text) / 1e9


def parse_duration_ns(text: str) -> int:
    """Nanoseconds in a Go duration string, as Go's `time.ParseDuration` reads it."""
    if not isinstance(text, str):
        raise ValueError(
            f"a duration must be a string with a unit such as '30s', '5m' or '1h30m'; got {text!r}"
        )
    rest = text
    sign = 1
    if rest[:1] in ("+", "-"):
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise ValueError(f"invalid duration {text!r}: empty")
    total = Fraction(0)
    pos = 0
    while pos < len(rest):
        match = _DURATION_PART.match(rest, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: expected a number at {rest[pos:]!r}")
        number, unit = match.groups()
        if not unit:
            raise ValueError(
                f"invalid duration {text!r}: missing unit after {number!r} (units: ns, us, ms, "
                "s, m, h)"
            )
        if unit not in _NS_PER_UNIT:
            raise ValueError(
                f"invalid duration {text!r}: unknown unit {unit!r} (units: ns, us, ms, s, m, h)"
            )
        total += Fraction(Decimal(number)) * _NS_PER_UNIT[unit]
        pos = match.end()
    nanoseconds = int(total)
    if nanoseconds > _MAX_NS:
        raise ValueError(f"invalid duration {text!r}: longer than about 292 years")
    return sign * nanoseconds


def _digits(value: int, unit: int) -> str:
    whole, fraction = divmod(value, unit)
    if not fraction:
        return str(whole)
    width = len(str(unit)) - 1
    return f"{whole}." + f"{fraction:0{width}d}".rstrip("0")


def format_duration(seconds: float) -> str:
    """The Go spelling of a duration (5400.0 → `"1h30m0s"`, 0.25 → `"250ms"`)."""
    nanoseconds = round(seconds * 1e9)
    if nanoseconds == 0:
        return "0s"
    sign = "-" if nanoseconds < 0 else ""
    nanoseconds = abs(nanoseconds)
    if nanoseconds < _NS_PER_UNIT["s"]:
        for unit in ("ms", "µs", "ns"):
            if nanoseconds >= _NS_PER_UNIT[unit]:
                return sign + _digits(nanoseconds, _NS_PER_UNIT[unit]) + unit
    hours, rest = divmod(nanoseconds, _NS_PER_UNIT["h"])
    minutes, rest = divmod(rest, _NS_PER_UNIT["m"])
    text = sign
    if hours:
        text += f"{hours}h"
    if hours or minutes:
        text += f"{minutes}m"
    return text + _digits(rest, _NS_PER_UNIT["s"]) + "s"


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
]
"""A Go duration string (`metav1.Duration`) held as seconds; written back in Go's spelling."""


def _non_negative(value: float) -> float:
    if value < 0:
        raise ValueError(f"must be greater than or equal to 0 (got {format_duration(value)})")
    return value


# --------------------------------------------------------------------------- small checks


def _check_bind_address(value: str) -> str:
    """`host:port` or `:port` (port 0–65535), or `""`/`"0"` to turn the endpoint off."""
    if value in ("", "0"):
        return value
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(
            f"must be 'host:port' or ':port' with a port 0-65535, or '0' (got {value!r})"
        )
    if host.startswith("[") != host.endswith("]"):
        raise ValueError(f"unbalanced brackets in IPv6 host {host!r}")
    return value


BindAddress = Annotated[str, BeforeValidator(_check_bind_address)]
"""A TCP bind address as controller-runtime takes it."""


def parse_bind_address(value: str) -> tuple[str, int] | None:
    """(host, port) of a bind address (host `""` means every interface); None when it is off."""
    if value in ("", "0"):
        return None
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


def _check_qualified_name(value: str) -> str:
    """Kubernetes' `IsLabelKey`/`IsQualifiedName`: `[dns-subdomain/]name`, name ≤ 63."""
    prefix, sep, name = value.rpartition("/")
    problems = []
    if sep and (not prefix or len(prefix) > 253 or not re.match(DNS1123_SUBDOMAIN, prefix)):
        problems.append("the prefix must be a DNS subdomain of at most 253 characters")
    if not name or len(name) > 63 or not re.match(QUALIFIED_NAME, name):
        problems.append(
            "the name must be at most 63 alphanumeric characters, '-', '_' or '.', starting "
            "and ending with an alphanumeric character"
        )
    if problems:
        raise ValueError(f"{value!r} is not a qualified name: " + "; ".join(problems))
    return value


QualifiedName = Annotated[str, BeforeValidator(_check_qualified_name)]
NonNegativeInt32 = Annotated[Int32, Field(ge=0)]


# --------------------------------------------------------------------------- models


class RequeuingTimestamp(StrEnum):
    """Which timestamp orders a Workload requeued after a PodsReady timeout."""

    EVICTION = "Eviction"
    """From the `Evicted` condition with reason `PodsReadyTimeout` (Kueue's default)."""
    CREATION = "Creation"
    """From the Workload's `metadata.creationTimestamp`."""


class PreemptionStrategy(StrEnum):
    """A constraint a fair-sharing preemption must satisfy."""

    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    """Preempt only if the preemptor's share with the workload ≤ the target's share without it."""
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
    """Preempt only if the preemptor's share with the workload < the target's current share."""


_VALID_STRATEGY_LISTS: Final = (
    (PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    (PreemptionStrategy.LESS_THAN_INITIAL_SHARE,),
    (
        PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        PreemptionStrategy.LESS_THAN_INITIAL_SHARE,
    ),
)


class RequeuingStrategy(ApiModel):
    """How a Workload evicted for a PodsReady timeout is requeued."""

    timestamp: RequeuingTimestamp = RequeuingTimestamp.EVICTION
    """Timestamp that orders the requeued Workload in its queue: `Eviction` or `Creation`."""
    backoff_limit_count: NonNegativeInt32 | None = None
    """Requeues allowed before the Workload is deactivated (`spec.active=false`); unset = no
    limit."""
    backoff_base_seconds: NonNegativeInt32 = 60
    """Base of the exponential requeue backoff: the n-th requeue waits base·2^(n−1) seconds."""
    backoff_max_seconds: NonNegativeInt32 = 3600
    """Upper bound of one requeue backoff, in seconds."""


def _timeout_or_default(value: float) -> float:
    # Kueue's defaulting replaces a zero timeout with 30 minutes.
    return _non_negative(value) or 1800.0


def _reject_disabling_enable(data: Any, how_to_disable: str) -> Any:
    """v1beta1's `enable: false` would be ignored by v1beta2 and the feature left on: refuse it."""
    if isinstance(data, Mapping) and data.get("enable") is False:
        raise FieldRuleError("enable", f"v1beta2 has no `enable` field; {how_to_disable}")
    return data


class WaitForPodsReady(ApiModel):
    """All-or-nothing start: a gang whose pods are not all ready in time is evicted and requeued.

    On by default (Kueue ≥ 0.19); there is no `enable` field in v1beta2. Turn it off with the
    feature gate `DisableWaitForPodsReady`.
    """

    timeout: Duration = 1800.0
    """Time an admitted Workload has to reach `PodsReady=True` before it is evicted (default
    30m; zero also means 30m)."""
    block_admission: bool = False
    """When true, nothing is admitted while an admitted Workload is not yet `PodsReady`."""
    recovery_timeout: Duration = Field(default_factory=lambda data: data.get("timeout", 1800.0))
    """Time a running Workload has to become ready again after `PodsReady` turned False;
    defaults to `timeout`; `"0s"` turns the check off."""
    requeuing_strategy: RequeuingStrategy = Field(default_factory=RequeuingStrategy)
    """How a Workload evicted for a timeout is requeued."""

    @model_validator(mode="before")
    @classmethod
    def _no_v1beta1_disable(cls, data: Any) -> Any:
        return _reject_disabling_enable(
            data, "to turn waitForPodsReady off set featureGates.DisableWaitForPodsReady: true"
        )

    @field_validator("timeout")
    @classmethod
    def _default_zero_timeout(cls, value: float) -> float:
        return _timeout_or_default(value)

    @field_validator("recovery_timeout")
    @classmethod
    def _check_recovery_timeout(cls, value: float) -> float:
        return _non_negative(value)


class FairSharing(ApiModel):
    """Fair sharing across the ClusterQueues of a cohort; present means enabled."""

    preemption_strategies: tuple[PreemptionStrategy, ...]
    """Constraints a preemption must satisfy, tried in order: `[LessThanOrEqualToFinalShare]`,
    `[LessThanInitialShare]`, or both in that order."""

    @model_validator(mode="before")
    @classmethod
    def _no_v1beta1_disable(cls, data: Any) -> Any:
        return _reject_disabling_enable(data, "to turn fair sharing off remove fairSharing")

    @field_validator("preemption_strategies")
    @classmethod
    def _check_strategies(
        cls, value: tuple[PreemptionStrategy, ...]
    ) -> tuple[PreemptionStrategy, ...]:
        if not value:
            raise ValueError("must be specified when fairSharing is present")
        if value not in _VALID_STRATEGY_LISTS:
            allowed = " or ".join(
                "[" + ", ".join(s.value for s in option) + "]" for option in _VALID_STRATEGY_LISTS
            )
            raise ValueError(f"must be one of {allowed}")
        return value


class AdmissionFairSharing(ApiModel):
    """Admission Fair Sharing: how the LocalQueues' recent usage is measured. It orders the
    Workloads of each ClusterQueue whose `admissionScope.admissionMode` is
    `UsageBasedAdmissionFairSharing` (present means enabled, unless the `AdmissionFairSharing`
    gate is off)."""

    usage_half_life_time: Duration = 0.0
    """Time for past usage to lose half its weight. Set it: with `0s` (the default, as in
    Kueue) every sample resets the usage to nothing and no penalty is charged, so Admission
    Fair Sharing orders nothing."""
    usage_sampling_interval: Duration = 300.0
    """How often each LocalQueue's usage is sampled and written to its status (default 5m;
    zero also means 5m)."""
    resource_weights: dict[str, float] = Field(default_factory=dict)
    """Weight of each resource in the usage (a resource not listed weighs 1; 0 leaves it
    out)."""

    @field_validator("usage_half_life_time")
    @classmethod
    def _check_half_life(cls, value: float) -> float:
        return _non_negative(value)

    @field_validator("usage_sampling_interval")
    @classmethod
    def _default_zero_interval(cls, value: float) -> float:
        return _non_negative(value) or 300.0

    @field_validator("resource_weights")
    @classmethod
    def _check_weights(cls, value: dict[str, float]) -> dict[str, float]:
        wrong = sorted(n for n, w in value.items() if not (math.isfinite(w) and w >= 0))
        if wrong:
            raise ValueError(f"must be finite and non-negative (resource {', '.join(wrong)})")
        return value


class DeviceClassMapping(ApiModel):
    """Charges the DRA devices of some DeviceClasses to one quota resource."""

    name: QualifiedName
    """The quota resource name used in ClusterQueue `nominalQuota` and Workload usage."""
    device_class_names: Annotated[tuple[QualifiedName, ...], Field(min_length=1, max_length=8)]
    """DeviceClasses whose devices count as `name` (1 to 8, no duplicates)."""
    sources: tuple[dict[str, Any], ...] = ()
    """Counter or capacity sources (partitionable and shared devices): not supported by atoll."""

    @field_validator("device_class_names")
    @classmethod
    def _unique_classes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        duplicates = sorted({name for name in value if value.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate device class names: {', '.join(duplicates)}")
        return value

    @field_validator("sources")
    @classmethod
    def _no_sources(cls, value: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        if value:
            raise ValueError(
                "counter and capacity sources are not supported by atoll; map whole devices"
            )
        return value


class Resources(ApiModel):
    """How Pod resources turn into quota resources."""

    exclude_resource_prefixes: tuple[str, ...] = ()
    """Resources whose names start with one of these prefixes are not counted against quota."""
    device_class_mappings: tuple[DeviceClassMapping, ...] = ()
    """DRA DeviceClasses counted as quota resources."""

    @model_validator(mode="after")
    def _one_resource_per_class(self) -> Self:
        names: set[str] = set()
        owner: dict[str, str] = {}
        for index, mapping in enumerate(self.device_class_mappings):
            if mapping.name in names:
                raise FieldRuleError(
                    f"deviceClassMappings[{index}].name", f"duplicate name {mapping.name!r}"
                )
            names.add(mapping.name)
            for class_index, device_class in enumerate(mapping.device_class_names):
                mapped = owner.setdefault(device_class, mapping.name)
                if mapped != mapping.name:
                    raise FieldRuleError(
                        f"deviceClassMappings[{index}].deviceClassNames[{class_index}]",
                        f"device class {device_class!r} is already mapped to resource {mapped!r}",
                    )
        return self


class Integrations(ApiModel):
    """Which job kinds are managed, and what is copied from them."""

    frameworks: tuple[str, ...] = (BATCH_JOB_FRAMEWORK,)
    """Kueue framework names to manage; atoll runs `batch/job`, `jobset.x-k8s.io/jobset`,
    `kubeflow.org/mpijob`, `trainer.kubeflow.org/trainjob`, `pod` and
    `leaderworkerset.x-k8s.io/leaderworkerset`, and ignores the others."""
    label_keys_to_copy: tuple[str, ...] = ()
    """Job label keys copied to the Workload at creation."""

    @field_validator("frameworks")
    @classmethod
    def _known_frameworks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in value if name not in KNOWN_FRAMEWORKS]
        if unknown:
            raise ValueError(
                f"unknown framework(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(KNOWN_FRAMEWORKS))}"
            )
        return value or (BATCH_JOB_FRAMEWORK,)


class InternalCertManagement(ApiModel):
    """Self-signed certificates for the webhook server, generated by the operator."""

    enable: bool = True
    """Generate and rotate the webhook certificate (atoll always does; false is rejected)."""
    webhook_service_name: Annotated[str, Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")] = (
        "kueue-webhook-service"
    )
    """Name of the webhook Service (the certificate's DNS name)."""
    webhook_secret_name: Annotated[str, Field(max_length=253, pattern=DNS1123_SUBDOMAIN)] = (
        "kueue-webhook-server-cert"
    )
    """Name of the Secret that holds the CA and the serving certificate."""

    @field_validator("enable")
    @classmethod
    def _always_internal(cls, value: bool) -> bool:
        if not value:
            raise ValueError("atoll generates its webhook certificate itself; must be true")
        return value


class ClientConnection(ApiModel):
    """Client-side rate limit on requests to the API server."""

    qps: float = 300.0
    """Sustained requests per second; a negative value turns the limit off."""
    burst: NonNegativeInt32 = 500
    """Requests allowed above the sustained rate in a burst."""


class ControllerWebhook(ApiModel):
    """The admission webhook server."""

    port: Annotated[int, Field(ge=1, le=65535)] = 9443
    """Port the webhook server listens on."""
    host: str = ""
    """Host the webhook server binds to (empty: every interface)."""


class LeaderElection(ApiModel):
    """Leader election on a coordination.k8s.io Lease (component-base's configuration)."""

    leader_elect: bool = True
    """Elect a leader before admitting; false runs a single writer without a Lease."""
    lease_duration: Duration = 15.0
    """How long followers wait before taking over a lease that was not renewed."""
    renew_deadline: Duration = 10.0
    """How long the leader keeps trying to renew before it gives up leadership."""
    retry_period: Duration = 2.0
    """Wait between attempts to acquire or renew the lease."""
    resource_lock: Literal["leases"] = "leases"
    """Lock kind; only `leases` is supported."""
    resource_name: Annotated[str, Field(max_length=253, pattern=DNS1123_SUBDOMAIN)] = (
        "c1f6bfd2.kueue.x-k8s.io"
    )
    """Name of the Lease."""
    resource_namespace: Annotated[str, Field(pattern=rf"^$|{DNS1123_LABEL}")] = ""
    """Namespace of the Lease (empty: the operator's `namespace`)."""

    @model_validator(mode="after")
    def _consistent_timing(self) -> Self:
        if not self.leader_elect:
            return self
        for name in ("lease_duration", "renew_deadline", "retry_period"):
            if getattr(self, name) <= 0:
                alias = type(self).model_fields[name].alias or name
                raise FieldRuleError(alias, "must be greater than 0 when leaderElect is true")
        if self.lease_duration <= self.renew_deadline:
            raise FieldRuleError(
                "renewDeadline",
                f"must be less than leaseDuration ({format_duration(self.renew_deadline)} ≥ "
                f"{format_duration(self.lease_duration)})",
            )
        if self.renew_deadline <= 1.2 * self.retry_period:
            raise FieldRuleError(
                "retryPeriod",
                f"renewDeadline must be greater than 1.2 × retryPeriod "
                f"({format_duration(self.renew_deadline)} ≤ 1.2 × "
                f"{format_duration(self.retry_period)})",
            )
        return self


class ControllerMetrics(ApiModel):
    """The Prometheus endpoint."""

    bind_address: BindAddress = ":8443"
    """Address of the metrics endpoint (`"0"` turns it off). Kueue's default serves HTTPS on
    :8443; atoll serves plain HTTP, and its manifests use :8080."""
    enable_cluster_queue_resources: bool = False
    """Report per-flavor quota and usage of each ClusterQueue
    (`kueue_cluster_queue_resource_usage`, `…_nominal_quota`, …)."""


class ControllerHealth(ApiModel):
    """The liveness and readiness probes."""

    health_probe_bind_address: BindAddress = ":8081"
    """Address of the probe endpoint (`""` or `"0"` turns it off)."""
    readiness_endpoint_name: str = "readyz"
    """Path of the readiness probe."""
    liveness_endpoint_name: str = "healthz"
    """Path of the liveness probe."""


class LogFormat(StrEnum):
    """How atoll writes its logs."""

    AUTO = "auto"
    """Console on a terminal, JSON otherwise."""
    JSON = "json"
    """One JSON object a line."""
    CONSOLE = "console"
    """Human-readable lines."""


class EventLoop(StrEnum):
    """The asyncio event loop `atoll run` runs on."""

    UVLOOP = "uvloop"
    """uvloop (libuv): less CPU per request and per watch event; asyncio's own where uvloop
    is not installed (it is a dependency on Linux and macOS)."""
    ASYNCIO = "asyncio"
    """Python's own event loop."""


class AtollSettings(ApiModel):
    """atoll's own settings (top-level key `atoll`); Kueue has no equivalent."""

    webhook_configuration_name: Annotated[str, Field(pattern=DNS1123_SUBDOMAIN)] = (
        "mutating.atoll.dev"
    )
    """MutatingWebhookConfiguration of the Job webhook. With `atoll run --webhook url` (the
    sandbox) a replica creates it, or points it at its own URL when nothing listens at the URL
    it names, naming its webhooks `<path>.<this name>`, which Kubernetes requires to be a
    domain of three or more segments; with `--webhook service` (in a cluster) it only fills the
    `caBundle` of the installed one (`deploy/webhook.yaml`). No replica removes it when it
    stops."""
    log_format: LogFormat = LogFormat.AUTO
    """Log format: `auto`, `json` or `console`."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest level written to the log."""
    event_loop: EventLoop = EventLoop.UVLOOP
    """The event loop of `atoll run`: `uvloop` (default) or `asyncio`."""
    batched_requeue: bool = True
    """Requeue the Workloads parked as inadmissible in batches, 1 s after a change that may
    let them fit, as Kueue does (its `requeueBatchPeriod`; 10 s with the feature gate
    `SchedulerLongRequeueInterval`). Off: they are tried again at the next step."""


def _default_namespace_selector(data: dict[str, Any]) -> LabelSelector:
    namespace = data.get("namespace", DEFAULT_NAMESPACE)
    return LabelSelector(
        match_expressions=(
            LabelSelectorRequirement(
                key=NAMESPACE_NAME_LABEL,
                operator=LabelSelectorOperator.NOT_IN,
                values=("kube-system", namespace),
            ),
        )
    )


def _check_api_version(value: object) -> object:
    if (
        isinstance(value, str)
        and value.startswith("config.kueue.x-k8s.io/")
        and value != API_VERSION
    ):
        raise ValueError(
            f"{value} is not supported; write the file as {API_VERSION} or {API_VERSION_V1BETA1}"
        )
    return value


def config_from_v1beta1(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A `config.kueue.x-k8s.io/v1beta1` Configuration as v1beta2 (see the module's
    docstring), and the v1beta1 fields it drops. Anything else is kept as written, and is
    then checked as a v1beta2 field."""
    out = {k: v for k, v in data.items() if k not in V1BETA1_ONLY}
    dropped = [k for k in V1BETA1_ONLY if k in data]
    out["apiVersion"] = API_VERSION
    fair = data.get("fairSharing")
    if isinstance(fair, Mapping) and fair.get("enable") is True:
        enabled = {k: v for k, v in fair.items() if k != "enable"}
        if not enabled.get("preemptionStrategies"):
            enabled["preemptionStrategies"] = list(V1BETA1_FAIR_SHARING_STRATEGIES)
        out["fairSharing"] = enabled
    else:
        out.pop("fairSharing", None)
    ready = data.get("waitForPodsReady")
    if isinstance(ready, Mapping) and ready.get("enable") is True:
        enabled = {k: v for k, v in ready.items() if k != "enable"}
        for key, default in (("timeout", V1BETA1_PODS_READY_TIMEOUT), ("blockAdmission", True)):
            if enabled.get(key) is None:  # absent or null: v1beta1's default, as in Kueue
                enabled[key] = default
        out["waitForPodsReady"] = enabled
    else:
        # Off in v1beta1 (explicitly or by its default) stays off, whatever else the file
        # says about the gate.
        out.pop("waitForPodsReady", None)
        gates = data.get("featureGates")
        gates = dict(gates) if isinstance(gates, Mapping) else {}
        gates[DISABLE_WAIT_FOR_PODS_READY_GATE] = True
        out["featureGates"] = gates
    return out, dropped


class Configuration(ApiModel):
    """atoll's configuration in Kueue's format (`config.kueue.x-k8s.io/v1beta2` `Configuration`)."""

    api_version: Annotated[
        Literal["config.kueue.x-k8s.io/v1beta2"], BeforeValidator(_check_api_version)
    ] = API_VERSION
    """Always `config.kueue.x-k8s.io/v1beta2`."""
    kind: Literal["Configuration"] = KIND
    """Always `Configuration`."""
    namespace: DnsLabel = DEFAULT_NAMESPACE
    """Namespace the operator runs in (webhook Service, Lease); when the file leaves it out,
    the pod's service-account namespace, else `kueue-system`."""
    manage_jobs_without_queue_name: bool = False
    """Also suspend and manage Jobs without the `kueue.x-k8s.io/queue-name` label (they wait until
    a queue name is set)."""
    managed_jobs_namespace_selector: LabelSelector = Field(
        default_factory=_default_namespace_selector
    )
    """Namespaces whose Jobs are managed at all; must exclude `kube-system` and `namespace`
    (default: both excluded by `kubernetes.io/metadata.name NotIn`)."""
    internal_cert_management: InternalCertManagement = Field(default_factory=InternalCertManagement)
    """Webhook certificate generation."""
    wait_for_pods_ready: WaitForPodsReady = Field(default_factory=WaitForPodsReady)
    """All-or-nothing readiness after admission; on unless the `DisableWaitForPodsReady` gate is
    set."""
    client_connection: ClientConnection = Field(default_factory=ClientConnection)
    """Client-side rate limit for API writes."""
    integrations: Integrations = Field(default_factory=Integrations)
    """Managed job kinds."""
    fair_sharing: FairSharing | None = None
    """Fair sharing across cohorts; absent means off."""
    admission_fair_sharing: AdmissionFairSharing | None = None
    """Admission Fair Sharing (ordering by LocalQueue usage); absent means off."""
    resources: Resources = Field(default_factory=Resources)
    """Quota resource handling (excluded prefixes, DRA device class mappings)."""
    feature_gates: dict[str, bool] = Field(default_factory=dict)
    """Kueue feature gates; atoll reads `DisableWaitForPodsReady`,
    `SchedulerLongRequeueInterval`, `WorkloadPriorityClassDefaulting` and
    `AdmissionFairSharing`."""
    webhook: ControllerWebhook = Field(default_factory=ControllerWebhook)
    """Admission webhook server."""
    leader_election: LeaderElection = Field(default_factory=LeaderElection)
    """Leader election between replicas."""
    metrics: ControllerMetrics = Field(default_factory=ControllerMetrics)
    """Prometheus endpoint."""
    health: ControllerHealth = Field(default_factory=ControllerHealth)
    """Probe endpoint."""
    atoll: AtollSettings = Field(default_factory=AtollSettings)
    """atoll's own settings."""
    ignored_fields: tuple[str, ...] = Field(default=(), exclude=True)
    """Paths of fields in the input that atoll does not model (set on parsing, never written)."""

    @model_validator(mode="after")
    def _check_namespace_selector(self) -> Self:
        selector = self.managed_jobs_namespace_selector
        for index, requirement in enumerate(selector.match_expressions or ()):
            needs_values = requirement.operator in (
                LabelSelectorOperator.IN,
                LabelSelectorOperator.NOT_IN,
            )
            if needs_values != bool(requirement.values):
                rule = "must be non-empty" if needs_values else "must be empty"
                raise FieldRuleError(
                    f"managedJobsNamespaceSelector.matchExpressions[{index}].values",
                    f"{rule} when operator is {requirement.operator.value}",
                )
        for protected in ("kube-system", self.namespace):
            if selector.matches({NAMESPACE_NAME_LABEL: protected}):
                raise FieldRuleError(
                    "managedJobsNamespaceSelector", f"should not match the {protected!r} namespace"
                )
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _record_ignored_fields(cls, data: Any, handler: Any) -> Any:
        if not isinstance(data, Mapping):
            return handler(data)
        # `ignoredFields` is computed here, never read from the input.
        given = {k: v for k, v in data.items() if k not in ("ignoredFields", "ignored_fields")}
        dropped: list[str] = []
        if API_VERSION_V1BETA1 in (given.get("apiVersion"), given.get("api_version")):
            given.pop("api_version", None)
            given, dropped = config_from_v1beta1(given)
        model = handler(given)
        ignored = tuple(sorted({*_unmodelled(cls, given, ""), *dropped}))
        if ignored:
            model = model.model_copy(update={"ignored_fields": ignored})
        return model

    @property
    def wait_for_pods_ready_enabled(self) -> bool:
        """Whether waitForPodsReady applies (it does unless `DisableWaitForPodsReady` is set)."""
        return not self.feature_gates.get(DISABLE_WAIT_FOR_PODS_READY_GATE, False)

    @property
    def long_requeue_interval(self) -> bool:
        """Whether batched requeues of parked (inadmissible) workloads are 10 s apart rather
        than 1 s (Kueue's `SchedulerLongRequeueInterval` gate; off by default)."""
        return self.feature_gates.get(LONG_REQUEUE_INTERVAL_GATE, False)

    @property
    def priority_class_defaulting(self) -> bool:
        """Whether a new object without a priority-class label gets the WorkloadPriorityClass
        `default` when it exists (Kueue's `WorkloadPriorityClassDefaulting` gate: off by
        default up to Kueue v0.19, as here; Kueue v0.20 turns it on)."""
        return self.feature_gates.get(PRIORITY_CLASS_DEFAULTING_GATE, False)

    @property
    def admission_fair_sharing_enabled(self) -> bool:
        """Whether Admission Fair Sharing applies: `admissionFairSharing` is present and the
        `AdmissionFairSharing` gate is not turned off (it is on by default, as in Kueue)."""
        return self.admission_fair_sharing is not None and self.feature_gates.get(
            ADMISSION_FAIR_SHARING_GATE, True
        )

    @property
    def fair_sharing_enabled(self) -> bool:
        """Whether fair sharing applies (the `fairSharing` block is present)."""
        return self.fair_sharing is not None

    @property
    def manages_batch_jobs(self) -> bool:
        """Whether `batch/job` is among the enabled integrations."""
        return BATCH_JOB_FRAMEWORK in self.integrations.frameworks

    @property
    def unsupported_frameworks(self) -> tuple[str, ...]:
        """Enabled Kueue integrations atoll does not run (all but `RUN_FRAMEWORKS`)."""
        return tuple(f for f in self.integrations.frameworks if f not in RUN_FRAMEWORKS)

    @property
    def lease_namespace(self) -> str:
        """Namespace of the leader-election Lease."""
        return self.leader_election.resource_namespace or self.namespace

    def to_yaml(self) -> str:
        """The configuration as a Kueue-format YAML document (every field, defaults included)."""
        return yaml.safe_dump(
            self.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False
        )


# --------------------------------------------------------------------------- type walking


def _unwrap(annotation: Any) -> Any:
    """The core type of an annotation: without Annotated metadata and without `| None`."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _field_by_key(model: type[BaseModel], key: str) -> tuple[str, Any] | None:
    """(alias, annotation) of the field `key` names by alias or by Python name."""
    for name, info in model.model_fields.items():
        alias = info.alias or name
        if key in (alias, name):
            return alias, info.annotation
    return None


def _unmodelled(model: type[BaseModel], data: Mapping[str, Any], prefix: str) -> list[str]:
    found: list[str] = []
    for key, value in data.items():
        field = _field_by_key(model, str(key))
        path = f"{prefix}{key}"
        if field is None:
            found.append(path)
            continue
        core = _unwrap(field[1])
        if _is_model(core) and isinstance(value, Mapping):
            found.extend(_unmodelled(core, value, path + "."))
        elif typing.get_origin(core) is tuple and isinstance(value, list):
            item = _unwrap(typing.get_args(core)[0])
            if _is_model(item):
                for index, element in enumerate(value):
                    if isinstance(element, Mapping):
                        found.extend(_unmodelled(item, element, f"{path}[{index}]."))
    return found


# --------------------------------------------------------------------------- loading


def _format_errors(error: ValidationError) -> list[str]:
    problems = []
    for item in error.errors(include_url=False):
        if item["type"] == "default_factory_not_called":
            continue  # a consequence of another error in the same object
        parts: list[str] = []
        for part in item["loc"]:
            if isinstance(part, int):
                parts.append(f"[{part}]")
            elif not str(part).startswith("function-"):
                parts.append(("." if parts else "") + str(part))
        path = "".join(parts)
        cause = (item.get("ctx") or {}).get("error")
        message = item["msg"]
        if isinstance(cause, FieldRuleError):
            path = f"{path}.{cause.field}" if path else cause.field
            message = str(cause)
        elif isinstance(cause, ValueError):
            message = str(cause)
        elif item["type"] not in ("missing", "extra_forbidden"):
            message = f"{message} (got {item['input']!r})"
        problems.append(f"{path or '<root>'}: {message}")
    return problems


def configuration_from_mapping(
    data: Mapping[str, Any], *, source: str = "configuration"
) -> Configuration:
    """Validate a parsed configuration document; `ConfigurationError` names every bad field."""
    try:
        return Configuration.model_validate(data)
    except ValidationError as error:
        raise ConfigurationError(_format_errors(error), source=source) from error


def load_configuration(
    path: Path | None, *, namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE_FILE
) -> Configuration:
    """Read a Kueue-format configuration file; None gives Kueue's defaults.

    When the file does not set `namespace`, the pod's service-account namespace is used (as
    Kueue does), else `kueue-system`.
    """
    source = str(path) if path is not None else "default configuration"
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text())
        except OSError as error:
            raise ConfigurationError([f"cannot read the file: {error}"], source=source) from error
        except yaml.YAMLError as error:
            raise ConfigurationError([f"not valid YAML: {error}"], source=source) from error
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigurationError(
                [f"<root>: must be a mapping, got {type(loaded).__name__}"], source=source
            )
        data = loaded
    if "namespace" not in data:
        try:
            namespace = namespace_file.read_text().strip()
        except OSError:
            namespace = ""
        if namespace:
            data = {**data, "namespace": namespace}
    return configuration_from_mapping(data, source=source)


# --------------------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[str, str]:
    """`"waitForPodsReady.timeout=5s"` → (`"waitForPodsReady.timeout"`, `"5s"`)."""
    path, sep, value = text.partition("=")
    if not sep or not path.strip():
        raise ConfigurationError([f"override {text!r}: expected PATH=VALUE"], source="overrides")
    return path.strip(), value


def overrides_from_env(environ: Mapping[str, str], *, prefix: str = ENV_PREFIX) -> dict[str, str]:
    """Dotted-path overrides from `ATOLL_CONFIG__a__b=value` variables (sorted by path)."""
    found: dict[str, str] = {}
    for name, value in environ.items():
        if not name.startswith(prefix):
            continue
        segments = name[len(prefix) :].split("__")
        if not all(segments):
            raise ConfigurationError(
                [f"environment variable {name}: empty path segment"], source="overrides"
            )
        found[".".join(segments)] = value
    return dict(sorted(found.items()))


def _parse_json(path: str, value: str, expected: type) -> Any:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: expected a JSON {expected.__name__}: {error.msg}") from error
    if not isinstance(parsed, expected):
        raise ValueError(f"{path}: expected a JSON {expected.__name__}")
    return parsed


def _convert(path: str, annotation: Any, value: str) -> Any:
    core = _unwrap(annotation)
    origin = typing.get_origin(core)
    if value == "null":
        return None
    if _is_model(core) or origin is dict:
        return _parse_json(path, value, dict)
    if origin in (tuple, list):
        if value.lstrip().startswith("["):
            return _parse_json(path, value, list)
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def _resolve(path: str) -> tuple[list[str], Any]:
    """The alias path and the annotation of the field `path` names; ValueError if none."""
    segments = path.split(".")
    model: type[BaseModel] | None = Configuration
    aliases: list[str] = []
    annotation: Any = None
    for index, segment in enumerate(segments):
        if model is None:
            core = _unwrap(annotation)
            if typing.get_origin(core) is dict and index == len(segments) - 1:
                aliases.append(segment)
                annotation = typing.get_args(core)[1]
                continue
            raise ValueError(f"{path}: {'.'.join(aliases)} has no field {segment!r}")
        field = _field_by_key(model, segment)
        if field is None or field[0] == "ignoredFields":
            where = ".".join(aliases) or "the configuration"
            known = ", ".join(
                info.alias or name
                for name, info in model.model_fields.items()
                if name != "ignored_fields"
            )
            raise ValueError(f"{path}: {where} has no field {segment!r} (fields: {known})")
        aliases.append(field[0])
        annotation = field[1]
        core = _unwrap(annotation)
        model = core if _is_model(core) else None
    return aliases, annotation


def apply_overrides(config: Configuration, overrides: Mapping[str, str]) -> Configuration:
    """A new configuration with each dotted path set to its value, then validated as a whole.

    Fields derived from others (`recoveryTimeout` from `timeout`, the default namespace
    selector from `namespace`) follow an overridden source unless they were set explicitly.
    """
    if not overrides:
        return config
    data = config.model_dump(mode="json", by_alias=True, exclude_unset=True)
    problems = []
    for path, value in overrides.items():
        try:
            aliases, annotation = _resolve(path)
            converted = _convert(path, annotation, value)
        except ValueError as error:
            problems.append(str(error))
            continue
        node = data
        for alias in aliases[:-1]:
            child = node.get(alias)
            if not isinstance(child, dict):
                child = {}
                node[alias] = child
            node = child
        node[aliases[-1]] = converted
    if problems:
        raise ConfigurationError(problems, source="overrides")
    result = configuration_from_mapping(data, source="configuration with overrides")
    if config.ignored_fields:
        result = result.model_copy(update={"ignored_fields": config.ignored_fields})
    return result


__all__ = [
    "API_VERSION",
    "ENV_PREFIX",
    "KIND",
    "AdmissionFairSharing",
    "AtollSettings",
    "ClientConnection",
    "Configuration",
    "ConfigurationError",
    "ControllerHealth",
    "ControllerMetrics",
    "ControllerWebhook",
    "DeviceClassMapping",
    "Duration",
    "FairSharing",
    "Integrations",
    "InternalCertManagement",
    "LeaderElection",
    "LogFormat",
    "PreemptionStrategy",
    "RequeuingStrategy",
    "RequeuingTimestamp",
    "Resources",
    "WaitForPodsReady",
    "apply_overrides",
    "configuration_from_mapping",
    "format_duration",
    "load_configuration",
    "overrides_from_env",
    "parse_bind_address",
    "parse_duration",
    "parse_duration_ns",
    "parse_override",
]
