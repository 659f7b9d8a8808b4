"""Host profiles: where `porter smoke` runs and how to reach it.

Profiles come from three places, later ones overriding earlier ones by name:
the bundled `local` host, `$XDG_CONFIG_HOME/porter/hosts.yaml` (user hosts), and the `hosts:`
mapping of the project's porter.yaml (or the user config.yaml). A profile is validated once,
here, so transports can trust every field.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from porter.errors import InputError
from porter.redact import is_secret_key, redact_text

TRANSPORTS = ("local", "ssh", "ssh+container")
DEVICE_KINDS = ("cpu", "cuda", "npu-a2", "npu-a3", "npu-a5")
ENGINES = ("docker", "podman")
CONTAINER_MODES = ("exec", "run")
DEFAULT_WORKDIR = "/tmp/porter-runs"
DEFAULT_TIMEOUT_S = 900.0

PROFILE_KEYS = {
    "transport", "address", "port", "user", "identity_file", "ssh_config", "ssh_options", "connect_timeout",
    "container", "setup", "env", "device_kind", "visible_devices", "workdir", "python", "timeout",
    "description",
}
CONTAINER_KEYS = {"engine", "mode", "name", "image", "binds", "default_binds", "privileged", "extra_args", "host_setup"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SSH_OPTION = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SECRET_ENV = re.compile(r"TOKEN|SECRET|PASSW|PWD|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE", re.I)


@dataclass(frozen=True)
class ContainerSpec:
    engine: str = "docker"  # docker | podman, or an absolute path to one of them
    mode: str = "exec"  # exec: into a running container; run: a fresh `--rm` container per run
    name: str = ""  # exec: the running container
    image: str = ""  # run: the image
    binds: tuple[str, ...] = ()  # extra "SRC:DST[:ro]" binds added to the Ascend set
    default_binds: bool = True  # the Ascend driver bind set for npu device kinds
    privileged: bool = False
    extra_args: tuple[str, ...] = ()  # appended to `run` before the image (e.g. --shm-size=64g)
    host_setup: tuple[str, ...] = ()  # shell lines run on the host before the engine command

    @property
    def engine_name(self) -> str:
        return PurePosixPath(self.engine).name


@dataclass(frozen=True)
class HostProfile:
    name: str
    transport: str = "local"
    address: str = ""  # ssh destination: host, user@host, or a ~/.ssh/config alias
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    ssh_config: str | None = None  # passed as `ssh -F`; default: the user's ~/.ssh/config
    ssh_options: tuple[tuple[str, str], ...] = ()  # `-o Key=Value`, e.g. ProxyJump
    connect_timeout: int = 10
    container: ContainerSpec | None = None
    setup: tuple[str, ...] = ()  # shell lines run before python (e.g. source .../set_env.sh)
    env: tuple[tuple[str, str], ...] = ()
    device_kind: str = "cpu"
    visible_devices: tuple[int, ...] = ()
    workdir: str = DEFAULT_WORKDIR
    python: str = "python3"
    timeout: float = DEFAULT_TIMEOUT_S
    description: str = ""
    source: str = "bundled"

    @property
    def device_family(self) -> str:
        """cpu, cuda or npu: what `torch` calls the device."""
        return "npu" if self.device_kind.startswith("npu") else self.device_kind

    @property
    def is_remote(self) -> bool:
        return self.transport != "local"

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ssh_options"] = dict(self.ssh_options)
        # Shown, listed and stored without the values of secret-looking variables.
        out["env"] = {k: ("[REDACTED]" if is_secret_env(k, v) else v) for k, v in self.env}
        out["setup"] = [redact_text(line) for line in self.setup]
        out["visible_devices"] = list(self.visible_devices)
        if self.container is not None:
            out["container"]["binds"] = list(self.container.binds)
            out["container"]["extra_args"] = list(self.container.extra_args)
            out["container"]["host_setup"] = list(self.container.host_setup)
        return out


def is_secret_env(key: str, value: str | None = None) -> bool:
    """Variables whose values are never shown, stored, or put on a command line: a secret-looking
    name (HF_TOKEN, HUAWEICLOUD_SDK_SK) or a value that carries a secret (an index URL with a
    password, a token pasted into an innocent name)."""
    if _SECRET_ENV.search(key) or is_secret_key(key):
        return True
    return value is not None and has_secret(value)


def has_secret(text: str) -> bool:
    """A value or setup line that carries a secret (a token, a password, credentials in a URL)."""
    return redact_text(text) != text


def bundled_local() -> HostProfile:
    # The interpreter running porter is the one that has the vime extra installed.
    return HostProfile(
        name="local",
        transport="local",
        python=sys.executable,
        workdir=str(Path(tempfile.gettempdir()) / "porter-runs"),
        description="this machine, the python running porter",
        source="bundled",
    )


def close_match(word: str, choices: Any, cutoff: float = 70.0) -> str | None:
    """The most similar of `choices` (rapidfuzz WRatio), for a "did you mean"."""
    from rapidfuzz import fuzz, process

    found = process.extractOne(str(word), [str(c) for c in choices], scorer=fuzz.WRatio, score_cutoff=cutoff)
    return found[0] if found else None


def _did_you_mean(unknown: list[str], known: Any) -> str:
    guesses = [f"`{m}` for `{u}`" for u in unknown if (m := close_match(u, known)) is not None]
    return f" (did you mean {', '.join(guesses)}?)" if guesses else ""


def _fail(name: str, source: str, message: str, hint: str | None = None) -> InputError:
    return InputError(f"host {name!r} ({source}): {message}", hint=hint)


def _str_list(name: str, source: str, key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(name, source, f"`{key}` must be a list of strings")
    if any("\n" in v or "\0" in v for v in value):
        raise _fail(name, source, f"`{key}` entries must be single lines")
    return tuple(value)


def _parse_container(name: str, source: str, value: Any) -> ContainerSpec:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        raise _fail(name, source, "`container` must be a container name or a mapping")
    unknown = sorted(set(value) - CONTAINER_KEYS)
    if unknown:
        raise _fail(name, source, f"unknown container key(s) {', '.join(unknown)}{_did_you_mean(unknown, CONTAINER_KEYS)}",
                    hint=f"known keys: {', '.join(sorted(CONTAINER_KEYS))}")
    engine = str(value.get("engine", "docker"))
    if PurePosixPath(engine).name not in ENGINES or (("/" in engine) and not engine.startswith("/")):
        raise _fail(name, source, f"container engine {engine!r} is not docker or podman",
                    hint="use `engine: docker`, `engine: podman` or an absolute path to one of them")
    mode = str(value.get("mode", "exec"))
    if mode not in CONTAINER_MODES:
        raise _fail(name, source, f"container mode {mode!r} is not one of {', '.join(CONTAINER_MODES)}")
    spec = ContainerSpec(
        engine=engine,
        mode=mode,
        name=str(value.get("name", "")),
        image=str(value.get("image", "")),
        binds=_str_list(name, source, "container.binds", value.get("binds")),
        default_binds=bool(value.get("default_binds", True)),
        privileged=bool(value.get("privileged", False)),
        extra_args=_str_list(name, source, "container.extra_args", value.get("extra_args")),
        host_setup=_str_list(name, source, "container.host_setup", value.get("host_setup")),
    )
    if mode == "exec" and not (spec.name and _CONTAINER_NAME.match(spec.name)):
        raise _fail(name, source, "container mode `exec` needs `container.name` (a running container)")
    if mode == "run" and (not spec.image or spec.image.startswith("-")):
        raise _fail(name, source, "container mode `run` needs `container.image`")
    for bind in spec.binds:
        if bind.count(":") not in (1, 2) or not bind.startswith("/"):
            raise _fail(name, source, f"bind {bind!r} is not SRC:DST[:ro] with absolute paths")
    return spec


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _check_controls(name: str, source: str, data: Any, where: str = "") -> None:
    """NUL and other control characters have no place in a profile: they would cut or bend the
    ssh/docker arguments and the shell lines built from it. Newlines are refused too, except in
    env values (exported quoted)."""
    if isinstance(data, dict):
        for key, value in data.items():
            _check_controls(name, source, key, where)
            _check_controls(name, source, value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, (list, tuple)):
        for item in data:
            _check_controls(name, source, item, where)
    elif isinstance(data, str):
        bad = _CONTROL.search(data) or ("\n" in data and not where.startswith("env."))
        if bad:
            field_name = where or "a key"
            raise _fail(name, source, f"`{field_name}` contains a control character (NUL, newline or escape)",
                        hint="remove it from the profile; every field is a single line of printable text")


def parse_profile(name: str, data: Any, source: str) -> HostProfile:
    """Validate one profile mapping; every problem names the host, the file and the field."""
    if not _NAME.match(name):
        raise InputError(f"{source}: host name {name!r} must be letters, digits, '.', '_' or '-'")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _fail(name, source, "a host profile must be a mapping")
    _check_controls(name, source, data)
    unknown = sorted(set(data) - PROFILE_KEYS)
    if unknown:
        raise _fail(name, source, f"unknown key(s) {', '.join(unknown)}{_did_you_mean(unknown, PROFILE_KEYS)}",
                    hint=f"known keys: {', '.join(sorted(PROFILE_KEYS))}")
    implied = ("ssh+container" if "container" in data else "ssh") if data.get("address") else "local"
    transport = str(data.get("transport", implied))
    if transport not in TRANSPORTS:
        raise _fail(name, source, f"transport {transport!r} is not one of {', '.join(TRANSPORTS)}")
    address = str(data.get("address", "") or "")
    if transport != "local":
        if not address:
            raise _fail(name, source, f"transport {transport} needs `address` (host, user@host or an ssh alias)")
        if address.startswith("-") or any(c.isspace() for c in address):
            raise _fail(name, source, f"address {address!r} is not a host name")
    container = None
    if transport == "ssh+container":
        if "container" not in data:
            raise _fail(name, source, "transport ssh+container needs a `container` section")
        container = _parse_container(name, source, data["container"])
    elif "container" in data:
        raise _fail(name, source, "`container` is only used with transport ssh+container")

    port = data.get("port")
    if port is not None and (not isinstance(port, int) or not 0 < port < 65536):
        raise _fail(name, source, f"port {port!r} is not a TCP port number")
    options = data.get("ssh_options") or {}
    if not isinstance(options, dict):
        raise _fail(name, source, "`ssh_options` must be a mapping of OpenSSH option to value")
    for key, value in options.items():
        if not _SSH_OPTION.match(str(key)) or "\n" in str(value):
            raise _fail(name, source, f"ssh option {key!r} is not an OpenSSH option name")
    env = data.get("env") or {}
    if not isinstance(env, dict) or not all(_ENV_KEY.match(str(k)) for k in env):
        raise _fail(name, source, "`env` must map variable names (letters, digits, _) to values")
    device_kind = str(data.get("device_kind", "cpu"))
    if device_kind not in DEVICE_KINDS:
        raise _fail(name, source, f"device_kind {device_kind!r} is not one of {', '.join(DEVICE_KINDS)}")
    visible = data.get("visible_devices") or []
    if isinstance(visible, int):
        visible = [visible]
    if isinstance(visible, str):
        visible = [v for v in visible.split(",") if v.strip()]
    try:
        visible_ids = tuple(int(v) for v in visible)
    except (TypeError, ValueError):
        raise _fail(name, source, f"visible_devices {visible!r} must be device numbers") from None
    if any(v < 0 for v in visible_ids):
        raise _fail(name, source, "visible_devices must be non-negative")
    if container is not None and container.mode == "run" and device_kind.startswith("npu") and not visible_ids:
        raise _fail(name, source, "a `run` container on an NPU host needs `visible_devices` (host chip ids)",
                    hint="for example `visible_devices: [0, 1]`; check `porter hosts check` for free chips")
    workdir = str(data.get("workdir", DEFAULT_WORKDIR))
    if not workdir.startswith("/") or workdir.rstrip("/") in ("", "/tmp", "/home", "/root") or "\n" in workdir:
        raise _fail(name, source, f"workdir {workdir!r} must be an absolute directory of its own (runs live under it)")
    timeout = data.get("timeout", DEFAULT_TIMEOUT_S)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise _fail(name, source, f"timeout {timeout!r} must be a positive number of seconds")
    connect_timeout = data.get("connect_timeout", 10)
    if not isinstance(connect_timeout, int) or connect_timeout <= 0:
        raise _fail(name, source, "connect_timeout must be a positive whole number of seconds")
    python = str(data.get("python", "python3"))
    if not python or python.startswith("-") or any(c.isspace() for c in python):
        raise _fail(name, source, f"python {python!r} must be a command name or a path")
    user = data.get("user")
    return HostProfile(
        name=name,
        transport=transport,
        address=address,
        port=port,
        user=str(user) if user else None,
        identity_file=os.path.expanduser(str(data["identity_file"])) if data.get("identity_file") else None,
        ssh_config=os.path.expanduser(str(data["ssh_config"])) if data.get("ssh_config") else None,
        ssh_options=tuple((str(k), str(v)) for k, v in options.items()),
        connect_timeout=connect_timeout,
        container=container,
        setup=_str_list(name, source, "setup", data.get("setup")),
        env=tuple((str(k), str(v)) for k, v in env.items()),
        device_kind=device_kind,
        visible_devices=visible_ids,
        workdir=workdir.rstrip("/"),
        python=python,
        timeout=float(timeout),
        description=str(data.get("description", "")),
        source=source,
    )


def user_hosts_file(config_dir: Path) -> Path:
    return config_dir / "hosts.yaml"


def _load_user_file(path: Path) -> dict[str, Any]:
    from porter.yamlio import load_yaml_file

    data = load_yaml_file(path) or {}
    if isinstance(data, dict) and set(data) == {"hosts"}:
        data = data["hosts"] or {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of host name to profile")
    return data


@dataclass(frozen=True)
class HostTable:
    """Every profile that parsed, and the ones that did not with their error: one bad profile must
    not take `porter smoke --host other` or `hosts list` down with it."""

    hosts: dict[str, HostProfile]
    invalid: dict[str, InputError]  # by host name; "" = a whole file that could not be read


def load_host_table(config: Any) -> HostTable:
    """All profiles by name: bundled `local`, then the user's hosts.yaml, then config `hosts:`."""
    hosts: dict[str, HostProfile] = {"local": bundled_local()}
    invalid: dict[str, InputError] = {}

    def add(name: str, data: Any, source: str) -> None:
        try:
            hosts[name] = parse_profile(name, data, source)
            invalid.pop(name, None)
        except InputError as exc:
            hosts.pop(name, None)  # a later, broken profile of that name replaces the earlier one
            invalid[name] = exc

    user_file = user_hosts_file(Path(config.user_config_dir))
    if user_file.is_file():
        try:
            entries = _load_user_file(user_file)
        except InputError as exc:
            invalid[""] = exc
            entries = {}
        for name, data in entries.items():
            add(str(name), data, str(user_file))
    config_source = next((s for s in reversed(getattr(config, "sources", ())) if s), "porter.yaml")
    for name, data in (config.hosts or {}).items():
        add(str(name), data, config_source)
    return HostTable(hosts, invalid)


