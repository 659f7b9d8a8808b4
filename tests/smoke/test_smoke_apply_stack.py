"""`porter apply ... --to vime` and the stack file it writes; the shipped bundle."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile

import pytest
import yaml

from porter.smoke.bundle import STACK_FILE, build_bundle
from porter.stack import load_stack, split_slug
from tests.smoke.smoke_helpers import invoke


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(repo)})


@pytest.fixture
def fork(tmp_path):
    repo = tmp_path / "forks" / "vllm-ascend"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "x.py").write_text("x = 1\n")
    _git(repo, "add", "x.py")
    _git(repo, "commit", "-q", "-m", "base")
    _git(repo, "branch", "ascend-port/vllm-main")
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "ascend-port/vllm-main"], capture_output=True, text=True).stdout.strip()
    return repo, sha


def test_apply_upstream_version(project):
    stack = project / "stack.yaml"
    code, doc, _ = invoke("apply", "transformers==5.4.0", "--to", "vime", "--stack", str(stack), "--json")
    assert code == 0 and doc["recorded"] == {"kind": "upstream", "upstream": "transformers", "version": "5.4.0"}
    code, _, _ = invoke("apply", "torch==2.12.0rc3", "--to", "vime", "--stack", str(stack), "--json")
    data = yaml.safe_load(stack.read_text())
    assert data["upstreams"] == {"transformers": {"version": "5.4.0"}, "torch": {"version": "2.12.0rc3"}}
    assert data["schema"] == "porter.stack/1"


def test_apply_fork_branch_records_commit(project, fork):
    repo, sha = fork
    stack = project / "stack.yaml"
    code, doc, _ = invoke("apply", "ascend-port/vllm-main", "--to", "vime", "--fork-repo", str(repo),
                          "--stack", str(stack), "--json")
    assert code == 0, doc
    pin = load_stack(stack)["forks"]["vllm-ascend"]
    assert pin["branch"] == "ascend-port/vllm-main" and pin["commit"] == sha
    assert pin["upstream"] == "vllm" and pin["target"] == "main"


def test_apply_fork_found_through_the_registry(project, fork):
    repo, sha = fork
    (project / "forks").mkdir()
    (project / "forks" / "forks.yaml").write_text(yaml.safe_dump({"forks": [{"name": "vllm-ascend", "clone": str(repo)}]}))
    (project / "porter.yaml").write_text("runs_dir: runs\nforks_file: forks/forks.yaml\n")
    stack = project / "stack.yaml"
    code, doc, _ = invoke("apply", "vllm-main", "--to", "vime", "--stack", str(stack), "--json")
    assert code == 0, doc
    assert doc["recorded"]["plugin"] == "vllm-ascend" and doc["recorded"]["commit"] == sha


def test_apply_errors(project, fork):
    repo, _ = fork
    stack = project / "stack.yaml"
    assert invoke("apply", "torch==2.12", "--to", "vllm", "--stack", str(stack))[0] == 2
    code, doc, _ = invoke("apply", "torch==not-a-version", "--to", "vime", "--stack", str(stack), "--json")
    assert code == 2 and "PEP 440" in doc["error"]["message"]
    code, doc, _ = invoke("apply", "ascend-port/torch-main", "--to", "vime", "--fork-repo", str(repo),
                          "--stack", str(stack), "--json")
    assert code == 2 and "not found" in doc["error"]["message"]
    assert not stack.exists()  # nothing written on failure


def test_split_slug():
    assert split_slug("vllm-main") == ("vllm", "main")
    assert split_slug("torch-npu-v2.9.0") == ("torch-npu", "v2.9.0")
    assert split_slug("transformers-v5.4.0") == ("transformers", "v5.4.0")


def test_bundle_contents_and_determinism(tmp_path):
    import shutil

    from porter.smoke.bundle import runtime_root

    stack = {"upstreams": {"torch": {"version": "2.13.0"}}}
    data = build_bundle(stack)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = tar.getnames()
        assert json.load(tar.extractfile(STACK_FILE)) == stack
    assert "vime/smoke.py" in names and "vime/results.py" in names and "vime/envfacts.py" in names
    assert not any(n.endswith(".pyc") or "__pycache__" in n for n in names)
    # Same inputs, same bytes (on a frozen copy: the checkout may change while tests run).
    frozen = tmp_path / "vime"
    shutil.copytree(runtime_root(), frozen, ignore=shutil.ignore_patterns("__pycache__"))
    (frozen / "extra").mkdir()
    (frozen / "extra" / "x.pyc").write_bytes(b"junk")
    first = build_bundle(stack, runtime=frozen)
    assert build_bundle(stack, runtime=frozen) == first
    assert first[4:8] == b"\0\0\0\0"  # the gzip header's MTIME field is zero, not the build time
    with tarfile.open(fileobj=io.BytesIO(build_bundle(stack, runtime=frozen)), mode="r:gz") as tar:
        assert "vime/extra/x.pyc" not in tar.getnames()


def test_stack_ships_extra_directories_importable_on_the_host(project, tmp_path):
    """`ship:` puts the stack's own shims next to the runtime; --keep-remote leaves them there."""
    import sys

    from tests.smoke.smoke_helpers import write_config

    shims = project / "shims" / "vllm_compat"
    shims.mkdir(parents=True)
    (shims / "__init__.py").write_text("SOURCE = 'shipped'\n")
    stack = project / "stack.yaml"
    stack.write_text(yaml.safe_dump({"schema": "porter.stack/1", "ship": ["shims/vllm_compat"]}))
    write_config(project, {"box": {"transport": "local", "python": sys.executable, "workdir": str(tmp_path / "w")}})
    code, doc, _ = invoke("smoke", "--host", "box", "--level", "L0", "--stack", str(stack), "--keep-remote", "--json")
    assert code == 0
    remote = tmp_path / "w" / doc["run"]["remote_dir"].rsplit("/", 1)[1]
    assert (remote / "vllm_compat" / "__init__.py").read_text() == "SOURCE = 'shipped'\n"
    assert (remote / "vime" / "smoke.py").is_file()
    code, _, text = invoke("smoke", "--host", "box", "--level", "L0", "--stack", str(stack), "--keep-remote")
    assert code == 0 and "run directory kept on box:" in text
    stack.write_text(yaml.safe_dump({"schema": "porter.stack/1", "ship": ["shims/missing"]}))
    code, doc, _ = invoke("smoke", "--host", "box", "--level", "L0", "--stack", str(stack), "--json")
    assert code == 2 and "not a directory" in doc["error"]["message"]


def test_apply_keeps_the_stack_files_permissions(project):
    """The stack file is a tracked, shared file: rewriting it must not narrow it to 0600."""
    import os
    import stat

    existing = project / "stack.yaml"
    existing.write_text("schema: porter.stack/1\n")
    existing.chmod(0o664)
    code, _, _ = invoke("apply", "torch==2.13.0", "--to", "vime", "--stack", str(existing))
    assert code == 0 and stat.S_IMODE(existing.stat().st_mode) == 0o664

    fresh = project / "new-stack.yaml"
    umask = os.umask(0o022)
    try:
        code, _, _ = invoke("apply", "torch==2.13.0", "--to", "vime", "--stack", str(fresh))
    finally:
        os.umask(umask)
    assert code == 0 and stat.S_IMODE(fresh.stat().st_mode) == 0o644
