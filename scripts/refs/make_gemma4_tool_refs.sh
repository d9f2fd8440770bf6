#!/bin/sh
# make_gemma4_tool_refs.sh - writes tests/data/gemma4_tools/replies.json:
# llama.cpp's chat-output parser on Gemma 4 replies, the expectations
# tests/test_tools_families.c checks polykv's tool-call and thinking
# parsing against.  Never run by the Makefile: it needs a llama.cpp build
# beside the project (its common library).
#
#   1. scripts/refs/chat_probe.cpp is built against llama.cpp's common
#      library.
#   2. It applies tests/jinja/gemma4/chat_template.jinja as llama-server
#      does for each case of tests/data/gemma4_tools/cases.json (the
#      replies, written by hand: whether the request has tools, thinking
#      on or off, the reasoning format), which picks llama.cpp's Gemma 4
#      parser, and parses the case's reply with it.
#   3. The commands, with both files' sha256, in
#      tests/data/gemma4_tools/commands.txt.
#
# A case that carries "polykv" (and "why") is one where polykv parses on
# purpose otherwise than llama.cpp: the test checks polykv's answer there,
# and llama.cpp's stays recorded beside it.
#
# Usage: sh scripts/refs/make_gemma4_tool_refs.sh   (from the repository root)
#   PEER  llama.cpp source with build/ built (default /work/peers/llama.cpp)
#   OUT   the probe (default /work/peers/gemma4-tools)
set -eu
PEER=${PEER:-/work/peers/llama.cpp}
OUT=${OUT:-/work/peers/gemma4-tools}
DATA=tests/data/gemma4_tools
. scripts/refs/lib.sh
refs_begin make_gemma4_tool_refs.sh
say g++ -std=c++17 -O1 -I"$PEER/common" -I"$PEER/include" -I"$PEER/ggml/include" -I"$PEER/vendor" \
    scripts/refs/chat_probe.cpp -L"$BIN" -lllama-common -lllama -lggml -lggml-base -Wl,-rpath,"$BIN" \
    -o "$OUT/chat_probe"
say "$OUT/chat_probe" tests/jinja/gemma4/chat_template.jinja "$DATA/cases.json" "$DATA/replies.json"
(cd "$DATA" && sha256sum ./cases.json ./replies.json | sed 's/^/# sha256 /') >> "$log"
