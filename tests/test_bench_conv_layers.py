"""``bench.conv_layers``: the layers it times follow from the architectures, and each row holds every
formulation that computes the layer, their errors and the bounds the layer is held to."""

from __future__ import annotations

import numpy as np

from bench import conv_layers
from eqsat.common_convs import ConvLayer
from eqsat.frontend.builder import Builder
from eqsat.ops.conv import ALGORITHMS, WINOGRAD


def test_resnets_rows_are_its_stride_1_3x3_layers_and_mobilenets_every_layer():
    resnet = conv_layers.layers("resnet18")
    assert [(layer.size, layer.channels_in) for layer in resnet] == [(56, 64), (28, 128), (14, 256), (7, 512)]
    mobilenet = conv_layers.layers("mobilenet_v2")
    assert len(set(mobilenet)) == len(mobilenet)
    assert any(layer.groups == layer.channels_in > 1 for layer in mobilenet)  # depthwise
    assert any(layer.kernel == 1 for layer in mobilenet)


def test_a_row_times_every_formulation_of_its_layer_against_its_bounds():
    bounds = {"peak_gflops": 10.0, "gbps": 1.0}
    dense = conv_layers.measure(ConvLayer(8, 8, 3, 1, 6), 1, "NHWC", 1, **bounds)
    assert set(dense["seconds"]) == {*ALGORITHMS, *WINOGRAD}
    depthwise = conv_layers.measure(ConvLayer(8, 8, 3, 2, 6, groups=8), 2, "NCHW", 1, **bounds)
    assert set(depthwise["seconds"]) == set(ALGORITHMS)  # Winograd computes one-group stride-1 convs only
    for row in (dense, depthwise):
        assert max(row["max_abs_error"].values()) < 1e-5 * row["output_scale"]
        assert row["arithmetic_bound_s"] > 0 and row["traffic_bound_s"] > 0
        larger = "arithmetic" if row["arithmetic_bound_s"] >= row["traffic_bound_s"] else "memory traffic"
        assert row["bound"] == larger
    # 6x6 output of 8 channels by 8x3x3 taps, twice a multiply-add, at 10 GFLOP/s
    assert dense["arithmetic_bound_s"] == 2.0 * 6 * 6 * 8 * 8 * 9 / 10e9


def test_a_programs_layers_are_its_distinct_convs_counted():
    b = Builder()
    x = b.input("x", (1, 8, 16, 16))
    w = b.param("w", (8, 8, 3, 3), data=np.ones((8, 8, 3, 3)))
    depthwise = b.param("d", (8, 1, 3, 3), data=np.ones((8, 1, 3, 3)))
    y = b.conv2d(b.conv2d(x, w, padding=(1, 1, 1, 1)), w, padding=(1, 1, 1, 1))
    y = b.conv2d(y, depthwise, strides=(2, 2), padding=(1, 1, 1, 1), groups=8)
    valid = b.conv2d(y, w)  # no padding: not a SAME conv, which a ConvLayer describes
    found = conv_layers.program_layers(b.build(valid))
    assert found == {ConvLayer(8, 8, 3, 1, 16): 2, ConvLayer(8, 8, 3, 2, 16, groups=8): 1}
