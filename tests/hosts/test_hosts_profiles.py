"""Where host profiles come from (bundled `local`, user hosts.yaml, porter.yaml) and the
`porter hosts list|show|check` commands on the local machine."""

from __future__ import annotations

import sys

import yaml

from tests.smoke.smoke_helpers import fake_python, invoke, write_config
from porter.config import load_config
from porter.hosts import get_host, load_hosts


def test_bundled_local_then_user_file_then_project(project, tmp_path):
    user_dir = tmp_path / "xdg-config" / "porter"
    user_dir.mkdir(parents=True)
    (user_dir / "hosts.yaml").write_text(yaml.safe_dump({
        "a3": {"address": "root@10.1.1.1", "port": 443, "device_kind": "npu-a3"},
        "gpu": {"address": "gpu-box", "device_kind": "cuda"},
    }))
    write_config(project, {"a3": {"address": "a3-via-jump", "ssh_options": {"ProxyJump": "bastion"},
                                  "setup": ["source /usr/local/Ascend/ascend-toolkit/set_env.sh"]}})
    hosts = load_hosts(load_config())
    assert set(hosts) == {"local", "a3", "gpu"}
    assert hosts["local"].transport == "local" and hosts["local"].python == sys.executable
    assert hosts["gpu"].source.endswith("hosts.yaml") and hosts["gpu"].transport == "ssh"
    # The project's profile replaces the user's one of the same name, field for field.
    assert hosts["a3"].address == "a3-via-jump" and hosts["a3"].port is None
    assert hosts["a3"].ssh_options == (("ProxyJump", "bastion"),)
    assert hosts["a3"].source.endswith("porter.yaml")


def test_user_file_may_nest_under_hosts_key(project, tmp_path):
    user_dir = tmp_path / "xdg-config" / "porter"
    user_dir.mkdir(parents=True)
    (user_dir / "hosts.yaml").write_text("hosts:\n  box:\n    address: box.example\n")
    assert get_host(load_config(), "box").address == "box.example"


def test_unknown_host_lists_known_ones(project):
    code, doc, _ = invoke("hosts", "show", "nope", "--json")
    assert code == 2
    assert "unknown host 'nope'" in doc["error"]["message"] and "local" in doc["error"]["hint"]


def test_bad_profile_is_listed_as_invalid_naming_the_file(project):
    write_config(project, {"a3": {"address": "x", "device_kind": "npu-a9"}, "box": {"address": "box.example"}})
    code, doc, _ = invoke("hosts", "list", "--json")
    assert code == 1  # a failed check, the good profiles still listed
    assert {h["name"] for h in doc["hosts"]} == {"local", "box"}
    (bad,) = doc["invalid"]
    assert bad["name"] == "a3" and "host 'a3'" in bad["error"] and "porter.yaml" in bad["error"]


def test_one_bad_profile_does_not_break_the_other_hosts(project):
    write_config(project, {"a3": {"address": "x", "device_kind": "npu-a9"}, "box": {"address": "box.example"}})
    code, doc, _ = invoke("hosts", "show", "box", "--json")
    assert code == 0 and doc["host"]["address"] == "box.example"
    code, doc, _ = invoke("hosts", "show", "a3", "--json")
    assert code == 2 and "npu-a9" in doc["error"]["message"]


def test_unreadable_user_file_fails_only_hosts_it_may_hold(project, tmp_path):
    user_dir = tmp_path / "xdg-config" / "porter"
    user_dir.mkdir(parents=True)
    (user_dir / "hosts.yaml").write_text("- just\n- a list\n")
    code, doc, _ = invoke("hosts", "show", "local", "--json")
    assert code == 0
    code, doc, _ = invoke("hosts", "show", "gpu", "--json")
    assert code == 2 and "expected a mapping" in doc["error"]["message"]
    code, doc, _ = invoke("hosts", "list", "--json")
    assert code == 1 and doc["invalid"][0]["name"] is None


