#!/usr/bin/env python3
"""check_vocab.py - the vocabulary llama.cpp's converter wrote into MODEL
against a vocabulary file that was written without these scripts (REF):
the first N tokens (all of REF's without N) with their types, and every
merge; exits non-zero on the first difference.  Run by make_refs.sh here.

Usage: check_vocab.py MODEL.gguf REF.gguf [N]
"""
import sys

from gguf import GGUFReader


def arrays(path):
    f = GGUFReader(path).fields
    strs = lambda k: [bytes(f[k].parts[i]) for i in f[k].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    return strs("tokenizer.ggml.tokens"), types, strs("tokenizer.ggml.merges")


def main():
    (mt, mty, mm), (rt, rty, rm) = arrays(sys.argv[1]), arrays(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else len(rt)
    for what, a, b in (("token", mt[:n], rt[:n]), ("type", mty[:n], rty[:n]), ("merge", mm, rm)):
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            sys.exit(f"check_vocab: {what} {i} differs: {a[i] if i < len(a) else None!r} "
                     f"vs {b[i] if i < len(b) else None!r} ({len(a)} vs {len(b)})")
    print(f"check_vocab: {n} tokens with their types and {len(mm)} merges as in {sys.argv[2]}", file=sys.stderr)


if __name__ == "__main__":
    main()