def load_hosts(config: Any) -> dict[str, HostProfile]:
    """The profiles that parsed (see load_host_table for the ones that did not)."""
    return load_host_table(config).hosts


def trust_file(config_dir: Path) -> Path:
    return Path(config_dir) / "trusted-projects.yaml"


def _trust_key(source: str, name: str, data: Any) -> tuple[str, str]:
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    return f"{Path(source).resolve()}#{name}", digest


def _shell_lines(profile: HostProfile) -> list[str]:
    return [*profile.setup, *(profile.container.host_setup if profile.container else ())]


def check_project_trust(config: Any, profile: HostProfile) -> None:
    """A host from a project's porter.yaml (a cloned repository's file) that would run shell lines
    or replace the bundled `local` host is used only once the user said so: `--trust-project`
    (or PORTER_TRUST_PROJECT=1), remembered per file, host and content, as direnv and git's
    safe.directory do. A changed profile must be trusted again."""
    source = getattr(config, "project_hosts", {}).get(profile.name)
    lines = _shell_lines(profile)
    if source is None or (profile.name != "local" and not lines):
        return
    from porter.yamlio import load_yaml_file, write_yaml_atomic

    record = trust_file(Path(config.user_config_dir))
    key, digest = _trust_key(source, profile.name, config.hosts.get(profile.name))
    known = (load_yaml_file(record) or {}) if record.is_file() else {}
    if not isinstance(known, dict):
        known = {}
    if getattr(config, "trust_project", False) or os.environ.get("PORTER_TRUST_PROJECT") == "1":
        if known.get(key) != digest:
            try:
                write_yaml_atomic(record, {**known, key: digest},
                                  header="# project host profiles the user trusted (porter --trust-project)\n")
            except OSError:
                pass  # trusted for this run; remembering it is a convenience
        return
    if known.get(key) == digest:
        return
    what = "replace the bundled `local` host" if profile.name == "local" else f"define host {profile.name!r}"
    shown = "; ".join(redact_text(line) for line in lines) or "(no setup lines, but it changes what `local` runs)"
    raise InputError(
        f"{source} is a project file porter does not trust yet: it would {what} and run these shell "
        f"lines on it: {shown}",
        hint=f"read them in {source}; if you trust them, run again with `porter --trust-project ...` "
        f"(remembered in {record} until the profile changes)",
    )


