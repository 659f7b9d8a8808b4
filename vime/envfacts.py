"""Environment facts of a host: python, package versions, CANN, devices and who occupies them.

Standard library only and runnable as a script, so `porter hosts check` can pipe this file
into any python on a host (`python3 - --json < envfacts.py`) before anything is shipped there.
`python -m vime.smoke` uses the same functions for its L0 level.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

# Distribution names whose versions matter for the Ascend stack (import name differs for some).
STACK_DISTRIBUTIONS = (
    "torch",
    "torch_npu",
    "transformers",
    "vllm",
    "vllm_ascend",
    "triton",
    "triton_ascend",
    "numpy",
    "safetensors",
)
ENV_PREFIXES = ("ASCEND_", "HCCL_", "LCCL_", "PYTORCH_", "TORCH_", "VLLM_", "RAY_", "HF_", "VIME_")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "SOC_VERSION", "LD_PRELOAD", "PIP_INDEX_URL")
# Toolkit homes: set_env.sh exports the first two; the rest are the usual install locations.
CANN_HOME_VARS = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")
CANN_DEFAULT_HOMES = (
    "/usr/local/Ascend/ascend-toolkit/latest",
    "/usr/local/Ascend/cann",
    "~/Ascend/ascend-toolkit/latest",
)
CANN_VERSION_FILES = (
    "version.cfg",
    "compiler/version.info",
    "runtime/version.info",
    "x86_64-linux/ascend_toolkit_install.info",
    "aarch64-linux/ascend_toolkit_install.info",
    "share/info/version.info",
)
DRIVER_VERSION_FILE = "/usr/local/Ascend/driver/version.info"
_VERSION_LINE = re.compile(r"^\s*(?:version|Version|toolkit_installed_version)\s*=\s*\[?([0-9][\w.+-]*)", re.M)


def _dist_version(name: str) -> str | None:
    for candidate in (name, name.replace("_", "-")):
        try:
            return metadata.version(candidate)
        except metadata.PackageNotFoundError:
            continue
    return None


def package_versions(names: tuple[str, ...] = STACK_DISTRIBUTIONS) -> dict[str, str | None]:
    return {name: _dist_version(name) for name in names}


def version_from_file(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = _VERSION_LINE.search(text)
    return match.group(1) if match else None


def cann_version(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The CANN toolkit version from its version files (no import needed), and where it was read."""
    environ = dict(os.environ if environ is None else environ)
    homes = [environ[v] for v in CANN_HOME_VARS if environ.get(v)]
    homes += [os.path.expanduser(h) for h in CANN_DEFAULT_HOMES]
    for home in homes:
        for rel in CANN_VERSION_FILES:
            found = version_from_file(Path(home) / rel)
            if found:
                return {"version": found, "source": str(Path(home) / rel)}
    return {"version": None, "source": None}


def _run(argv: list[str], timeout: float = 15.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


_NPU_PROC_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s*\|\s*(\d+)\s*\|\s*(\S[^|]*?)\s*\|\s*(\d+)\s*\|")
_NPU_DEVICE_ROW = re.compile(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*(OK|Warning|Alarm|Critical|\S+)\s*\|")


def parse_npu_smi(text: str) -> dict[str, Any]:
    """Devices and occupying processes from `npu-smi info` (its table layout, A2/A3)."""
    devices: list[dict[str, Any]] = []
    processes: list[dict[str, Any]] = []
    in_processes = False
    for line in text.splitlines():
        if "Process id" in line and "Process name" in line:
            in_processes = True
            continue
        if in_processes:
            row = _NPU_PROC_ROW.match(line)
            if row:
                processes.append(
                    {
                        "device": int(row.group(1)),
                        "chip": int(row.group(2)),
                        "pid": int(row.group(3)),
                        "process": row.group(4),
                        "memory_mb": int(row.group(5)),
                    }
                )
            continue
        row = _NPU_DEVICE_ROW.match(line)
        if row and row.group(2) not in ("Chip", "Name"):
            devices.append({"device": int(row.group(1)), "name": row.group(2), "health": row.group(3)})
    return {"devices": devices, "processes": processes}


def parse_nvidia_smi(gpus_csv: str, apps_csv: str) -> dict[str, Any]:
    devices, processes = [], []
    uuid_to_index: dict[str, int] = {}
    for line in gpus_csv.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            uuid_to_index[parts[1]] = int(parts[0])
            devices.append({"device": int(parts[0]), "name": parts[2], "health": "OK"})
    for line in apps_csv.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[1].isdigit():
            memory = re.sub(r"\D", "", parts[3])
            processes.append(
                {
                    "device": uuid_to_index.get(parts[0], -1),
                    "pid": int(parts[1]),
                    "process": parts[2],
                    "memory_mb": int(memory) if memory else None,
                }
            )
    return {"devices": devices, "processes": processes}


def device_facts() -> dict[str, Any]:
    """Which accelerator the host has and which processes occupy it (npu-smi, nvidia-smi, none)."""
    npu = _run(["npu-smi", "info"])
    if npu is not None:
        parsed = parse_npu_smi(npu)
        return {"kind": "npu", "tool": "npu-smi", **parsed}
    gpus = _run(["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"])
    if gpus is not None:
        apps = _run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader"])
        return {"kind": "cuda", "tool": "nvidia-smi", **parse_nvidia_smi(gpus, apps or "")}
    davinci = sorted(p.name for p in Path("/dev").glob("davinci[0-9]*"))
    if davinci:  # device nodes without npu-smi: typical inside a container without the binary bound
        return {"kind": "npu", "tool": None, "devices": [{"device": int(d[7:]), "name": d} for d in davinci], "processes": []}
    return {"kind": "cpu", "tool": None, "devices": [], "processes": []}


_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|PWD|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE", re.I)
_URL_CREDENTIALS = re.compile(r"(://[^/@:\s]+):[^/@\s]+@")


def relevant_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that shape the stack. Secret-looking ones report only that they are set,
    so a token never leaves the host (HF_TOKEN is an HF_ variable, PIP_INDEX_URL may carry a password)."""
    environ = dict(os.environ if environ is None else environ)
    out = {}
    for key, value in sorted(environ.items()):
        if key in ENV_NAMES or any(key.startswith(p) for p in ENV_PREFIXES):
            out[key] = "[REDACTED]" if _SECRET_NAME.search(key) else _URL_CREDENTIALS.sub(r"\1:[hidden]@", value)
    return out


def collect(with_devices: bool = True) -> dict[str, Any]:
    driver = version_from_file(Path(DRIVER_VERSION_FILE))
    return {
        "hostname": socket.gethostname(),
        "user": os.environ.get("USER") or os.environ.get("LOGNAME"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": {
            "version": platform.python_version(),
            "executable": sys.executable,
            "implementation": platform.python_implementation(),
        },
        "packages": package_versions(),
        "cann": cann_version(),
        "driver": {"version": driver},
        "devices": device_facts() if with_devices else {},
        "env": relevant_env(),
    }


if __name__ == "__main__":
    facts = collect(with_devices="--no-devices" not in sys.argv)
    print(json.dumps(facts, sort_keys=True) if "--json" in sys.argv else json.dumps(facts, indent=2, sort_keys=True))
