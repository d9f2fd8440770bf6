#!/bin/sh
# Installs the Debian packages named on the command line that are missing.
# A package counts as present when dpkg has it installed or when a command
# of its name exists (node's own packages bring npm without Debian's npm).
# Runs apt-get only when something is missing, as root (or through sudo).
missing=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
    command -v "$p" >/dev/null 2>&1 && continue
    missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
