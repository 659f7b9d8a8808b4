"""On-host smoke entry point: `python -m vime.smoke --level L0|L1|L2|L3 [--gates G1,G4] [--json]`.

Runs the levels up to the one asked for and prints one SmokeReport:
  L0 environment facts (python, packages, CANN from its version files, devices, env vars),
  L1 imports of the stack as present (torch, torch_npu, transformers, vllm, vllm_ascend, triton),
  L2 device operations checked against a CPU float64 reference,
  L3 the vime gates from the registry (`vime.gates`).
Progress goes to stderr, one line per check; with `--json` stdout carries the report as one
JSON line (the last line), so a caller can stream stderr and parse stdout.
Exit status: 0 every check passed or skipped, 1 a check failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from vime import envfacts
from vime.results import LEVELS, GateResult, SmokeReport

# Import order matters: torch_npu registers itself into an imported torch.
STACK_MODULES = ("torch", "torch_npu", "transformers", "vllm", "vllm_ascend", "triton")
# Relative error bounds against a float64 CPU reference, per dtype. Accelerators may run fp32
# matmuls in TF32/HF32 (10-bit mantissa), so their fp32 bound is looser than the CPU's.
REL_TOL = {"float32": 1e-3, "bfloat16": 3e-2, "float16": 5e-3}
CPU_FP32_REL_TOL = 1e-5
EXTRA_DTYPES = ("bfloat16", "float16")
COLLECTIVE_BACKEND = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}


def _progress(result: GateResult) -> None:
    detail = f" - {result.reason}" if result.reason else ""
    sys.stderr.write(f"vime.smoke: {result.gate} {result.verdict} ({result.duration_s:.2f} s){detail}\n")
    sys.stderr.flush()


def _check(
    gate: str, name: str, level: str, body: Callable[[], GateResult | tuple[str, dict, dict, str]],
    *, device: str = "cpu", dtype: str = "float32",
) -> GateResult:
    """Run one check; an exception becomes an `error` result that carries the traceback."""
    start = time.perf_counter()
    try:
        out = body()
        if isinstance(out, GateResult):
            result = out
        else:
            verdict, values, thresholds, reason = out
            result = GateResult(gate, name, level, verdict, values, thresholds, device, dtype, 0.0, reason)
    except Exception as exc:  # noqa: BLE001 - the traceback is the finding
        result = GateResult(
            gate, name, level, "error", device=device, dtype=dtype,
            reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:300], traceback=traceback.format_exc(),
        )
    result.duration_s = round(time.perf_counter() - start, 4)
    _progress(result)
    return result


# ---------------------------------------------------------------- L0


def level0(facts: dict[str, Any], expect_device: str | None) -> list[GateResult]:
    py = facts["python"]
    packages = facts["packages"]
    devices = facts["devices"]
    out = [
        _check("L0.python", "python interpreter", "L0", lambda: (
            "pass" if sys.version_info >= (3, 9) else "fail",
            {"version": py["version"], "executable": py["executable"]}, {"min_version": "3.9"},
            "" if sys.version_info >= (3, 9) else "python older than 3.9",
        )),
        _check("L0.torch", "torch installed", "L0", lambda: (
            "pass" if packages.get("torch") else "fail",
            {"version": packages.get("torch")}, {},
            "" if packages.get("torch") else "torch is not installed in this python",
        )),
    ]

    def cann() -> tuple[str, dict, dict, str]:
        info = facts["cann"]
        wants_npu = devices.get("kind") == "npu" or bool(packages.get("torch_npu")) or expect_device == "npu"
        if not wants_npu:
            return "skip", dict(info), {}, "no NPU and no torch_npu on this host"
        if info.get("version"):
            return "pass", dict(info), {}, ""
        return "fail", dict(info), {}, "CANN version files not found: source the toolkit's set_env.sh in the host profile"

    out.append(_check("L0.cann", "CANN toolkit", "L0", cann))

    def device_check() -> tuple[str, dict, dict, str]:
        kind = devices.get("kind", "cpu")
        busy = sorted({p["device"] for p in devices.get("processes", [])})
        values = {"kind": kind, "count": len(devices.get("devices", [])), "busy_devices": busy,
                  "processes": devices.get("processes", [])}
        if expect_device and expect_device != kind:
            return "fail", values, {"kind": expect_device}, f"expected a {expect_device} host, found {kind}"
        reason = f"occupied by other processes: devices {busy}" if busy else ""
        return "pass", values, ({"kind": expect_device} if expect_device else {}), reason

    out.append(_check("L0.devices", "devices and occupancy", "L0", device_check))
    return out


# ---------------------------------------------------------------- L1


def _installed_version(module: str) -> str | None:
    return envfacts.package_versions((module,)).get(module)


def _version_matches(installed: str, pinned: str) -> bool:
    # "2.13.0+cpu" satisfies a pin of "2.13.0": the local label names the build, not the release.
    return installed == pinned or installed.split("+", 1)[0] == pinned.split("+", 1)[0]


def level1(stack: dict[str, Any]) -> list[GateResult]:
    out: list[GateResult] = []
    for module in STACK_MODULES:
        def body(module: str = module) -> tuple[str, dict, dict, str]:
            if importlib.util.find_spec(module) is None:
                return "skip", {}, {}, "not installed"
            imported = importlib.import_module(module)
            version = getattr(imported, "__version__", None) or _installed_version(module)
            return "pass", {"version": str(version) if version else None}, {}, ""

        out.append(_check(f"L1.import.{module}", f"import {module}", "L1", body))

    def vime_body() -> tuple[str, dict, dict, str]:
        import vime

        loaded = []
        for sub in ("vime.platform", "vime.gates"):
            if importlib.util.find_spec(sub) is not None:
                importlib.import_module(sub)
                loaded.append(sub)
        return "pass", {"version": vime.__version__, "path": str(Path(vime.__file__).parent), "modules": loaded}, {}, ""

    out.append(_check("L1.import.vime", "import vime", "L1", vime_body))
    return out + pin_checks(stack)


def pin_checks(stack: dict[str, Any]) -> list[GateResult]:
    """One check per upstream version the stack pins: is that release installed here?"""
    out: list[GateResult] = []
    for upstream, pin in sorted((stack.get("upstreams") or {}).items()):
        wanted = pin.get("version") if isinstance(pin, dict) else pin
        if not wanted:
            continue

        def pin_body(upstream: str = upstream, wanted: str = str(wanted)) -> tuple[str, dict, dict, str]:
            found = _installed_version(upstream)
            if found is None:
                return "fail", {"installed": None}, {"version": wanted}, f"{upstream} is pinned to {wanted} but not installed"
            ok = _version_matches(found, wanted)
            return ("pass" if ok else "fail"), {"installed": found}, {"version": wanted}, (
                "" if ok else f"{upstream} {found} installed, stack pins {wanted}"
            )

        out.append(_check(f"L1.stack.{upstream}", f"{upstream} matches the stack pin", "L1", pin_body))
    for plugin, pin in sorted((stack.get("forks") or {}).items()):
        if isinstance(pin, dict) and pin.get("commit"):
            out.append(_check(f"L1.fork.{plugin}", f"{plugin} is the pinned fork commit", "L1",
                              lambda plugin=plugin, pin=pin: fork_pin_check(plugin, pin)))
    return out


def installed_commit(distribution: str) -> tuple[str | None, str]:
    """(commit, where it was read) for an installed distribution: pip records it in
    direct_url.json for `pip install git+URL@REF`; an install from a local checkout (editable
    or not) answers through `git rev-parse HEAD` there. (None, "") when nothing records it."""
    import subprocess
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    try:
        text = metadata.distribution(distribution).read_text("direct_url.json")
        info = json.loads(text) if text else {}
    except (metadata.PackageNotFoundError, ValueError):
        return None, ""
    commit = (info.get("vcs_info") or {}).get("commit_id")
    if commit:
        return str(commit), "direct_url.json"
    url = urlparse(str(info.get("url", "")))
    if url.scheme == "file":
        checkout = unquote(url.path)
        try:
            done = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None, ""
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip(), f"git checkout {checkout}"
    return None, ""


def fork_pin_check(plugin: str, pin: dict[str, Any]) -> tuple[str, dict, dict, str]:
    """Is the fork commit the stack pins the one installed here? `distribution:` in the pin names
    the installed package when it differs from the plugin name."""
    dist = str(pin.get("distribution") or plugin)
    wanted = str(pin["commit"])
    thresholds = {"commit": wanted, "branch": pin.get("branch")}
    version = _installed_version(dist)
    if version is None:
        return "fail", {"installed": None}, thresholds, (
            f"{plugin} is pinned to {pin.get('branch')} @ {wanted[:12]} but {dist} is not installed"
        )
    commit, source = installed_commit(dist)
    values = {"installed": version, "installed_commit": commit, "source": source or None}
    if commit is None:
        return "skip", values, thresholds, (
            f"{dist} {version} does not record its commit: install it from the fork "
            "(pip install git+URL@COMMIT, or from a checkout) to verify the pin"
        )
    ok = commit.startswith(wanted) or wanted.startswith(commit)
    return ("pass" if ok else "fail"), values, thresholds, (
        "" if ok else f"{dist} is installed from {commit[:12]}, the stack pins {pin.get('branch')} @ {wanted[:12]}"
    )


# ---------------------------------------------------------------- L2


def detect_device(requested: str | None) -> str:
    """`--device`, then VIME_ACCELERATOR / VIME_TEST_DEVICE, then npu, cuda, cpu."""
    choice = requested or os.environ.get("VIME_ACCELERATOR") or os.environ.get("VIME_TEST_DEVICE")
    if choice:
        return choice
    import torch

    if importlib.util.find_spec("torch_npu") is not None:
        try:
            importlib.import_module("torch_npu")
            if torch.npu.is_available():  # type: ignore[attr-defined]
                return "npu"
        except Exception:  # noqa: BLE001 - L1 reports the import failure with its traceback
            pass
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def _synchronize(device: str) -> None:
    import torch

    backend = getattr(torch, device, None) if device != "cpu" else None
    if backend is not None and hasattr(backend, "synchronize"):
        backend.synchronize()


def _rel_err(got: Any, ref: Any) -> float:
    got64 = got.detach().to("cpu").double()
    scale = float(ref.abs().max()) or 1.0
    return float((got64 - ref).abs().max()) / scale


def level2(device: str) -> list[GateResult]:
    import torch

    gen = torch.Generator().manual_seed(1234)
    a = torch.randn(64, 128, generator=gen)
    b = torch.randn(128, 32, generator=gen)
    x = torch.randn(16, 256, generator=gen)
    weight = torch.randn(256, generator=gen)
    bias = torch.randn(256, generator=gen)
    out: list[GateResult] = []

    def roundtrip() -> tuple[str, dict, dict, str]:
        back = a.to(device).to("cpu")
        equal = bool(torch.equal(back, a))
        return ("pass" if equal else "fail"), {"bitwise_equal": equal}, {"bitwise_equal": True}, (
            "" if equal else "host -> device -> host changed the data"
        )

    out.append(_check("L2.roundtrip", "tensor round trip", "L2", roundtrip, device=device))

    def compared(op: Callable[..., Any], ref: Any, dtype_name: str, *inputs: Any) -> tuple[str, dict, dict, str]:
        dtype = getattr(torch, dtype_name)
        got = op(*(t.to(device=device, dtype=dtype) for t in inputs))
        _synchronize(device)
        err = _rel_err(got, ref)
        tol = CPU_FP32_REL_TOL if device == "cpu" and dtype_name == "float32" else REL_TOL[dtype_name]
        ok = err <= tol
        return ("pass" if ok else "fail"), {"max_rel_err": err}, {"max_rel_err": tol}, (
            "" if ok else f"relative error {err:.3g} above {tol:g}"
        )

    ref_mm = a.double() @ b.double()
    ref_sm = torch.softmax(x.double(), dim=-1)
    ref_ln = torch.nn.functional.layer_norm(x.double(), (256,), weight.double(), bias.double())
    out.append(_check("L2.matmul", "matmul vs CPU reference", "L2",
                      lambda: compared(torch.matmul, ref_mm, "float32", a, b), device=device))
    out.append(_check("L2.softmax", "softmax vs CPU reference", "L2",
                      lambda: compared(lambda t: torch.softmax(t, dim=-1), ref_sm, "float32", x), device=device))
    out.append(_check("L2.layernorm", "layer norm vs CPU reference", "L2",
                      lambda: compared(lambda t, w, c: torch.nn.functional.layer_norm(t, (256,), w, c),
                                       ref_ln, "float32", x, weight, bias), device=device))
    for dtype_name in EXTRA_DTYPES:
        out.append(_check(f"L2.dtype.{dtype_name}", f"{dtype_name} matmul", "L2",
                          lambda dtype_name=dtype_name: compared(torch.matmul, ref_mm, dtype_name, a, b),
                          device=device, dtype=dtype_name))
    out.append(_check("L2.collective", "all_reduce on one rank", "L2", lambda: collective(device), device=device))
    return out


def collective(device: str) -> tuple[str, dict, dict, str]:
    import torch
    import torch.distributed as dist

    backend = COLLECTIVE_BACKEND.get(device, "gloo")
    if dist.is_initialized():
        return "skip", {"backend": backend}, {}, "a process group is already initialised"
    backend_module = getattr(torch, device, None) if device != "cpu" else None
    if backend_module is not None and hasattr(backend_module, "set_device"):
        backend_module.set_device(0)  # nccl/hccl bind a rank to a device before the first collective
    with tempfile.TemporaryDirectory(prefix="vime-smoke-") as tmp:
        # A file store needs no port: nothing to collide with on a shared host.
        dist.init_process_group(backend, init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            t = torch.arange(8, dtype=torch.float32, device=device)
            dist.all_reduce(t)
            ok = bool(torch.equal(t.to("cpu"), torch.arange(8, dtype=torch.float32)))
        finally:
            dist.destroy_process_group()
    return ("pass" if ok else "fail"), {"backend": backend, "world_size": 1, "sum_matches": ok}, {"sum_matches": True}, (
        "" if ok else "all_reduce on one rank changed the tensor"
    )


# ---------------------------------------------------------------- L3


def _gate_ids(registry: Any) -> list[str]:
    if isinstance(registry, dict):
        return [str(k) for k in registry]
    return [g if isinstance(g, str) else str(getattr(g, "id", getattr(g, "gate", g))) for g in registry]


def level3(gates: list[str] | None, device: str | None, dtype: str | None) -> list[GateResult]:
    try:
        registry = importlib.import_module("vime.gates")
        run_gate = registry.run_gate
        known = _gate_ids(registry.GATES)
    except ModuleNotFoundError as exc:
        if exc.name not in ("vime.gates", "vime"):
            return [_import_error(exc)]
        ids = gates or ["L3.gates"]
        return [
            _check(g, "vime gate", "L3", lambda: ("skip", {}, {}, "gate registry not available")) for g in ids
        ]
    except Exception as exc:  # noqa: BLE001 - a broken registry is a finding, with its traceback
        return [_import_error(exc)]

    results = []
    for gate in gates or known:
        if gate not in known:
            results.append(_check(gate, "vime gate", "L3", lambda gate=gate: (
                "error", {}, {}, f"unknown gate {gate}; known: {', '.join(known)}")))
            continue

        def body(gate: str = gate) -> GateResult:
            got = run_gate(gate, device=device, dtype=dtype)
            result = got if isinstance(got, GateResult) else GateResult.from_dict(dict(got))
            result.level = "L3"
            return result

        results.append(_check(gate, "vime gate", "L3", body, device=device or "auto", dtype=dtype or "auto"))
    return results


def _import_error(exc: BaseException) -> GateResult:
    result = GateResult(
        "L3.gates", "vime gate registry", "L3", "error",
        reason=f"importing vime.gates failed: {type(exc).__name__}: {exc}"[:300],
        traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    )
    _progress(result)
    return result


# ---------------------------------------------------------------- entry point


def load_stack(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    text = Path(path).read_text(encoding="utf-8")
    if path.endswith(".json"):
        return json.loads(text)
    import yaml  # only when asked for a YAML stack file

    return yaml.safe_load(text) or {}


def run(level: str, gates: list[str] | None = None, *, stack: dict[str, Any] | None = None,
        device: str | None = None, dtype: str | None = None, expect_device: str | None = None) -> SmokeReport:
    start = time.perf_counter()
    stack = stack or {}
    upto = LEVELS.index(level)
    facts = envfacts.collect()
    results = level0(facts, expect_device)
    if upto >= 1:
        results += level1(stack)
    torch_ok = any(r.gate == "L1.import.torch" and r.verdict == "pass" for r in results)
    if upto >= 2:
        if torch_ok:
            chosen = detect_device(device)
            facts["smoke_device"] = chosen
            results += level2(chosen)
        else:
            results.append(_check("L2.device", "device operations", "L2",
                                  lambda: ("skip", {}, {}, "torch does not import (see L1)")))
    if upto >= 3:
        if torch_ok:
            results += level3(gates, device, dtype)
        else:  # every gate would fail the same way; L0/L1 already say why
            results.append(_check("L3.gates", "vime gates", "L3",
                                  lambda: ("skip", {}, {}, "torch does not import (see L1)")))
    return SmokeReport(level, results, environment=facts, stack=stack, duration_s=round(time.perf_counter() - start, 3))


def render_text(report: SmokeReport) -> str:
    lines = [f"vime smoke {report.level}: {'OK' if report.ok else 'FAILED'} in {report.duration_s:.1f} s"]
    for r in report.results:
        values = ", ".join(f"{k}={_short(v)}" for k, v in r.values.items() if not isinstance(v, (list, dict)))
        lines.append(f"  {r.verdict:5}  {r.gate:24} {values}{'  (' + r.reason + ')' if r.reason else ''}")
    return "\n".join(lines)


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vime.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--level", default="L3", choices=LEVELS)
    parser.add_argument("--gates", default="", help="comma-separated L3 gate ids (implies --level L3)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")
    parser.add_argument("--stack", help="stack file (JSON or YAML) to report and check pins against")
    parser.add_argument("--device", help="cpu, cuda or npu (default: detect)")
    parser.add_argument("--dtype", help="dtype for the L3 gates (default: each gate's own)")
    parser.add_argument("--expect-device", choices=("cpu", "cuda", "npu"), help="fail L0 on another kind")
    args = parser.parse_args(argv)
    gates = [g.strip() for g in args.gates.split(",") if g.strip()] or None
    level = "L3" if gates else args.level
    report = run(level, gates, stack=load_stack(args.stack), device=args.device, dtype=args.dtype,
                 expect_device=args.expect_device)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), separators=(",", ":"), default=str) + "\n")
    else:
        sys.stdout.write(render_text(report) + "\n")
    sys.stdout.flush()
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
