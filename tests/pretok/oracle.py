"""The pre-tokenizer oracle: the regex module runs the pattern the reference
engine uses for the gpt-4o pre-tokenizer (o200k_base: gpt-oss, Llama 4) on
test texts, and writes where it splits them; test_pretok checks polykv's
scanner (src/tokenizer/tok_pretok.c) against that file word for word.

Usage:
  python oracle.py write OUT [INP ...]   cases from the .inp files given (the
                                         reference's tokenizer test inputs,
                                         split at __ggml_vocab_test__), the
                                         hostile cases below and seeded random
                                         ones -> OUT
  python oracle.py check FILE            re-runs the oracle on FILE's inputs;
                                         exit 1 when a split differs
  python oracle.py inp FILE OUT          FILE's inputs that are valid UTF-8
                                         without NUL, as a tokenizer test .inp
                                         (scripts/refs/make_gpt4o_refs.sh)

The file has one case a line: the input's UTF-8 bytes in hex (invalid
sequences included), a tab, and the words' lengths in code points, the
bytes decoded as the reference decodes them (a malformed sequence is one
U+FFFD per byte it starts at).

The reference runs its pattern with std::regex over a copy of the text in
which every non-ASCII code point is one byte standing for its class (\\s,
\\p{L}, \\p{N}, other); with classes taken from the same Unicode data that
comes to the same as the regex module on the text itself, which is what
this runs.  Texts keep to characters assigned long before either side's
Unicode version, so the two tables agree on them.
"""
import random
import sys

# The reference's pattern for LLAMA_VOCAB_PRE_TYPE_GPT4O (src/llama-vocab.cpp):
# o200k's own with each [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] rewritten as "a letter
# not a-z" and each [\p{Ll}\p{Lm}\p{Lo}\p{M}] as "a letter not A-Z".
CONTRACTION = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT4O = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + CONTRACTION + "?"
         r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + CONTRACTION + "?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# o200k_base as tokenizer.json states it; only counted, to say how often the
# reference's rewrite splits differently (non-ASCII case, marks).
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

HOSTILE = [
    "", " ", "  ", "a", "A", "'", "''", "'s", "'S", "'Re", "'LL", "'ll'", "'x",
    "I'm you're WE'RE they've SHE'LL he'd it's IT'S Don't DON'T o'clock rock'n'roll",
    "it''s", "it' s", "'tis", " 'Twas", "can't've", "X'S'S", "'ſ 'K",
    "Hello World HELLO world hELLO HeLLo WoRLD", "camelCaseWords and PascalCase XMLHttpRequest iPhone",
    "ÉCOLE école Ecole ÉcoLE ÀB'S ÉA. aÉ Éa ÆØÅ æøå ß SS ẞ",
    "Ǆ ǅ ǆ ǅa Aǅ ʰʰa Σίσυφος ΣΊΣΥΦΟΣ Москва МОСКВА мОСКВА",
    "e\u0301 E\u0301 e\u0301\u0301x \u0301 \u0301a a\u0301b A\u0301B ñ n\u0303 Ñ N\u0303",
    "नमस्ते दुनिया हिन्दी", "สวัสดีครับ", "中文字符 日本語のテキスト 한국어 텍스트", "مرحبا بالعالم",
    "שלום עולם", "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ", "𝐀𝐁𝐂 𝐚𝐛𝐜 𝔸𝕒", "ＡＢＣ ａｂｃ ＡＢｃ",
    "1 12 123 1234 12345 123456 1234567", "3.14159 1,000,000 -42 +7 1e10 0x1F 2²³ ٣٤٥٦ ⅫⅩ ①②③④",
    "a1b2c3 abc123def 123abc ABC123", " 1  12   123", "$100 #1 @home 50% (a) [b] {c}",
    "\n", "\n\n", "\r", "\r\n", "\r\n\r\n", "\n\r", " \n", "\n ", " \n ", "a\nb", "a\r\nb", "a \n b",
    "a\n\n\nb", "  \n\n  x", "\t\n\t", "\t\tx", "\tx", " \tx", "x\t", "x \t y",
    "a  b", "a   b", "a    ", "    a", "     ", "a \u00a0b", "a\u00a0\u00a0b", "\u3000x", "x\u3000\u3000y",
    "\u2028x\u2029y", "a\u0085b", "\u0085\u0085a", "\x0b\x0cx", "a\x1cb\x1fc", "\x00a\x00", "\x7f",
    "/path/to/file.txt", "a//b", "x/\ny", "://\n\n", "!!!\n\n\n", "?!/\r\n/", " ...\n", "...\n\nx",
    "end.\n", "<|start|>assistant<|channel|>final<|message|>", "<|endoftext|>", "{\"a\": [1, 2]}",
    "def f(x):\n    return x + 1\n", "if (a && b) { c(); }\n\t\treturn;", "    indented\n        more",
    "🦙🦙 🦙a a🦙 🚀🚀🚀", "👨‍👩‍👧 family", "\u200d\u200da", "a\u200db", "\ue000a", "\ufeffx", "\ufffd",
    "'\u0301s", "e\u0301's", "É's", "ÉS'LL", "\u00e9'S", " ' s", "\n's", "\r'd", "1's", "!'ve",
]

