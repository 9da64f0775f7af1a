"""GPU presence, device nodes and peaks without torch; ROCm paths on simulated device nodes.

Covers: tritonforge.hardware on a fake /dev (NVIDIA, AMD, an integrated display GPU only,
nothing), the visibility variables, the sandbox's check that `nobody` can open the nodes (with
simulated character devices), the worker environment's GPU pinning for CUDA and HIP, the HIP
error texts and the ROCm abort message in the fault classification, and the per-device roofline.
What these tests cannot show: that an AMD GPU runs the evaluator (no AMD hardware here).
"""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest

from tritonforge.hardware import (
    FASTEST,
    gpu_device_nodes,
    gpu_presence,
    gpu_vendor,
    peaks_for,
    visible_list,
)


def fake_dev(root: Path, *names: str) -> Path:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return root


def test_nvidia_nodes(tmp_path: Path) -> None:
    dev = fake_dev(tmp_path, "nvidiactl", "nvidia0", "nvidia-uvm", "null", "dri/card0")
    nodes = [Path(n).relative_to(dev).as_posix() for n in gpu_device_nodes(dev)]
    assert nodes == ["nvidia-uvm", "nvidia0", "nvidiactl"]  # a display card alone is not AMD
    assert gpu_vendor(dev) == "nvidia"


def test_amd_nodes_need_kfd(tmp_path: Path) -> None:
    dev = fake_dev(tmp_path, "kfd", "dri/card0", "dri/card1", "dri/renderD128", "dri/by-path/x")
    nodes = [Path(n).relative_to(dev).as_posix() for n in gpu_device_nodes(dev)]
    assert nodes == ["kfd", "dri/card0", "dri/card1", "dri/renderD128"]
    assert gpu_vendor(dev) == "amd"
    display_only = fake_dev(tmp_path / "other", "dri/card0", "dri/renderD128")
    assert gpu_device_nodes(display_only) == [] and gpu_vendor(display_only) is None


def test_presence_and_visibility(tmp_path: Path) -> None:
    none = fake_dev(tmp_path / "none", "null")
    assert not gpu_presence(none, {}).available
    assert "this machine has no GPU" in gpu_presence(none, {}).reason
    amd = fake_dev(tmp_path / "amd", "kfd", "dri/renderD128")
    assert gpu_presence(amd, {}).available and gpu_presence(amd, {}).vendor == "amd"
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        hidden = gpu_presence(amd, {var: ""})
        assert not hidden.available and var in hidden.reason
    assert gpu_presence(amd, {"HIP_VISIBLE_DEVICES": "1"}).available
    assert visible_list({"X": " 2, 3 "}, "X") == ["2", "3"] and visible_list({}, "X") is None
    assert visible_list({"X": "-1"}, "X") == []


def _chr_of(mode: int, gid: int, uid: int = 0) -> os.stat_result:
    return os.stat_result((stat.S_IFCHR | mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))


def test_sandbox_grants_the_device_groups_to_nobody_never_root() -> None:
    from tritonforge.evaluation.sandbox.identity import NOBODY, device_access

    nodes = {
        "/dev/kfd": _chr_of(0o666, 0),
        "/dev/dri/renderD128": _chr_of(0o660, 44),  # group-only: its group is granted
        "/dev/nvidia0": _chr_of(0o660, 44),
        "/dev/nvidia1": _chr_of(0o660, 27),
        "/dev/own": _chr_of(0o600, 0, NOBODY),
        "/dev/rootonly": _chr_of(0o600, 0),  # nobody cannot open it through any group
    }
    access = device_access(["/dev/kfd", "/dev/nvidia0", "/dev/nvidia1", "/dev/own"], nodes.get)
    assert access.groups == [44, 27] and access.unreachable == []
    access = device_access([*nodes], nodes.get)
    assert access.unreachable == ["/dev/rootonly"]
    caps = {  # MIG capability nodes need read only; an unreadable one is skipped, not refused
        "/dev/nvidia-caps/nvidia-cap1": _chr_of(0o400, 0),
        "/dev/nvidia-caps/nvidia-cap2": _chr_of(0o444, 0),
    }
    access = device_access([*caps], caps.get)
    assert access.skipped == ["/dev/nvidia-caps/nvidia-cap1"] and not access.unreachable
    assert device_access(["/dev/missing"]).unreachable == []  # absent nodes do not block


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_sandbox_check_on_real_character_devices(tmp_path: Path) -> None:
    from tritonforge.evaluation.sandbox.identity import device_access

    kfd, render, private = tmp_path / "kfd", tmp_path / "renderD128", tmp_path / "private"
    try:
        for node, mode in ((kfd, 0o666), (render, 0o660), (private, 0o600)):
            os.mknod(node, stat.S_IFCHR | mode, os.makedev(1, 3))  # the numbers of /dev/null
            os.chmod(node, mode)
    except PermissionError:
        pytest.skip("this filesystem refuses device nodes")
    os.chown(render, 0, 44)
    access = device_access([str(kfd), str(render)])
    assert access.groups == [44] and not access.unreachable
    assert device_access([str(private)]).unreachable == [str(private)]