def test_hosts_list_and_show(project):
    write_config(project, {"a3c": {"address": "a3", "container": {"name": "dev"}, "device_kind": "npu-a3"}})
    code, doc, _ = invoke("hosts", "list", "--json")
    assert code == 0
    assert doc["schema"] == "porter.hosts.list/1"
    by_name = {h["name"]: h for h in doc["hosts"]}
    assert by_name["a3c"]["transport"] == "ssh+container" and by_name["a3c"]["container"]["name"] == "dev"
    code, doc, _ = invoke("hosts", "show", "a3c", "--json")
    assert code == 0 and doc["transport"] == "ssh a3 + docker exec dev"
    code, _, text = invoke("hosts", "list")
    assert code == 0 and "a3c" in text and "ssh+container" in text
    write_config(project, {"h": {"address": "h", "env": {"HF_TOKEN": "abc123", "HF_ENDPOINT": "https://m"}}})
    code, doc, _ = invoke("hosts", "show", "h", "--json")
    assert doc["host"]["env"] == {"HF_TOKEN": "[REDACTED]", "HF_ENDPOINT": "https://m"}


def test_hosts_check_local(project):
    code, doc, _ = invoke("hosts", "check", "local", "--json")
    assert code == 0, doc
    facts = doc["facts"]
    assert facts["python"]["executable"] == sys.executable
    assert facts["packages"]["torch"].startswith("2.") and facts["devices"]["kind"] == "cpu"
    code, _, text = invoke("hosts", "check", "local")
    assert code == 0 and "occupied by" in text


def test_hosts_check_reports_problems_and_busy_devices(project, tmp_path):
    # A python that answers with a canned probe: an NPU host whose chip 1 is busy, no torch_npu.
    facts = {"python": {"version": "3.11.7", "executable": "/usr/bin/python3"}, "packages": {"torch": "2.8.0"},
             "cann": {"version": None}, "devices": {"kind": "npu", "tool": "npu-smi", "devices": [{"device": 0}, {"device": 1}],
             "processes": [{"device": 1, "pid": 4242, "process": "python", "memory_mb": 9000}]}}
    import json

    python = fake_python(tmp_path / "probe-python", f"cat >/dev/null\necho '{json.dumps(facts)}'\n")
    write_config(project, {"npu": {"transport": "local", "python": str(python), "device_kind": "npu-a3",
                                   "visible_devices": [1]}})
    code, doc, _ = invoke("hosts", "check", "npu", "--json")
    assert code == 1
    problems = " | ".join(doc["problems"])
    assert "torch_npu is not installed" in problems and "no CANN version" in problems
    assert "visible device(s) [1] are occupied" in problems
    code, _, text = invoke("hosts", "check", "npu")
    assert "pid 4242" in text


def test_hosts_check_missing_python_exit_3(project, tmp_path):
    write_config(project, {"box": {"transport": "local", "python": str(tmp_path / "nope")}})
    code, doc, _ = invoke("hosts", "check", "box", "--json")
    assert code == 3 and "python not found" in doc["error"]["message"]


def test_hosts_show_gives_the_commands_to_try_by_hand(project):
    """The error hints say "try ssh with the same options by hand": show says what that is."""
    import shlex

    write_config(project, {"a3": {"address": "root@a3", "port": 443, "device_kind": "npu-a3", "visible_devices": [4, 5],
                                  "container": {"mode": "run", "image": "img:1"}}})
    code, doc, text = invoke("hosts", "show", "a3", "--json")
    assert code == 0
    connect = shlex.split(doc["commands"]["connect"])
    assert connect[0] == "ssh" and ["-p", "443"] == connect[connect.index("-p"):connect.index("-p") + 2]
    assert connect[-2:] == ["--", "root@a3"]
    engine = shlex.split(doc["commands"]["engine"])
    assert engine[:4] == ["docker", "run", "--rm", "-it"] and "--device=/dev/davinci4" in engine
    assert engine[-2:] == ["img:1", "bash"]
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1" in engine
    code, _, text = invoke("hosts", "show", "a3")
    assert "docker run --rm" in text
    code, doc, _ = invoke("hosts", "show", "local", "--json")
    assert doc["commands"] == {}