DOCS_SECTION = "docs/smoke.md#host-profiles"
SSH_DERIVED = "~/.ssh/config (derived)"


def minimal_profile(name: str, address: str | None = None) -> str:
    """The YAML a user adds for a new host: what every ssh profile needs, with placeholders."""
    return (f"{name}:\n"
            f"  address: {address or 'user@' + name + '.example'}   # host, user@host or a ~/.ssh/config alias\n"
            f"  device_kind: npu-a3   # cpu | cuda | npu-a2 | npu-a3 | npu-a5 (`porter hosts check {name}` shows it)\n"
            f"  setup:\n"
            f"    - source /usr/local/Ascend/ascend-toolkit/set_env.sh   # lines run before python on the host\n"
            f"  python: python3\n")


def ssh_derived_host(config: Any, name: str) -> HostProfile | None:
    """A profile for a `Host NAME` of ~/.ssh/config: ssh to that entry, device kind as last probed."""
    from porter.ssh_hosts import derived_profile_data, probed_kinds, ssh_config_hosts

    if not _NAME.match(name) or name not in ssh_config_hosts():
        return None
    kind = probed_kinds(Path(config.user_config_dir)).get(name)
    return parse_profile(name, derived_profile_data(name, kind if kind in DEVICE_KINDS else None), SSH_DERIVED)