# Raw bytes: invalid UTF-8 (decoded as the reference decodes it).
HOSTILE_BYTES = [
    b"\xff", b"\xfe\xff", b"a\x80b", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82x", b"\xf0\x9f\xa6",
    b"\xf0\x9f\xa6\x99\xf0", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80",
    b"ab\xe9cd", b"\xe9t\xe9", b"\x80\x80 \x80", b"it\x92s", b"DON\x92T", b"\xc3\xa9\xc3",
]

ALPHABET = list("aAbBsStTrReEvVlLmMdDxXzZ''''  \t\r\n\n/.,!?-_0123456789") + [
    "é", "É", "ß", "Σ", "σ", "ǅ", "ʰ", "中", "ア", "\u0301", "\u0308", "٣", "²", "Ⅻ", "①",
    "\u00a0", "\u3000", "\u2028", "\u0085", "\x0b", "\x0c", "\x1c", "🦙", "\ufffd", "\u200d", "\ue000", "€",
]


def decode(b):
    """Bytes to code points as the reference does (unicode_cpts_from_utf8),
    with values past U+10FFFF as U+FFFD (both are "other" to the pattern)."""
    out, i, n = [], 0, len(b)
    while i < n:
        c = b[i]
        need = 0 if c < 0x80 else -1 if not c & 0x40 else 1 if not c & 0x20 else 2 if not c & 0x10 \
            else 3 if not c & 0x08 else -1
        if need < 0 or i + need >= n and need > 0 or any((b[i + k] & 0xC0) != 0x80 for k in range(1, need + 1)
                                                           if i + k < n):
            out.append(0xFFFD)
            i += 1
            continue
        cpt = c if need == 0 else (c & (0x3F >> need))
        for k in range(1, need + 1):
            cpt = (cpt << 6) | (b[i + k] & 0x3F)
        out.append(cpt if cpt <= 0x10FFFF else 0xFFFD)
        i += need + 1
    return "".join(map(chr, out))


def split(pattern, text):
    """Word lengths in code points: the matches, and any text between them."""
    lens, last = [], 0
    for m in pattern.finditer(text):
        if m.start() > last:
            lens.append(m.start() - last)
        lens.append(m.end() - m.start())
        last = m.end()
    if last < len(text):
        lens.append(len(text) - last)
    return lens


def cases(inputs):
    seen, out = set(), []

    def add(b):
        if b not in seen:
            seen.add(b)
            out.append(b)
    for path in inputs:
        for t in open(path, encoding="utf-8", newline="").read().split("\n__ggml_vocab_test__\n"):
            add(t.encode("utf-8"))
    for t in HOSTILE:
        add(t.encode("utf-8", "surrogatepass"))
    for b in HOSTILE_BYTES:
        add(b)
    rng = random.Random(20250805)
    for _ in range(600):
        add("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24))).encode("utf-8"))
    for _ in range(100):
        add(bytes(rng.choice(b"aZ '\n\x80\xbf\xc3\xa9\xe2\x82\xac\xf0\x9f") for _ in range(rng.randint(1, 12))))
    return out


def write(path, inputs):
    import regex
    gpt4o, o200k = regex.compile(GPT4O), regex.compile(O200K)
    n_differ = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write("# gpt-4o pre-tokenizer splits: input UTF-8 in hex, a tab, word lengths in code points.\n")
        f.write("# Written by the regex module (tests/pretok/oracle.py), with build/venv (make build/venv/.pretok):\n")
        f.write("#   build/venv/bin/python tests/pretok/oracle.py write tests/data/pretok/gpt-4o.txt \\\n")
        f.write("#     ../shared/models/vocab/*.inp /work/peers/llama.cpp/models/*.inp\n")
        for b in cases(inputs):
            text = decode(b)
            lens = split(gpt4o, text)
            n_differ += lens != split(o200k, text)
            f.write(b.hex() + "\t" + " ".join(map(str, lens)) + "\n")
    print(f"{path}: written; {n_differ} cases split otherwise by o200k's pattern as written", file=sys.stderr)


def read_cases(path):
    for line in open(path, encoding="utf-8"):
        if not line.startswith("#") and line.strip("\n"):
            hexs, _, want = line.rstrip("\n").partition("\t")
            yield bytes.fromhex(hexs), want


def check(path):
    import regex
    gpt4o = regex.compile(GPT4O)
    n, bad = 0, 0
    for b, want in read_cases(path):
        n += 1
        got = " ".join(map(str, split(gpt4o, decode(b))))
        if got != want:
            bad += 1
            if bad <= 10:
                print(f"differs: {b!r}: file {want} oracle {got}")
    print(f"{n - bad} of {n} cases as the oracle splits them")
    return bad == 0


def write_inp(path, out):
    keep = []
    for b, _ in read_cases(path):
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if b and b"\0" not in b:
            keep.append(b)
    open(out, "wb").write(b"\n__ggml_vocab_test__\n".join(keep))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "inp":
        write_inp(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(0 if check(sys.argv[2]) else 1)
    else:
        sys.exit(__doc__)
