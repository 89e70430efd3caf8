"""The doctor's first check: the CPU and every CUDA device, and which ``trainer.precision`` each runs."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..foundation.provenance import cpu_info


def _memory_gib() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    return None


def describe_devices() -> list[dict]:
    """The CPU and every CUDA device: names, memory, and which ``trainer.precision`` each runs (bf16 native or
    emulated on the CPU; bf16, fp16 and TF32 on CUDA)."""
    import torch

    name, flags = cpu_info()
    native = sorted(flags & {"avx512_bf16", "amx_bf16"})
    cpu = {
        "kind": "cpu", "name": name, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "memory_gib": _memory_gib(), "mkldnn": torch.backends.mkldnn.is_available(),
        "bf16": "native" if native else "emulated", "bf16_flags": native,
        "precisions": {"32-true": True, "bf16-mixed": True, "16-mixed": False},
        "note": (f"bf16 in hardware ({', '.join(native)})" if native else
                 "no avx512_bf16/amx_bf16: bf16 is emulated (correct, slower than fp32)")
        + ("" if torch.backends.mkldnn.is_available() else "; oneDNN unavailable"),
    }
    devices = [cpu]
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            with torch.cuda.device(index):
                bf16 = bool(torch.cuda.is_bf16_supported())  # torch may count emulation (before Ampere) as support
            native = props.major >= 8  # Ampere and later: bf16 and TF32 in the tensor cores
            devices.append({
                "kind": "cuda", "index": index, "name": props.name, "capability": f"{props.major}.{props.minor}",
                "memory_gib": props.total_memory / 2**30, "multiprocessors": props.multi_processor_count,
                "bf16": "native" if bf16 and native else "emulated" if bf16 else "unsupported",
                "tf32_available": native,
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "precisions": {"32-true": True, "bf16-mixed": bf16, "16-mixed": True},
                "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                "note": "" if bf16 and native else "bf16 emulated: slow" if bf16 else
                "no bf16: bf16-mixed runs are skipped",
            })
    return devices