def get_host(config: Any, name: str) -> HostProfile:
    table = load_host_table(config)
    hosts = table.hosts
    if name in table.invalid:
        raise table.invalid[name]
    if name not in hosts and "" in table.invalid:  # it may be in the file that could not be read
        raise table.invalid[""]
    if name not in hosts:
        derived = ssh_derived_host(config, name)
        if derived is not None:
            return derived
        from porter.ssh_hosts import ssh_config_hosts

        user_file = user_hosts_file(Path(config.user_config_dir))
        guess = close_match(name, [*hosts, *ssh_config_hosts()])
        raise InputError(
            f"unknown host {name!r}" + (f" (did you mean {guess!r}?)" if guess else ""),
            hint=f"known hosts: {', '.join(sorted(hosts))}; `porter hosts add {name} --address ADDRESS` writes a profile to {user_file}, or add "
            f"`Host {name}` to ~/.ssh/config; a minimal profile (see {DOCS_SECTION}):\n{minimal_profile(name)}",
            details={"minimal_profile": minimal_profile(name), "docs": DOCS_SECTION, "did_you_mean": guess},
        )
    check_project_trust(config, hosts[name])
    return hosts[name]


def host_sources(config: Any) -> list[dict[str, Any]]:
    """Every place host profiles come from, in the order they override each other by name."""
    from porter.ssh_hosts import default_ssh_config, ssh_config_hosts

    user_file = user_hosts_file(Path(config.user_config_dir))
    user_names: list[str] = []
    user_error = None
    if user_file.is_file():
        try:
            user_names = sorted(str(n) for n in _load_user_file(user_file))
        except InputError as exc:
            user_error = exc.message
    project = [s for s in getattr(config, "sources", ()) if s]
    ssh_file = default_ssh_config()
    out = [
        {"kind": "bundled", "path": None, "exists": True, "hosts": ["local"]},
        {"kind": "user", "path": str(user_file), "exists": user_file.is_file(), "hosts": user_names,
         **({"error": user_error} if user_error else {})},
        {"kind": "project", "path": project[-1] if project else None, "exists": bool(project),
         "hosts": sorted(str(n) for n in (config.hosts or {}))},
        {"kind": "ssh_config", "path": str(ssh_file), "exists": ssh_file.is_file(),
         "hosts": [n for n in ssh_config_hosts(ssh_file) if _NAME.match(n)]},
    ]
    return out