def test_worker_env_pins_cuda_and_hip_and_passes_rocm_settings() -> None:
    from tritonforge.evaluation.judge.workerenv import gpu_env

    env = gpu_env(
        1,
        {
            "HIP_VISIBLE_DEVICES": "4,5",
            "ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5",
            "HSA_OVERRIDE_GFX_VERSION": "9.4.2",
            "SECRET_TOKEN": "x",
        },
    )
    assert env["HIP_VISIBLE_DEVICES"] == "5" and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert (
        env["ROCR_VISIBLE_DEVICES"] == "0,1,2,3,4,5" and env["HSA_OVERRIDE_GFX_VERSION"] == "9.4.2"
    )
    assert "SECRET_TOKEN" not in env
    nvidia = gpu_env(0, {"CUDA_VISIBLE_DEVICES": "3,7"})
    assert nvidia["CUDA_VISIBLE_DEVICES"] == "3" and "HIP_VISIBLE_DEVICES" not in nvidia


def test_cpu_worker_gets_no_rocm_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonforge.evaluation.judge.workerenv import base_env

    monkeypatch.setenv("HSA_OVERRIDE_GFX_VERSION", "9.4.2")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
    env = base_env("cpu")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["TRITON_INTERPRET"] == "1"
    assert not any(k.startswith(("HSA_", "HIP_", "ROCR_")) for k in env)


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("HIP error: an illegal memory access was encountered", "illegal_memory_access"),
        ("hipErrorIllegalAddress", "illegal_memory_access"),
        ("HIP out of memory. Tried to allocate 2.00 GiB", "out_of_resources"),
        ("hipErrorOutOfMemory", "out_of_resources"),
        ("HIP error: invalid device function", "compile_error"),
        (
            "hipErrorNoBinaryForGpu: Unable to find code object for all current devices",
            "compile_error",
        ),
        ("CUDA error: an illegal memory access was encountered", "illegal_memory_access"),
        ("CUDA out of memory.", "out_of_resources"),
        ("some ordinary bug", "runtime_error"),
    ],
)
def test_hip_and_cuda_error_texts(text: str, status: str) -> None:
    from tritonforge.evaluation.sandbox.classify import classify_exception

    assert classify_exception(RuntimeError(text), "forward").value == status


def test_rocm_abort_with_a_gpu_memory_fault_is_an_illegal_memory_access() -> None:
    from tritonforge.evaluation.judge.forkserver import ChildExit
    from tritonforge.evaluation.judge.session import describe_exit

    ended = ChildExit(pid=1, code=128 + int(signal.SIGABRT))
    tail = "Memory access fault by GPU node-2 (Agent handle: 0x55) on address 0x7f. Reason: Page not present"
    assert describe_exit(ended, lambda: tail)[0] == "illegal_memory_access"
    assert describe_exit(ended, lambda: "abort")[0] == "crash"
    assert describe_exit(ended)[0] == "crash"


def test_peaks_by_device_name() -> None:
    from tritonforge.evaluation.judge.timing import roofline_ms

    assert peaks_for("NVIDIA H200").bandwidth == 4.8e12
    assert peaks_for("NVIDIA H100 80GB HBM3").name.startswith("NVIDIA H100")
    assert peaks_for("AMD Instinct MI300X").name == "AMD Instinct MI300X"
    assert peaks_for("Some Future GPU") is FASTEST and peaks_for(None) is FASTEST
    h200 = peaks_for("NVIDIA H200")
    assert roofline_ms(None, 4.8e9, h200) == pytest.approx(1.0)  # 4.8 GB at 4.8 TB/s = 1 ms
    assert roofline_ms(990e9, None, h200) == pytest.approx(1.0)
    assert roofline_ms(None, 4.8e9) < 1.0  # unknown device: the fastest bound, never too high
