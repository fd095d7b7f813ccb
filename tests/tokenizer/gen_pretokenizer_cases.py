#!/usr/bin/env python3
"""Writes pretokenizer_cases.json: random strings over a tricky alphabet and how each pre-tokenizer
regex splits them, per Python's `regex` module (backtracking, leftmost alternative first, like the
Oniguruma engine HF tokenizers uses). pre_tokenizer_test.cc checks the C++ scanners against it.

Usage: python3 tests/tokenizer/gen_pretokenizer_cases.py > tests/tokenizer/pretokenizer_cases.json
"""
import json
import random

import regex

QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3 = QWEN2.replace(r"\p{N}|", r"\p{N}{1,3}|")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# gpt-oss's o200k_harmony, as its tokenizer.json has it (llama.cpp's llama-vocab.cpp quotes the same).
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Letters, digits, ASCII and Unicode spaces, newlines, quotes and contraction letters, marks,
# punctuation, CJK, emoji (with ZWJ and a skin-tone modifier), other-number and letter-number forms.
ALPHABET = list("aZsStTrReEvVmMlLdD019 '    \t\n\r.,!?-_(){}#") + [
    "\u00a0", "\u3000", "\u2028", "\u0085", "\u000b", "\u200b", "\u0301", "\u00e9", "\u00df", "\u4e2d",
    "\u6587", "\u0663", "\u00bd", "\u216b", "\U0001F600", "\u200d", "\U0001F3FD", "\u017f", "\u0416",
]
# For o200k's case classes as well: '/', a titlecase letter (Lt), a modifier letter (Lm), a lowercase
# Cyrillic letter and a Devanagari letter with its spacing vowel sign (Lo, Mc). A second set of cases
# over this alphabet keeps the first set (and its seed's strings) as it was.
ALPHABET_O200K = ALPHABET + ["/", "\u01c5", "\u02b0", "\u0436", "\u0915", "\u093e"]


def main():
    rng = random.Random(20261130)
    cases = []
    for _ in range(400):
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24)))
        entry = {"text": s}
        for name, pattern in (("qwen2", QWEN2), ("llama3", LLAMA3), ("gpt2", GPT2), ("o200k", O200K)):
            entry[name] = [m.group(0) for m in regex.finditer(pattern, s)]
            assert "".join(entry[name]) == s
        cases.append(entry)
    rng = random.Random(20261207)
    for _ in range(200):
        s = "".join(rng.choice(ALPHABET_O200K) for _ in range(rng.randint(1, 24)))
        entry = {"text": s, "o200k": [m.group(0) for m in regex.finditer(O200K, s)]}
        assert "".join(entry["o200k"]) == s
        cases.append(entry)
    print(json.dumps(cases, ensure_ascii=False, indent=0))


if __name__ == "__main__":
    main()