def add_user_host(config: Any, name: str, address: str | None = None, device_kind: str | None = None,
                  transport: str = "ssh") -> tuple[Path, str]:
    """Append a profile for NAME to the user hosts.yaml (never a project file), with the fields a
    user must fill marked. The whole file is validated before it is replaced."""
    from porter.fsutil import atomic_write_text

    if not _NAME.match(name):
        raise InputError(f"host name {name!r} must be letters, digits, '.', '_' or '-'")
    if name == "local":
        raise InputError("`local` is the bundled host; pick another name")
    if transport not in ("ssh", "ssh+container"):
        raise InputError(f"--transport {transport!r}: hosts add writes ssh or ssh+container profiles")
    if device_kind is not None and device_kind not in DEVICE_KINDS:
        guess = close_match(device_kind, DEVICE_KINDS)
        raise InputError(f"--device-kind {device_kind!r} is not one of {', '.join(DEVICE_KINDS)}"
                         + (f" (did you mean {guess!r}?)" if guess else ""))
    if address is not None and (not address or address.startswith("-") or any(c.isspace() for c in address)):
        raise InputError(f"--address {address!r} is not a host name")
    path = user_hosts_file(Path(config.user_config_dir))
    existing = path.read_text(encoding="utf-8") if path.is_file() else ""
    current = _load_user_file(path) if path.is_file() else {}
    if name in current:
        raise InputError(f"host {name!r} is already in {path}", hint=f"edit it there, or check it: porter hosts show {name}")
    wrapped = bool(existing) and _is_wrapped(path)
    fill = "FILL IN"
    lines = [f"{name}:",
             f"  transport: {transport}",
             f"  address: {address or 'user@' + name + '.example'}" + ("" if address else f"   # {fill}: host, user@host or a ~/.ssh/config alias"),
             f"  device_kind: {device_kind or 'cpu'}" + ("" if device_kind else
                                                      f"   # {fill}: cpu | cuda | npu-a2 | npu-a3 | npu-a5 (`porter hosts check {name}`)"),
             f"  # setup:   # {fill} for NPU hosts: lines run before python",
             "  #   - source /usr/local/Ascend/ascend-toolkit/set_env.sh",
             "  python: python3",
             f"  workdir: {DEFAULT_WORKDIR}"]
    if transport == "ssh+container":
        lines += [f"  container:   # {fill}: the running container (mode exec) or an image (mode run)",
                  "    mode: exec", f"    name: {name}-dev"]
    block = "\n".join(("  " + l if wrapped else l) for l in lines) + "\n"
    header = "" if existing else "# porter host profiles (docs/smoke.md#host-profiles)\n"
    text = header + existing + ("" if not existing or existing.endswith("\n") else "\n") + block
    from porter.yamlio import load_yaml_text

    data = load_yaml_text(text, str(path))
    data = data["hosts"] if wrapped else data
    parse_profile(name, data[name], str(path))  # what we write must load
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path, block


def _is_wrapped(path: Path) -> bool:
    from porter.yamlio import load_yaml_file

    data = load_yaml_file(path) or {}
    return isinstance(data, dict) and set(data) == {"hosts"}
