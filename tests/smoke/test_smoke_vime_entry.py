"""`python -m vime.smoke`: the on-host entry point, its levels and its JSON contract."""

from __future__ import annotations

import json
import subprocess
import sys
import types


from vime import envfacts
from vime import smoke as vsmoke
from vime.results import GateResult, SmokeReport


def test_cli_json_contract_and_progress():
    """Standalone (no porter): one JSON line on stdout, one progress line per check on stderr.
    L0 keeps it quick; the L2/L3 content is checked by the end-to-end runs."""
    done = subprocess.run([sys.executable, "-m", "vime.smoke", "--level", "L0", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = SmokeReport.from_dict(json.loads(done.stdout.strip().splitlines()[-1]))
    assert report.level == "L0" and report.ok
    assert [r.gate for r in report.results] == ["L0.python", "L0.torch", "L0.cann", "L0.devices"]
    progress = [l for l in done.stderr.splitlines() if l.startswith("vime.smoke: ")]
    assert len(progress) == len(report.results)
    assert report.environment["python"]["version"].count(".") == 2
    text = subprocess.run([sys.executable, "-m", "vime.smoke", "--level", "L0"], capture_output=True, text=True, timeout=60)
    assert text.returncode == 0 and text.stdout.startswith("vime smoke L0: OK")
    assert subprocess.run([sys.executable, "-m", "vime.smoke", "--level", "L7"], capture_output=True).returncode == 2


def test_l3_without_registry_is_skip_never_pass(monkeypatch):
    monkeypatch.setitem(sys.modules, "vime.gates", None)  # import fails with ModuleNotFoundError
    results = vsmoke.level3(["G1", "G4"], None, None)
    assert [r.gate for r in results] == ["G1", "G4"]
    assert all(r.verdict == "skip" and r.reason == "gate registry not available" for r in results)
    assert vsmoke.level3(None, None, None)[0].verdict == "skip"


def test_l3_uses_registry_and_turns_crashes_into_errors(monkeypatch):
    calls = []

    def run_gate(gate_id, device=None, dtype=None):
        calls.append((gate_id, device, dtype))
        if gate_id == "G2":
            raise RuntimeError("NPU out of memory")
        if gate_id == "G3":
            return {"gate": "G3", "name": "resume", "level": "L3", "verdict": "fail", "values": {"max_diff": 0.5}}
        return GateResult(gate_id, "logprob alignment", "L3", "pass", {"abs_diff": 0.0}, {"abs_diff": 1e-6})

    fake = types.ModuleType("vime.gates")
    fake.GATES = {"G1": object(), "G2": object(), "G3": object()}
    fake.run_gate = run_gate
    monkeypatch.setitem(sys.modules, "vime.gates", fake)
    results = {r.gate: r for r in vsmoke.level3(None, "cpu", "float32")}
    assert [c[0] for c in calls] == ["G1", "G2", "G3"] and calls[0][1:] == ("cpu", "float32")
    assert results["G1"].verdict == "pass"
    assert results["G2"].verdict == "error" and "NPU out of memory" in results["G2"].traceback
    assert results["G3"].verdict == "fail" and results["G3"].values == {"max_diff": 0.5}
    unknown = vsmoke.level3(["G9"], None, None)[0]
    assert unknown.verdict == "error" and "unknown gate G9" in unknown.reason


def test_l3_broken_registry_is_an_error_with_traceback(monkeypatch):
    real_import = vsmoke.importlib.import_module

    def broken(name, *a, **k):
        if name == "vime.gates":
            raise ModuleNotFoundError("No module named 'torch_npu'", name="torch_npu")
        return real_import(name, *a, **k)

    monkeypatch.setattr(vsmoke.importlib, "import_module", broken)
    (result,) = vsmoke.level3(None, None, None)
    assert result.verdict == "error" and "torch_npu" in result.traceback


def test_stack_pin_mismatch_fails():
    results = {r.gate: r for r in vsmoke.pin_checks({"upstreams": {"torch": {"version": "1.0.0"}, "numpy": "0.0.1"}})}
    assert results["L1.stack.torch"].verdict == "fail"
    assert results["L1.stack.torch"].thresholds == {"version": "1.0.0"}
    assert results["L1.stack.numpy"].verdict == "fail"
    import torch

    ok = {r.gate: r for r in vsmoke.pin_checks({"upstreams": {"torch": {"version": torch.__version__.split("+")[0]}}})}
    assert ok["L1.stack.torch"].verdict == "pass"


NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc2                 Version: 24.1.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.4        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3345 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 90.1        35                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3340 / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 48211         | python3.11               | 21034                   |
+===========================+===============+====================================================+
| No running processes found in NPU 1                                                            |
+===========================+===============+====================================================+
"""


def test_parse_npu_smi_devices_and_occupancy():
    parsed = envfacts.parse_npu_smi(NPU_SMI)
    assert [d["device"] for d in parsed["devices"]] == [0, 1]
    assert parsed["devices"][0]["name"] == "910B3" and parsed["devices"][0]["health"] == "OK"
    assert parsed["processes"] == [{"device": 0, "chip": 0, "pid": 48211, "process": "python3.11", "memory_mb": 21034}]


def test_parse_nvidia_smi():
    parsed = envfacts.parse_nvidia_smi("0, GPU-aaa, NVIDIA H100\n1, GPU-bbb, NVIDIA H100\n", "GPU-bbb, 77, python, 1234 MiB\n")
    assert [d["device"] for d in parsed["devices"]] == [0, 1]
    assert parsed["processes"] == [{"device": 1, "pid": 77, "process": "python", "memory_mb": 1234}]


def test_cann_version_from_toolkit_files(tmp_path):
    home = tmp_path / "ascend-toolkit" / "latest"
    (home / "x86_64-linux").mkdir(parents=True)
    (home / "x86_64-linux" / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\nversion=8.5.0\n")
    found = envfacts.cann_version({"ASCEND_TOOLKIT_HOME": str(home)})
    assert found == {"version": "8.5.0", "source": str(home / "x86_64-linux" / "ascend_toolkit_install.info")}
    # A toolkit home without version files is not a toolkit: the search goes on to the defaults.
    (tmp_path / "empty").mkdir()
    other = envfacts.cann_version({"ASCEND_TOOLKIT_HOME": str(tmp_path / "empty")})
    assert other["source"] is None or not other["source"].startswith(str(tmp_path))


def test_l0_cann_required_when_npu_expected():
    facts = envfacts.collect(with_devices=False)
    facts["devices"] = {"kind": "cpu", "devices": [], "processes": []}
    facts["cann"] = {"version": None, "source": None}
    results = {r.gate: r for r in vsmoke.level0(facts, "npu")}
    assert results["L0.cann"].verdict == "fail" and "set_env.sh" in results["L0.cann"].reason
    assert results["L0.devices"].verdict == "fail" and "expected a npu host" in results["L0.devices"].reason
    results = {r.gate: r for r in vsmoke.level0(facts, None)}
    assert results["L0.cann"].verdict == "skip" and results["L0.devices"].verdict == "pass"


def test_relevant_env_keeps_stack_variables_only_and_no_secrets():
    env = envfacts.relevant_env({
        "ASCEND_RT_VISIBLE_DEVICES": "0,1", "HOME": "/root", "HCCL_IF_IP": "1.2.3.4",
        "HF_TOKEN": "abc123", "PIP_INDEX_URL": "https://me:s3cret@pypi.example/simple",
    })
    assert env == {"ASCEND_RT_VISIBLE_DEVICES": "0,1", "HCCL_IF_IP": "1.2.3.4", "HF_TOKEN": "[REDACTED]",
                   "PIP_INDEX_URL": "https://me:[hidden]@pypi.example/simple"}


def _fake_dist(site, name, direct_url=None):
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))


def test_fork_pins_are_checked_against_the_installed_commit(tmp_path, monkeypatch):
    import subprocess

    sha = "a" * 40
    site = tmp_path / "site"
    _fake_dist(site, "from-git", {"url": "https://example.invalid/fork.git", "vcs_info": {"vcs": "git", "commit_id": sha}})
    _fake_dist(site, "from-wheel")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    _fake_dist(site, "from-checkout", {"url": checkout.as_uri(), "dir_info": {"editable": True}})
    monkeypatch.syspath_prepend(str(site))

    def pin(commit, **extra):
        return {"branch": "ascend-port/vllm-main", "commit": commit, **extra}

    stack = {"forks": {
        "from-git": pin(sha[:12]),  # a short id matches the full one
        "moved": pin("b" * 40, distribution="from-git"),
        "from-wheel": pin(sha),
        "from-checkout": pin(head),
        "absent": pin(sha),
    }}
    results = {r.gate: r for r in vsmoke.pin_checks(stack)}
    assert results["L1.fork.from-git"].verdict == "pass"
    assert results["L1.fork.from-git"].values["source"] == "direct_url.json"
    assert results["L1.fork.moved"].verdict == "fail" and "bbbbbbbbbbbb" in results["L1.fork.moved"].reason
    assert results["L1.fork.from-wheel"].verdict == "skip" and "does not record its commit" in results["L1.fork.from-wheel"].reason
    assert results["L1.fork.from-checkout"].verdict == "pass"
    assert results["L1.fork.absent"].verdict == "fail" and "not installed" in results["L1.fork.absent"].reason


def test_without_torch_l2_and_l3_skip_once_and_l0_fails(monkeypatch):
    """A host python without torch: L0 says so (fail), L2 and L3 skip once each, no gate errors."""
    import importlib.util

    real = importlib.util.find_spec
    # The whole stack is absent, not only torch: importing transformers here while torch looks
    # missing would make transformers cache "no torch" for the rest of the test process.
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] in vsmoke.STACK_MODULES else real(name, *a))
    monkeypatch.setattr(envfacts, "package_versions", lambda names=(): {})
    report = vsmoke.run("L3")
    by_gate = {r.gate: r for r in report.results}
    assert by_gate["L0.torch"].verdict == "fail" and not report.ok
    assert by_gate["L1.import.torch"].verdict == "skip"
    assert [r.gate for r in report.results if r.level == "L3"] == ["L3.gates"]
    assert by_gate["L3.gates"].verdict == "skip" and "see L1" in by_gate["L3.gates"].reason
    assert by_gate["L2.device"].verdict == "skip"
