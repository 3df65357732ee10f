#!/usr/bin/env bash
# Installs a Java runtime, on a Debian machine as root: the distribution's default-jre-headless.
# pycocoevalcap's PTB tokenizer and METEOR run on Java; without it the caption metrics fall
# back to a simple tokenizer that shifts BLEU, ROUGE-L and CIDEr and skip METEOR (the
# evaluation JSON's "tokenizer" then says "simple"). Nothing is downloaded when java is found.
set -euo pipefail
if command -v java >/dev/null 2>&1; then
  echo "==> java already installed: $(java -version 2>&1 | head -n 1)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "error: installing java needs root (apt-get install default-jre-headless); run this script as root" >&2
  exit 2
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no apt-get here; install a Java runtime (java on the PATH) with this system's package manager" >&2
  exit 2
fi
echo "==> installing default-jre-headless with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update
# Debian's JRE post-install step expects this manual page folder, which slim images omit.
mkdir -p /usr/share/man/man1
apt-get install -y --no-install-recommends default-jre-headless
java -version
