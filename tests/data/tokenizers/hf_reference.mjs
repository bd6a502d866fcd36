// Reference ids for the tokenizer tests: @lenml/tokenizers (transformers.js's port of Hugging
// Face's tokenizers) encodes each input file with encode(text, add_special_tokens=false).
//   node hf_reference.mjs NPM_DIR TOKENIZER_DIR FILE...   prints one JSON array of ids per FILE
// Each file's bytes are decoded as UTF-8 with U+FFFD for invalid sequences (TextDecoder), as
// Python's bytes.decode(errors="replace") does before Hugging Face's encode.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createRequire } from "node:module";

const [npmDir, tokDir, ...files] = process.argv.slice(2);
const require = createRequire(join(npmDir, "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(join(tokDir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(join(tokDir, "tokenizer_config.json"), "utf8")),
});
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
for (const f of files) {
  const text = decoder.decode(readFileSync(f));
  process.stdout.write(JSON.stringify(tokenizer.encode(text, { add_special_tokens: false })) + "\n");
}
