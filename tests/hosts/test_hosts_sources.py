"""Hosts straight from ~/.ssh/config, `porter hosts add`, did-you-mean on names and keys, the
unknown-host error's minimal profile, and `porter config` listing every source of hosts."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from tests.smoke.smoke_helpers import invoke, write_config


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "included").write_text("Host gpu-box\n  HostName 10.0.0.9\n")
    (home / ".ssh" / "config").write_text(
        "Include included\n"
        "Host a3 a3-*\n  HostName 10.0.0.5\n  User root\n"
        "Host = bastion  # jump host\n  User x\n"
        "Host *\n  ServerAliveInterval 30\n")
    monkeypatch.setenv("HOME", str(home))
    return home


def test_ssh_config_names_are_parsed_with_includes_and_without_patterns(home):
    from porter.ssh_hosts import ssh_config_hosts

    assert ssh_config_hosts() == ["gpu-box", "a3", "bastion"]


def test_an_ssh_config_host_is_a_derived_ssh_profile(project, home):
    code, doc, _ = invoke("hosts", "show", "a3", "--json")
    assert code == 0, doc
    host = doc["host"]
    assert (host["transport"], host["address"], host["device_kind"]) == ("ssh", "a3", "cpu")
    assert host["source"] == "~/.ssh/config (derived)"
    assert doc["commands"]["connect"].endswith("-- a3")  # ssh applies the user's `Host a3` entry


def test_hosts_check_remembers_the_probed_device_kind(project, home, tmp_path, monkeypatch):
    import porter.commands.hosts as hosts_cmd

    facts = {"python": {"version": "3.11", "executable": "/usr/bin/python3"}, "packages": {"torch": "2.13.0",
             "torch_npu": "2.13.0"}, "cann": {"version": "8.5"},
             "devices": {"kind": "npu", "tool": "npu-smi", "devices": [{"device": 0, "name": "Ascend910_9392"}],
                         "processes": []}}
    monkeypatch.setattr(hosts_cmd, "check_host", lambda profile, timeout: {
        "reachable": True, "elapsed_s": 0.1, "facts": facts, "problems": hosts_cmd.host_problems(profile, facts)})
    code, doc, _ = invoke("hosts", "check", "a3", "--json")
    assert code == 0 and doc["probed_device_kind"] == "npu-a3"
    code, doc, _ = invoke("hosts", "show", "a3", "--json")
    assert doc["host"]["device_kind"] == "npu-a3"  # the derived profile now expects the NPU


def test_unknown_host_prints_a_minimal_profile_and_a_guess(project, home):
    code, doc, _ = invoke("smoke", "--host", "a33", "--json")
    assert code == 2
    error = doc["error"]
    assert "unknown host 'a33' (did you mean 'a3'?)" in error["message"]
    assert "docs/smoke.md#host-profiles" in error["hint"] and "porter hosts add a33" in error["hint"]
    profile = yaml.safe_load(error["details"]["minimal_profile"])
    from porter.hosts import parse_profile

    assert parse_profile("a33", profile["a33"], "hint").transport == "ssh"  # what we print is a valid profile


def test_typo_in_a_profile_key_says_did_you_mean(project, home):
    write_config(project, {"box": {"address": "h", "devcie_kind": "npu-a3"}})
    code, doc, _ = invoke("hosts", "show", "box", "--json")
    assert code == 2 and "did you mean `device_kind` for `devcie_kind`" in doc["error"]["message"]
    write_config(project, {"box": {"address": "h", "container": {"nmae": "c"}}})
    code, doc, _ = invoke("hosts", "list", "--json")
    assert code == 1 and "`name` for `nmae`" in doc["invalid"][0]["error"]


def test_hosts_add_writes_the_user_file_never_the_project(project, home, tmp_path):
    project_file = (project / "porter.yaml").read_text()
    code, doc, _ = invoke("hosts", "add", "box9", "--json")
    assert code == 0, doc
    path = tmp_path / "xdg-config" / "porter" / "hosts.yaml"
    assert doc["file"] == str(path) and (project / "porter.yaml").read_text() == project_file
    assert any("address" in line for line in doc["to_fill"]) and any("device_kind" in line for line in doc["to_fill"])
    code, doc, _ = invoke("hosts", "add", "a3x", "--address", "root@10.0.0.7", "--device-kind", "npu-a3", "--json")
    assert code == 0 and not any("address" in line for line in doc["to_fill"])
    hosts = yaml.safe_load(path.read_text())
    assert hosts["a3x"]["address"] == "root@10.0.0.7" and hosts["a3x"]["device_kind"] == "npu-a3"
    assert hosts["box9"]["transport"] == "ssh"
    code, doc, _ = invoke("hosts", "show", "a3x", "--json")
    assert code == 0 and doc["host"]["source"] == str(path)
    code, doc, _ = invoke("hosts", "add", "a3x", "--json")
    assert code == 2 and "already in" in doc["error"]["message"]
    before = path.read_text()
    code, doc, _ = invoke("hosts", "add", "bad", "--device-kind", "npu-a33", "--json")
    assert code == 2 and "did you mean" in doc["error"]["message"] and path.read_text() == before


def test_hosts_add_keeps_a_nested_user_file_valid(project, home, tmp_path):
    path = tmp_path / "xdg-config" / "porter" / "hosts.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("# mine\nhosts:\n  old:\n    address: old.example\n")
    code, doc, _ = invoke("hosts", "add", "new", "--address", "new.example", "--json")
    assert code == 0, doc
    text = path.read_text()
    assert text.startswith("# mine\n") and set(yaml.safe_load(text)["hosts"]) == {"old", "new"}


def test_config_lists_every_source_of_hosts(project, home, tmp_path):
    user = tmp_path / "xdg-config" / "porter" / "hosts.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("gpu:\n  address: gpu.example\n  device_kind: cuda\n")
    write_config(project, {"proj-box": {"transport": "local", "python": sys.executable}})
    code, doc, _ = invoke("config", "--json")
    assert code == 0
    sources = {s["kind"]: s for s in doc["host_sources"]}
    assert sources["bundled"]["hosts"] == ["local"]
    assert sources["user"]["path"] == str(user) and sources["user"]["hosts"] == ["gpu"]
    assert sources["project"]["path"].endswith("porter.yaml") and sources["project"]["hosts"] == ["proj-box"]
    assert sources["ssh_config"]["hosts"] == ["gpu-box", "a3", "bastion"]
    code, _, text = invoke("config")
    assert "ssh_config" in text and "gpu-box, a3, bastion" in text and str(user) in text


def test_hosts_show_never_cuts_the_commands(project, home, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    write_config(project, {"far": {"address": "root@very-long-host-name.example.internal", "port": 2222,
                                   "ssh_options": {"ProxyJump": "bastion.example.internal"},
                                   "container": {"name": "a-long-running-container-name"}}})
    code, doc, _ = invoke("hosts", "show", "far", "--json")
    code, _, text = invoke("hosts", "show", "far")
    assert code == 0
    for command in doc["commands"].values():
        assert command in text  # whole, on one line
