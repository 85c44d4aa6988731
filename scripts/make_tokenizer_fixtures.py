#!/usr/bin/env python3
"""Builds tests/fixtures/tokenizer_smollm2.json: golden token ids for the default model's
vocabulary (SmolLM2-135M-Instruct, byte-level BPE, pre = "smollm") as llama.cpp gives them,
plus detokenization and chat template renderings, for tests/test_tokenizer.cpp and
tests/test_chat_template.cpp.

Reference implementations (not written here): llama.cpp through llama-cpp-python, and jinja2
for the model's own chat template.

Usage: /tmp/refvenv/bin/python scripts/make_tokenizer_fixtures.py [model.gguf]
"""
import json
import os
import random
import sys

import jinja2
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer_smollm2.json")

HAND = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\t\t\n  \n",
    "Hello world", "Hello, world!", " Hello world", "Hello  world", "Hello   world  ",
    "hello\nworld", "hello\n\nworld", "hello \n world", "a\tb\tc", "tab\t\tend\t",
    "It's", "it's", "I'm here, you're there, we've been, they'll go, he'd say",
    "don't won't can't shouldn't", "'s 't 're 've 'm 'll 'd", "IT'S DON'T WE'RE", "''''",
    "rock 'n' roll", "O'Brien's dog", "'hello'", "\"quoted\" text", "a'b'c'd",
    "0", "7", "42", "123", "1234", "12345", "123456789", "3.14159", "-273.15", "1e10", "1,000,000",
    "0x1F", "2024-01-15", "12:30:45", "v1.2.3", "$100.00", "50%", "#1", "1st 2nd 3rd 4th",
    "٠١٢٣٤٥٦٧٨٩", "१२३", "Ⅻ ⅻ Ⅳ", "½ ¾ ⅓", "²³ x² H₂O", "①②③", "１２３ＡＢＣ",
    "你好，世界！", "我爱自然语言处理。", "北京是中国的首都", "漢字とかな",
    "こんにちは世界", "カタカナとひらがなと漢字", "東京タワーは333メートルです。",
    "안녕하세요 세계", "한국어 텍스트 처리", "Привет, мир!", "Съешь же ещё этих мягких французских булок",
    "Γειά σου Κόσμε", "Ελληνικά γράμματα αβγδε", "שלום עולם", "مرحبا بالعالم", "السلام عليكم ورحمة الله",
    "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới", "Tiếng Việt có dấu",
    "ሰላም ዓለም", "Բարեւ աշխարհ", "გამარჯობა", "ᚠᚢᚦᚨᚱᚲ",
    "café", "naïve résumé", "Zürich Straße", "ñandú", "Ærøskøbing", "İstanbul ışık",
    "e\u0301", "cafe\u0301", "n\u0303", "a\u0308o\u0308u\u0308", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "\u00a0nbsp\u00a0", "thin\u2009space", "em\u2003space", "ideographic\u3000space", "zero\u200bwidth",
    "line\u2028sep", "para\u2029sep", "\u0085nel", "\x0bvt\x0cff", "soft\u00adhyphen",
    "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👩🏾‍💻 coding", "❤️", "🇫🇷🇯🇵", "I ❤️ 🍕!",
    "emoji😀inside", "🙂 🙃 🫠", "⭐⭐⭐", "✓ ✗ → ← ↑ ↓", "∀x∈ℝ: x²≥0", "∑∫∂√∞≈≠≤≥",
    "™ © ® ℃ ℉", "♠♣♥♦", "…", "— – -", "«guillemets» „quotes“ ‘single’",
    "!!!", "???", "?!?!", "...", "---", "***", "___", "===", "<<>>", "@#$%^&*()", "[]{}()<>",
    "a.b.c", "e.g.", "U.S.A.", "foo@example.com", "https://example.com/path?q=1&x=y#frag",
    "C:\\Users\\name\\file.txt", "/usr/local/bin/python3", "~/.bashrc",
    "def f(x):\n    return x * 2\n", "    indented\n        more\n",
    "for i in range(10):\n\tprint(i)\n",
    "int main() {\n  printf(\"%d\\n\", 42);\n  return 0;\n}\n",
    "#include <vector>\nstd::vector<int> v{1, 2, 3};\n",
    "fn main() { let x: Vec<u8> = vec![]; println!(\"{:?}\", x); }",
    "const f = async (a, b) => { await g(a?.b ?? c); };",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<html><body><div class=\"x\">Hi</div></body></html>",
    "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
    "if (a && b || !c) { x += 1; } else { x -= 1; }",
    "func (s *Server) Handle(w http.ResponseWriter, r *http.Request) {}",
    "x = [i**2 for i in range(100) if i % 3 == 0]",
    "#!/bin/bash\nset -euo pipefail\necho \"$HOME\" | grep -c foo\n",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
    "# Heading\n\n* item 1\n* item 2\n\n```python\nprint('hi')\n```\n",
    "camelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
    "ThisIsAVeryLongIdentifierNameThatKeepsGoingAndGoing",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababab", "zzzzzzzzzzzzz",
    "The quick brown fox jumps over the lazy dog.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "In 1492, Columbus sailed 3 ships across 4,000 miles of ocean.",
    "The price is $19.99 (was $29.99) — a 33% discount!",
    "Mixed: English, 中文, 日本語, 한국어, العربية, русский, 123, 😀.",
    "RTL: \u202eevil\u202c and \u200fmarks\u200e", "עברית with English mixed in", "abc مرحبا def",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text<|im_end|>more", "<|im_start|><|im_end|>", "<|im_start", "im_start|>", "<| im_start |>",
    "<file_sep>code<filename>main.py", "<repo_name>", "<gh_stars>100",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "<s>[INST] hi [/INST]", "</s>", "<unk>", "<pad>",
    "\x00", "\x01\x02\x03", "\x7f", "bell\x07", "esc\x1b[31mred\x1b[0m",
    "\ufeffBOM", "\ufffd", "\U0001F600\U0001F601", "\U00010348 gothic", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙",
    "ﬁ ﬂ ﬀ", "Ｆｕｌｌｗｉｄｔｈ", "ｶﾀｶﾅ", "\u1100\u1161\u11a8",
]

