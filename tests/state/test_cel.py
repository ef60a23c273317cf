"""DRA selectors through cel-expr-python, checked against Kubernetes' CEL semantics
(k8s.io/dynamic-resource-allocation/cel, apiserver quantity and semver libraries)."""

from __future__ import annotations

import pytest

from atoll.engine.devices import Device, DeviceId, DeviceSelectorError, Version
from atoll.state.cel import SelectorCompileError, SelectorCompiler

GI = 2**30


def _gpu(*, memory_gi: int = 80, driver_version: str = "570.124.6", generation: int = 1) -> Device:
    return Device(
        id=DeviceId("gpu.nvidia.com/node-0/gpu-0"),
        driver="gpu.nvidia.com",
        pool="node-0",
        name="gpu-0",
        generation=generation,
        attributes={
            "gpu.nvidia.com/productName": "NVIDIA H100 80GB HBM3",
            "gpu.nvidia.com/type": "gpu",
            "gpu.nvidia.com/index": 3,
            "gpu.nvidia.com/driverVersion": Version(driver_version),
            "gpu.nvidia.com/mig": False,
            "resource.kubernetes.io/pcieRoot": "pci0000:01",
        },
        capacity={"gpu.nvidia.com/memory": memory_gi * GI * 1000},
    )


@pytest.fixture(scope="module")
def cel() -> SelectorCompiler:
    return SelectorCompiler()


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param("device.driver == 'gpu.nvidia.com'", True, id="driver"),
        pytest.param(
            "device.driver == 'gpu.nvidia.com'"
            " && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            True,
            id="nvidia-device-class",
        ),
        pytest.param('device.attributes["gpu.nvidia.com"].index >= 3', True, id="int-attribute"),
        pytest.param('!device.attributes["gpu.nvidia.com"].mig', True, id="bool-attribute"),
        pytest.param(
            'device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:01"',
            True,
            id="standard-domain",
        ),
        pytest.param(
            'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
            True,
            id="quantity-compareTo",
        ),
        pytest.param(
            'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("80Gi"))',
            False,
            id="quantity-equal-is-not-greater",
        ),
        pytest.param('quantity("50M").isLessThan(quantity("50Mi"))', True, id="50M-below-50Mi"),
        pytest.param('quantity("1500m").isInteger()', False, id="milli-not-integer"),
        pytest.param('quantity("2k").asInteger() == 2000', True, id="asInteger"),
        pytest.param('isQuantity("1.5Gi") && !isQuantity("one")', True, id="isQuantity"),
        pytest.param(
            'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("570.0.0"))',
            True,
            id="semver-attribute",
        ),
        pytest.param('semver("1.10.0").compareTo(semver("1.9.0")) > 0', True, id="semver-numeric"),
        pytest.param(
            'semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True, id="prerelease-lower"
        ),
        pytest.param(
            'semver("2.3.4").major() == 2 && semver("2.3.4").patch() == 4', True, id="parts"
        ),
        pytest.param('has(device.attributes["gpu.nvidia.com"].uuid)', False, id="has-missing-key"),
        pytest.param(
            'device.attributes["gpu.nvidia.com"].?uuid.orValue("none") == "none"',
            True,
            id="optional-orValue",
        ),
        pytest.param('"island" in device.attributes["gpu.atoll.dev"]', False, id="unknown-domain"),
        pytest.param(
            'device.attributes["gpu.nvidia.com"].productName.lowerAscii().startsWith("nvidia h")',
            True,
            id="strings-extension",
        ),
        pytest.param("cel.bind(q, quantity('1Gi'), q.sign() == 1)", True, id="bind"),
    ],
)
def test_selectors_evaluate_like_kubernetes(
    cel: SelectorCompiler, expression: str, expected: bool
) -> None:
    assert cel.compile(expression)(_gpu()) is expected


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param('device.attributes["gpu.nvidia.com"].uuid == "x"', id="missing-key"),
        pytest.param('quantity("lots") == quantity("1")', id="bad-quantity"),
        pytest.param('semver("1.2") == semver("1.2.0")', id="bad-semver"),
        pytest.param('device.attributes["gpu.nvidia.com"].index', id="not-a-bool"),
    ],
)
def test_runtime_errors_are_errors_not_false(cel: SelectorCompiler, expression: str) -> None:
    with pytest.raises(DeviceSelectorError) as err:
        cel.compile(expression)(_gpu())
    assert err.value.expression == expression


def test_an_error_short_circuited_by_or_is_no_error(cel: SelectorCompiler) -> None:
    assert cel.compile('device.attributes["gpu.nvidia.com"].uuid == "x" || true')(_gpu())


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("device.attributes[", id="syntax"),
        pytest.param("quantity(1) == 1", id="type-check"),
        pytest.param("x" * 10241, id="too-long"),
    ],
)
def test_compile_errors_are_reported_at_compile_time(
    cel: SelectorCompiler, expression: str
) -> None:
    with pytest.raises(SelectorCompileError):
        cel.compile(expression)


def test_each_expression_compiles_once_and_results_follow_the_generation(
    cel: SelectorCompiler,
) -> None:
    expr = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("64Gi")) >= 0'
    sel = cel.compile(expr)
    assert cel.compile(expr) is sel
    assert sel(_gpu(memory_gi=80, generation=1))
    # the same device republished with less memory in a newer pool generation
    assert not sel(_gpu(memory_gi=40, generation=2))
    assert sel.results[(DeviceId("gpu.nvidia.com/node-0/gpu-0"), 1)] is True
    cel.forget({"gpu.nvidia.com/node-0/gpu-0": 2})
    assert (DeviceId("gpu.nvidia.com/node-0/gpu-0"), 1) not in sel.results
