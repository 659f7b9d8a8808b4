"""Secrets in plugin code never reach the PR material, the run record or the branch's PR file."""

from __future__ import annotations

import json
import subprocess

from porter.port.shim_port import run_port
from tests.port.helpers import git

SECRET = "hf_abcdefghijklmnopqrstuvwxyz123456"


def test_plugin_code_secrets_are_masked_in_every_port_output(example, request_for, tmp_path):
    plugin = example["plugin"]
    touched = 0
    for path in sorted(plugin.rglob("*.py")):
        text = path.read_text()
        if "legacy_router" in text or "hostlib" in text:
            lines = [line + f"  # HF_TOKEN={SECRET}" if ("legacy_router" in line or "import" in line) and line.strip()
                     else line for line in text.splitlines()]
            path.write_text("\n".join(lines) + "\n")
            touched += 1
    assert touched
    subprocess.run(["git", "-C", str(plugin), "commit", "-qam", "secrets in comments"], check=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@e", "PATH": "/usr/bin:/bin"})
    result = run_port(request_for(), example["analyze"])
    record = tmp_path / "runs" / "upgrade" / result.run_id
    outputs = {
        "PR_MATERIAL.md on the branch": git(plugin, "show", f"{result.branch}:PR_MATERIAL.md"),
        "run.json": (record / "run.json").read_text(),
        "result.pr_material": result.pr_material,
    }
    if (record / "PR_MATERIAL.md").exists():
        outputs["record PR_MATERIAL.md"] = (record / "PR_MATERIAL.md").read_text()
    for name, text in outputs.items():
        assert SECRET not in text, name
    json.loads(outputs["run.json"])