NUMBERS = []
rng = random.Random(1234)
for n in range(1, 31):
    NUMBERS.append("".join(rng.choice("0123456789") for _ in range(n)))
for n in [1, 2, 3, 4, 5, 7, 10, 16]:
    NUMBERS.append("x" + "".join(rng.choice("0123456789") for _ in range(n)) + " y")
    NUMBERS.append(" " + "".join(rng.choice("0123456789") for _ in range(n)))

SPACES = []
for n in range(1, 9):
    SPACES.append("a" + " " * n + "b")
    SPACES.append(" " * n + "word")
    SPACES.append("word" + " " * n)
for ws in ["\t", "\n", "\r", "\r\n", " \t", "\t ", " \n ", "\n\n\n", "  \n\n  ", "\u3000", "\u00a0 "]:
    SPACES.append("x" + ws + "y")
    SPACES.append(ws + "!")

PIECES = ["hello", "World", " ", "  ", "\n", "\t", "123", "4", "'s", "'ll", "!", "?", "...", "é",
          "中文", "日本", "한", "😀", "👨‍👩‍👧", "-", "_", "(", ")", "{", "}", "\"", "'", "Ω",
          "ß", "ﬁ", "١٢", "x", "Ab", "cD", "0.5", "%", "\\", "/", "@", "#", "привет", "\u0301",
          "<|im_end|>", "<|im_start|>"]
RANDOM = []
for _ in range(110):
    RANDOM.append("".join(rng.choice(PIECES) for _ in range(rng.randint(2, 14))))

