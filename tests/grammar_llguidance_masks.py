#!/usr/bin/env python3
"""llguidance's token masks along given token paths, for tests/test_grammar_llguidance.cpp.

Input (a JSON file): {"vocab": [hex bytes per token id, "" for control tokens],
"specials": [ids], "eos": [ids], "cases": [{"schema": ..., "tokens": [ids]}]}. Output (JSON
on stdout): per case, the mask before each token of the path and after the last one, each as
hex of the little-endian bitmask bytes (bit id = token id may come next), or "error". The
JSON is compiled compact (no free white space, separators "," and ":"), the mode the C++
side compiles with max_ws 0. Exits 77 when llguidance is not installed.
"""
import json
import sys

try:
    import llguidance
except ImportError:
    print("skipped: llguidance is not installed", file=sys.stderr)
    sys.exit(77)


class Vocab:
    def __init__(self, tokens, specials, eos):
        self.tokens = tokens
        self.special_token_ids = specials
        self.eos_token_id = eos[0]
        self.bos_token_id = None
        longest, special_set = {}, set(specials)
        for i, t in enumerate(tokens):
            if t and i not in special_set and (t not in longest):
                longest[t] = i
        self._by_bytes = longest
        self._max = max(len(t) for t in tokens)

    def __call__(self, s):  # greedy longest match (llguidance tokenizes literals with it)
        if isinstance(s, str):
            s = s.encode()
        out, i = [], 0
        while i < len(s):
            for n in range(min(self._max, len(s) - i), 0, -1):
                tid = self._by_bytes.get(s[i:i + n])
                if tid is not None:
                    out.append(tid)
                    i += n
                    break
            else:
                raise ValueError("untokenizable byte")
        return out


def main():
    spec = json.load(open(sys.argv[1]))
    tokens = [bytes.fromhex(h) for h in spec["vocab"]]
    for i in spec["specials"]:
        tokens[i] = b"<|special_%d|>" % i
    vocab = Vocab(tokens, list(spec["specials"]), spec["eos"])
    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(vocab), eos_token=spec["eos"])
    n_bytes = (len(tokens) + 7) // 8
    out = []
    for case in spec["cases"]:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            case["schema"], defaults={"whitespace_flexible": False, "item_separator": ",",
                                      "key_separator": ":"})
        m = llguidance.LLMatcher(tok, grammar)
        masks = []
        for t in case["tokens"] + [None]:
            if m.is_error():
                masks.append("error: " + m.get_error())
                break
            masks.append(bytes(m.compute_bitmask())[:n_bytes].hex())
            if t is not None:
                m.consume_token(t)
        out.append(masks)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
