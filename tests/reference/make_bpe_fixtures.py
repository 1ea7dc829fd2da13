#!/usr/bin/env python3
"""Byte-level BPE fixtures for test_bpe_tokenizer: a tiny tokenizer.json trained with Hugging Face `tokenizers`
and the ids `tokenizers` gives for varied strings, so the C reader of tokenizer.json is compared with the library
that defines the format.

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers==0.23.3
    /tmp/tokvenv/bin/python tests/reference/make_bpe_fixtures.py

Writes tests/fixtures/tokenizers/hf_bpe_tiny/{tokenizer.json, tokenizer_config.json, cases.json}. The training
corpus is built here from fixed strings and the training is deterministic, so two runs give identical files.

The tokenizer is shaped like Llama 3's: a Split pre-tokenizer with the Llama 3 regex (Isolated) then ByteLevel
without its own regex, a ByteLevel decoder, control tokens <|begin_of_text|>, <|end_of_text|>, <|im_start|>,
<|im_end|>, one non-special added token <tool_call>, and a digits-splitting second variant is not needed because
the regex already takes numbers three digits at a time.
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
N_MERGES = 500

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's a sunny day, isn't it? We'll see what they've done.",
    "def encode(text):\n    ids = []\n    for word in text.split():\n        ids.append(vocab[word])\n    return ids\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "Der schnelle braune Fuchs springt über den faulen Hund. Äpfel und Birnen kosten 3,50 €.",
    "Le renard brun rapide saute par-dessus le chien paresseux. C'était l'été à Montréal.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。我们明天见。",
    "素早い茶色の狐がのろまな犬を飛び越える。",
    "In 2024 there were 1234567 visitors, 89.5% of them came back; pi is 3.14159265.",
    "Emoji: 🦙 llamas, 👍 thumbs up, 🇫🇷 flags, and 👨‍👩‍👧 families.",
    "    indented line\n\n\n  two spaces\t\ttabs\r\nwindows line end",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nParis.<|im_end|>",
]

CASES = [
    "Hello world",
    " Hello world",
    "Hello  world",
    "hello, World! HELLO?",
    "It's they'll we've I'M YOU'RE",
    "",
    " ",
    "   ",
    "\n",
    "\n\n\n",
    "\t",
    " \t \n \r\n",
    "a   b    c",
    "trailing spaces   ",
    "1",
    "12345678901234567890",
    "3.14159 and 2,718",
    "ied 4 ½ months",
    "Äpfel, Birnen, Öl, ß",
    "Ελληνικά και русский язык",
    "中文字符和日本語の文",
    "🦙🦙 llama emoji 👨‍👩‍👧",
    "def f(x):\n    return x ** 2  # square\n",
    "if (a != b && c <= d) { x += 1; }",
    "https://example.com/path?query=1&b=2",
    "<|begin_of_text|>Hello<|end_of_text|>",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text <tool_call>call()<tool_call> more",
    "<|im_start|<|im_end|>>",
    "unknown <|not_special|> token",
    "\u00a0non-breaking\u00a0space and soft\u00adhyphen",
    "\u0000nul\u0001ctl\u007f",
]


def build():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + len(SPECIALS) + N_MERGES, special_tokens=SPECIALS,
                                  initial_alphabet=alphabet, show_progress=False, min_frequency=1)
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    tok.add_tokens(["<tool_call>"])
    return tok


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tokenizers", "hf_bpe_tiny")
    os.makedirs(root, exist_ok=True)
    tok = build()
    tok.save(os.path.join(root, "tokenizer.json"), pretty=False)
    config = {"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>", "special": True},
              "add_bos_token": True, "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(root, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
    # reload what was written, so the ids are those of the committed file
    tok = Tokenizer.from_file(os.path.join(root, "tokenizer.json"))
    cases = []
    for text in CASES:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)})
    out = {"format": "mnemo-bpe-cases", "version": 1, "tokenizers": __import__("tokenizers").__version__,
           "vocab_size": tok.get_vocab_size(), "cases": cases}
    with open(os.path.join(root, "cases.json"), "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{root}: vocab {tok.get_vocab_size()}, {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