# Special-token parsing cases (special=True).
SPECIAL = [s for s in HAND if "<" in s] + [
    "<|im_start|>assistant\nSure!<|im_end|>\n<|endoftext|>",
    "a<|im_start|>b<|im_end|>c", "<|im_start|><|im_start|>", " <|im_end|> ", "<|im_end|>\n\n",
    "<|im_start|>user\n你好 😀<|im_end|>", "<jupyter_code>x = 1<jupyter_output>1<empty_output>",
]


PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def main():
    llm = Llama(MODEL, vocab_only=True, verbose=False)

    def tok(s, special):
        return llm.tokenize(s.encode("utf-8"), add_bos=False, special=special)

    strings = []
    seen = set()
    for s in HAND + NUMBERS + SPACES + RANDOM:
        if s not in seen:
            seen.add(s)
            strings.append(s)

    cases = []
    for s in strings:
        ids = tok(s, False)
        rt = llm.detokenize(ids).decode("utf-8", errors="replace")
        cases.append({"text": s, "ids": ids, "roundtrip": rt == s})
    special_cases = []
    for s in SPECIAL:
        ids = tok(s, True)
        special_cases.append({
            "text": s, "ids": ids,
            "decoded": llm.detokenize(ids, special=False).hex(),
            "decoded_special": llm.detokenize(ids, special=True).hex(),
        })

    # Decoding of arbitrary id sequences (bytes as hex: they need not be valid UTF-8).
    n_vocab = llm.n_vocab()
    decode_cases = []
    for _ in range(40):
        ids = [rng.randrange(n_vocab) for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.3:
            ids.insert(rng.randrange(len(ids) + 1), rng.randrange(17))  # a control token
        if ids[0] == llm.token_bos():
            # llama-cpp-python's detokenize drops a leading space after a leading BOS (a
            # Python-side quirk, not llama.cpp's); keep BOS out of first place.
            ids.insert(0, 17 + rng.randrange(n_vocab - 17))
        decode_cases.append({
            "ids": ids,
            "bytes": llm.detokenize(ids, special=False).hex(),
            "bytes_special": llm.detokenize(ids, special=True).hex(),
        })

    # The model's own chat template rendered by jinja2, for the plain (tool-free) cases.
    template = llm.metadata["tokenizer.chat_template"]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(template)
    conversations = [
        [{"role": "user", "content": "Hello!"}],
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
        [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
         {"role": "user", "content": "And 3+3?"}],
        [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "a\nb"},
         {"role": "assistant", "content": "ok 😀"}, {"role": "user", "content": "again"}],
        [{"role": "user", "content": "  spaced  "}, {"role": "assistant", "content": ""}],
    ]
    chat_cases = []
    for conv in conversations:
        for gen in (True, False):
            chat_cases.append({"messages": conv, "add_generation_prompt": gen,
                               "rendered": tmpl.render(messages=conv, add_generation_prompt=gen)})

    # Pre-tokenizer splits from Hugging Face tokenizers (its own regex engine) for the
    # families there is no model for here.
    pretokenize = {}
    try:
        from tokenizers import Regex, pre_tokenizers
        for name, pattern in PATTERNS.items():
            split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
            pretokenize[name] = [{"text": s, "words": [w for w, _ in split.pre_tokenize_str(s)]}
                                 for s in strings]
    except ImportError:
        print("tokenizers is not installed: no pre-tokenizer cases")

    out = {
        "model": os.path.basename(MODEL),
        "reference": "llama.cpp via llama-cpp-python; tokenize(text, add_bos=False, special=...)",
        "cases": cases,
        "special_cases": special_cases,
        "decode_cases": decode_cases,
        "chat_template": template,
        "chat_cases": chat_cases,
        "pretokenize": pretokenize,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{OUT}: {len(cases)} strings, {len(special_cases)} special, "
          f"{len(decode_cases)} decode, {len(chat_cases)} chat; "
          f"{os.path.getsize(OUT)} bytes; not round-tripping: "
          f"{sum(1 for c in cases if not c['roundtrip'])}")


if __name__ == "__main__":
    main()
