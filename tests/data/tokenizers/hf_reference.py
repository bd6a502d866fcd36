"""Reference ids from Hugging Face's own `tokenizers` (Python): encode(text, add_special_tokens=False).

    python3 hf_reference.py TOKENIZER_DIR FILE...   prints one JSON array of ids per FILE

Each file's bytes are decoded as UTF-8 with errors="replace" first. Exits 77 where the package is
missing (the GPU machine has it; the CPU test machines need not).
"""
import json
import sys

try:
    from tokenizers import Tokenizer
except ImportError:
    print("hf_reference.py: the Python package 'tokenizers' is not installed", file=sys.stderr)
    sys.exit(77)

tok = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
for path in sys.argv[2:]:
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    print(json.dumps(tok.encode(text, add_special_tokens=False).ids))
