"""On a GPU machine: torch-free GPU detection agrees with torch, and the roofline table knows
the device (for the H200 of the lent machine: 4.8 TB/s, 990 TFLOP/s bf16)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"),
]


def test_device_nodes_and_presence_agree_with_torch() -> None:
    from tritonforge.hardware import gpu_device_nodes, gpu_presence

    presence = gpu_presence()
    assert presence.available, presence.reason
    assert gpu_device_nodes()
    assert presence.vendor == ("amd" if torch.version.hip else "nvidia")


def test_the_roofline_table_knows_this_device() -> None:
    from tritonforge.evaluation.judge.timing import device_peaks
    from tritonforge.hardware import FASTEST

    peaks = device_peaks("cuda:0")
    name = torch.cuda.get_device_name(0)
    assert peaks is not FASTEST, f"add {name!r} to hardware.DEVICE_PEAKS"
    if "H200" in name:
        assert (peaks.bandwidth, peaks.bf16_flops) == (4.8e12, 990e12)
