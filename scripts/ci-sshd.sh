#!/usr/bin/env bash
# A throwaway OpenSSH server on 127.0.0.1 for the `ssh` tests (tests/hosts/test_hosts_ssh.py).
#
#   eval "$(scripts/ci-sshd.sh start)"      # installs openssh-server if missing, starts sshd,
#                                           # prints `export PORTER_SSH_*=...` lines
#   scripts/ci-sshd.sh stop "$PORTER_SSH_DIR"
#
# Everything lives in one temporary directory: host key, user key, a second (unauthorised)
# key, authorized_keys, known_hosts, sshd_config, pid file and log. sshd runs as the current
# user (root or not) on a free port; only that user can log in, with the generated key.
set -euo pipefail

log() { echo "ci-sshd: $*" >&2; }

install_server() {
  [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 && return 0
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "openssh-server missing and no sudo to install it"; exit 3; }
    sudo="sudo -n"
  fi
  log "installing openssh-server and openssh-client"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client >&2
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
  install_server
  local dir="${1:-}"
  if [ -z "$dir" ]; then dir="$(mktemp -d "${TMPDIR:-/tmp}/porter-sshd.XXXXXX")"; fi
  mkdir -p "$dir"
  chmod 700 "$dir"
  for key in host_key user_key wrong_key; do
    rm -f "$dir/$key" "$dir/$key.pub"
    ssh-keygen -q -t ed25519 -N '' -C "porter-ci-$key" -f "$dir/$key"
  done
  cp "$dir/user_key.pub" "$dir/authorized_keys"
  chmod 600 "$dir/authorized_keys" "$dir/user_key" "$dir/wrong_key" "$dir/host_key"
  local port user
  port="$(free_port)"
  user="$(id -un)"
  cat >"$dir/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $dir/host_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
AllowUsers $user
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
AllowTcpForwarding yes
PermitUserEnvironment no
MaxStartups 64:30:128
MaxSessions 64
LogLevel ERROR
EOF
  if [ "$(id -u)" = 0 ]; then mkdir -p /run/sshd && chmod 755 /run/sshd; fi  # privilege separation dir
  /usr/sbin/sshd -t -f "$dir/sshd_config"
  /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log"
  echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$dir/host_key.pub")" >"$dir/known_hosts"
  local i
  for i in $(seq 1 50); do
    if ssh -F /dev/null -o BatchMode=yes -o UserKnownHostsFile="$dir/known_hosts" -o StrictHostKeyChecking=yes \
        -o IdentitiesOnly=yes -i "$dir/user_key" -p "$port" "$user@127.0.0.1" true 2>/dev/null; then
      log "sshd up on 127.0.0.1:$port (dir $dir)"
      cat <<EOF
export PORTER_SSH_DIR=$dir
export PORTER_SSH_HOST=127.0.0.1
export PORTER_SSH_PORT=$port
export PORTER_SSH_USER=$user
export PORTER_SSH_KEY=$dir/user_key
export PORTER_SSH_WRONG_KEY=$dir/wrong_key
export PORTER_SSH_KNOWN_HOSTS=$dir/known_hosts
EOF
      return 0
    fi
    sleep 0.2
  done
  log "sshd did not accept a login; its log follows"
  cat "$dir/sshd.log" >&2 || true
  exit 3
}

stop() {
  local dir="${1:?usage: ci-sshd.sh stop DIR}"
  if [ -f "$dir/sshd.pid" ]; then
    kill "$(cat "$dir/sshd.pid")" 2>/dev/null || true
  fi
  case "$dir" in
    */porter-sshd.*) rm -rf -- "$dir" ;;
    *) log "left $dir in place (not created by this script)" ;;
  esac
}

case "${1:-start}" in
  start) shift || true; start "${1:-}" ;;
  stop) shift; stop "${1:-}" ;;
  *) echo "usage: $0 start [DIR] | stop DIR" >&2; exit 2 ;;
esac
