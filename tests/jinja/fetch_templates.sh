#!/bin/sh
# Installs the template corpus of the Jinja oracle test at test time (it is
# never committed): llama.cpp's models/templates/*.jinja, taken from the git
# bundle inside the npm package node-llama-cpp@3.22.1 (pinned), cached under
# CACHE.  Usage: fetch_templates.sh CACHE OUT; prints OUT's template count.
# Exit 0: OUT holds the templates; 1: the download or extraction failed.
set -u
cache=${1:-build/cache}
out=${2:-build/jinja/templates}
pkg=node-llama-cpp-3.22.1.tgz
if [ -f "$out/.complete" ]; then ls "$out"/*.jinja | wc -l; exit 0; fi
mkdir -p "$cache" || exit 1
if [ ! -f "$cache/$pkg" ]; then
    (cd "$cache" && npm pack --silent node-llama-cpp@3.22.1 >/dev/null 2>&1) || { echo "npm pack node-llama-cpp@3.22.1 failed" >&2; exit 1; }
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
tar xzf "$cache/$pkg" -C "$tmp" package/llama/gitRelease.bundle || { echo "no git bundle in $pkg" >&2; exit 1; }
git init -q "$tmp/repo" &&
    git -C "$tmp/repo" fetch -q "$tmp/package/llama/gitRelease.bundle" HEAD &&
    rm -rf "$out" && mkdir -p "$out" &&
    git -C "$tmp/repo" archive FETCH_HEAD models/templates | tar x -C "$tmp" &&
    cp "$tmp"/models/templates/*.jinja "$out"/ || { echo "extracting models/templates from the bundle failed" >&2; exit 1; }
touch "$out/.complete"
ls "$out"/*.jinja | wc -l
