#!/usr/bin/env bash
# Prints the directory of a JDK with javac 17 or later, for JAVA_HOME: the tests of clients/java compile
# the RocketMQ strategy with it and run it. It takes, in order, $JAVA_HOME, the javac on PATH, or a JDK
# under /usr/lib/jvm; when none has javac 17 or later, it installs Debian's openjdk-17-jdk-headless with
# apt-get (default-jdk-headless where the release has no JDK 17), through sudo when not root.
# Everything but the directory goes to stderr.
set -euo pipefail

# major prints the major version of the javac $1 (8 for 1.8.0_x, 17 for 17.0.x), or 0.
major() {
  local v
  v=$("$1" -version 2>&1 | awk '$1 == "javac" {print $2; exit}')
  v=${v#1.}
  v=${v%%[.+-]*}
  [[ $v =~ ^[0-9]+$ ]] && echo "$v" || echo 0
}

# found prints the JDK home of the javac $1 and exits, if it is 17 or later.
found() {
  [[ -x $1 ]] || return 0
  local javac
  javac=$(readlink -f "$1")
  if (($(major "$javac") >= 17)); then
    dirname "$(dirname "$javac")"
    exit 0
  fi
  echo "ignoring $javac: javac $(major "$javac"), want 17 or later" >&2
}

search() {
  if [[ -n ${JAVA_HOME:-} ]]; then found "$JAVA_HOME/bin/javac"; fi
  if command -v javac >/dev/null; then found "$(command -v javac)"; fi
  local javac
  for javac in /usr/lib/jvm/*/bin/javac; do found "$javac"; done
}

search

if ! command -v apt-get >/dev/null; then
  echo "no javac 17 or later found, and no apt-get to install one: install a JDK 17+ and set JAVA_HOME" >&2
  exit 1
fi
sudo=()
if (($(id -u) != 0)); then
  if ! command -v sudo >/dev/null; then
    echo "no javac 17 or later found; install openjdk-17-jdk-headless as root, or set JAVA_HOME" >&2
    exit 1
  fi
  sudo=(sudo)
fi
echo "no javac 17 or later found: installing a JDK with apt-get" >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
package=openjdk-17-jdk-headless
if ! apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  package=default-jdk-headless
fi
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >&2

unset JAVA_HOME
search
echo "installed $package, but found no javac 17 or later" >&2
exit 1
