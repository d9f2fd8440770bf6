#!/bin/sh
# fuzz/run.sh [SECONDS] - fuzzes the GGUF reader, then the server's request
# handling (JSON validation, chat rendering, tool-call parsing), then the
# grammar engine (GBNF, JSON Schema, masks: build-fuzz/fuzz_grammar), then
# the Jinja interpreter (template sources: build-fuzz/fuzz_jinja), with
# libFuzzer for SECONDS each (default 60).  Builds build-fuzz/fuzz_gguf and
# build-fuzz/fuzz_server with clang's fuzzer, ASan and UBSan, seeds the GGUF
# corpus with tiny files from the writer and the small real GGUFs in
# ../shared/models when present, and exits non-zero when libFuzzer finds a
# crash, a leak or a hang (the input is saved in build-fuzz/).
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
out=build-fuzz
cc=${FUZZ_CC:-clang}
src="src/gguf/gguf.c src/gguf/gguf_write.c src/common/pk.c"
flags="-std=c11 -D_GNU_SOURCE -Wall -Wextra -g"
mkdir -p "$out/corpus_gguf"

$cc $flags -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -fno-omit-frame-pointer $src fuzz/fuzz_gguf.c -o "$out/fuzz_gguf"
$cc $flags -O1 $src fuzz/seed_gguf.c -o "$out/seed_gguf"
"$out/seed_gguf" "$out/corpus_gguf"
for f in ../shared/models/stories260K.gguf ../shared/models/vocab/*.gguf; do
    if [ -f "$f" ]; then cp "$f" "$out/corpus_gguf/"; fi
done

"$out/fuzz_gguf" "$out/corpus_gguf" -max_total_time="$secs" -max_len=2097152 \
    -rss_limit_mb=4096 -timeout=10 -artifact_prefix="$out/" -print_final_stats=1

# The server's request path: its own files with the sanitizers, the rest of
# the library from a plain build.
make -s all
mkdir -p "$out/corpus_server"
printf '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}' \
    > "$out/corpus_server/chat.json"
printf '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>' > "$out/corpus_server/call.txt"
$cc $flags -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
    fuzz/fuzz_server.c src/server/*.c src/tokenizer/tmpl_tools.c src/tokenizer/tmpl.c src/common/utf8.c \
    build/libpolykv.a -ljansson -lmicrohttpd -lm -pthread -o "$out/fuzz_server"
"$out/fuzz_server" "$out/corpus_server" -max_total_time="$secs" -max_len=4096 -timeout=10 \
    -artifact_prefix="$out/" -print_final_stats=1

# The grammar engine: GBNF and JSON Schemas, then text and masks over them.
mkdir -p "$out/corpus_grammar"
printf '\000root ::= "a" [b-d]* ("x" | item){1,3}\nitem ::= [^a]\000abx' > "$out/corpus_grammar/gbnf.txt"
printf '\001{"type":"object","properties":{"a":{"type":"integer","minimum":3,"maximum":70}},"required":["a"]}\000{"a":5}' \
    > "$out/corpus_grammar/schema.txt"
$cc $flags -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
    fuzz/fuzz_grammar.c src/grammar/*.c src/common/pk.c src/common/buf.c -ljansson -lm -o "$out/fuzz_grammar"
"$out/fuzz_grammar" "$out/corpus_grammar" -max_total_time="$secs" -max_len=4096 -timeout=10 \
    -artifact_prefix="$out/" -print_final_stats=1

# The Jinja interpreter: template sources, compiled and rendered with one
# conversation (seeds: a few statements of each kind).
mkdir -p "$out/corpus_jinja"
printf '{%%- for m in messages %%}{%% if loop.first %%}{{ bos_token }}{%% endif %%}<{{ m.role }}>{{ m.content | tojson(indent=2) }}{%% endfor %%}' \
    > "$out/corpus_jinja/loop.jinja"
printf '{%% set ns = namespace(x=0) %%}{%% macro f(a, b=2) %%}{{ a ~ b }}{%% endmacro %%}{{ f(1) }}{{ tools | map(attribute="function.name") | join(",") }}{{ "abc"[::-1] }}' \
    > "$out/corpus_jinja/macro.jinja"
$cc $flags -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
    fuzz/fuzz_jinja.c src/jinja/*.c src/common/pk.c src/common/buf.c -ljansson -lm -o "$out/fuzz_jinja"
"$out/fuzz_jinja" "$out/corpus_jinja" -max_total_time="$secs" -max_len=4096 -timeout=10 \
    -artifact_prefix="$out/" -print_final_stats=1
