"""A deterministic corpus of test lines for the tokenizer comparison: many
scripts, emoji (with ZWJ sequences and modifiers), whitespace runs, code,
numbers, special tokens inside text, combining marks, odd code points."""
import random

WORDS = [
    "hello", "world", "The", "quick", "brown", "fox", "don't", "I'm", "we'll", "they'VE", "IT'S", "ſtraße",
    "naïve", "café", "Ångström", "Zürich", "façade", "résumé", "Kelvin", "K", "ǅemal",
    "Привет", "мир", "Ελληνικά", "שלום", "مرحبا", "سلام", "नमस्ते", "हिन्दी", "ক্ষ", "தமிழ்", "తెలుగు",
    "ภาษาไทย", "ລາວ", "မြန်မာ", "ខ្មែរ", "한국어", "안녕하세요", "日本語", "こんにちは", "カタカナ", "中文", "漢字",
    "𠀋𡈁", "ქართული", "Հայերեն", "አማርኛ", "ᠮᠣᠩᠭᠣᠯ", "ꦗꦮ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟙𝟚𝟛", "Ⅻ", "½", "²³", "①②",
    "e\u0301", "a\u0323\u0307", "a\u0307\u0323", "\u1100\u1161\u11a8", "\u0958", "\u212b", "\u2126", "ﬁ", "ｆｕｌｌ",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇩🇪🇯🇵", "🧑🏿‍🚀", "#️⃣", "☕", "\U0001F9D1\u200D\U0001F4BB",
    "0", "7", "42", "1234567", "3.14159", "-12", "1e10", "0x1F", "١٢٣", "१२३", "٣٫١٤",
    "def", "foo(x):", "return", "x+=1;", "if(a&&b){", "}", "=>", "!==", "/* c */", "#include", "<div>", "</div>",
    "http://example.com/a?b=c&d=e", "user@example.org", "C:\\path\\file.txt", "$HOME", "{{var}}", "[[1,2],[3]]",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "’s", "...", "--", "—", "–", "«»", "“quoted”", "¿Qué?",
    "\u00a0", "\u3000", "\u2003", "\u0085", "\u200b", "\u200d", "\ufeff", "\u00ad", "\u2028", "\ufffd", "\uffff",
    "\U0010fffd", "\ue000", "\u0000", "\u0001", "\u001b[31m", "\u007f", "\U0001d11e", "\u0300", "\u0301\u0301",
    "▁", "Ġ", "Ċ", "<0x41>", "<unk>", "<s>", "</s>", "<bos>", "<eos>", "<pad>", "<|begin_of_text|>", "<|end_of_text|>",
    "<|eot_id|>", "<|start_header_id|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<start_of_turn>",
    "<end_of_turn>", "<think>", "</think>", "<|fim_prefix|>", "<tool_call>", "<mask>", "<s", "|>", "<|",
]
SPACES = [" ", " ", " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n ", "\t\t", "    ", "\u00a0", "\u3000", "", "", "\r"]


def corpus(count=10000, seed=1234):
    rng = random.Random(seed)
    lines = [
        "", " ", "  ", "\n", "\t", "a", "Hello world", " Hello", "Hello ", "<s>", " <s> ", "<s><s>",
        "<|begin_of_text|>Hello", "x<|endoftext|>y", "<start_of_turn>user\nHi<end_of_turn>\n",
        " " * 300, "a" * 1000, "😀" * 50, "\n" * 40, "1" * 100, "ab" * 300, "x y" * 200,
    ]
    while len(lines) < count:
        kind = rng.random()
        if kind < 0.7:
            parts = []
            for _ in range(rng.randint(1, 25)):
                parts.append(rng.choice(WORDS))
                parts.append(rng.choice(SPACES))
            lines.append("".join(parts))
        elif kind < 0.85:
            # Random code points from many blocks.
            cps = []
            for _ in range(rng.randint(1, 40)):
                block = rng.choice([(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
                                    (0x590, 0x6FF), (0x900, 0x9FF), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x3040, 0x30FF),
                                    (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x1F300, 0x1F6FF), (0x2000, 0x206F),
                                    (0x1D400, 0x1D7FF), (0xFF00, 0xFFEF), (0x10000, 0x1007F), (0x20000, 0x2001F)])
                cp = rng.randint(*block)
                if 0xD800 <= cp <= 0xDFFF:
                    continue
                cps.append(chr(cp))
            lines.append("".join(cps))
        else:
            # Code-like and number-like text.
            parts = []
            for _ in range(rng.randint(1, 15)):
                r = rng.random()
                if r < 0.3:
                    parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
                elif r < 0.6:
                    parts.append(rng.choice(["if", "for", "(", ")", "{", "}", "[", "]", ";", "::", "->", "==", "    ",
                                             "\n    ", "\t", "//", "#", "\"str\"", "'c'", "x_1", "CamelCase"]))
                else:
                    parts.append(rng.choice(WORDS))
            lines.append("".join(parts))
    return lines[:count]
