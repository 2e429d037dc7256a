// Regenerates tests/golden/chunking from OpenClaw's own code in the installed package: its
// chunkMarkdown (MEMORY_CHUNKING_VERSION), enforceEmbeddingMaxInputTokens, the indexer's
// prepareMemoryIndexChunks (annotation stripping, per-entry MEMORY.md/USER.md, blank filter)
// and stripMemoryAnnotationCarriers.
//
//   node tests/openclaw_chunking.mjs <openclaw package dir> tests/golden/chunking
//
// The inputs of the existing cases are kept (read back from the JSON files); the cases named
// in NEW_* below are added when missing; every output is recomputed. The functions are OpenClaw
// internals living in hashed chunks, found by file prefix and export alias.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { pathToFileURL } from "node:url";

const pkg = process.argv[2];
const golden = process.argv[3];
const dist = `${pkg}/dist`;
const version = JSON.parse(readFileSync(`${pkg}/package.json`, "utf8")).version;

async function exported(prefix, name) {
  for (const file of readdirSync(dist).filter((f) => f.startsWith(prefix) && f.endsWith(".mjs"))) {
    const alias = new RegExp(`\\b${name} as (\\w+)`).exec(readFileSync(`${dist}/${file}`, "utf8"));
    if (alias) return (await import(pathToFileURL(`${dist}/${file}`).href))[alias[1]];
  }
  throw new Error(`no chunk ${prefix}* exports ${name}`);
}

const chunkMarkdown = await exported("markdown-chunks-", "chunkMarkdown");
const chunkingVersion = await exported("markdown-chunks-", "MEMORY_CHUNKING_VERSION");
const enforceLimit = await exported("embedding-chunk-limits-", "enforceEmbeddingMaxInputTokens");
const prepare = await exported("manager-index-preparation-", "prepareMemoryIndexChunks");
const stripAnnotations = await exported("curated-annotations-", "stripMemoryAnnotationCarriers");

const sha256 = (text) => createHash("sha256").update(text).digest("hex");
const load = (name) => JSON.parse(readFileSync(`${golden}/${name}`, "utf8"));
const save = (name, data) => writeFileSync(`${golden}/${name}`, `${JSON.stringify(data, null, 1)}\n`);
const source = { openclaw: version, chunking_version: chunkingVersion };

// memq clamps overlap to [0, tokens - 1] before chunking (2026.3's config resolver did).
const effectiveOverlap = (c) => Math.max(0, Math.min(c.overlap, Math.max(0, c.tokens - 1)));
const LONE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/u;
function checked(chunks) {
  for (const c of chunks) {
    if (LONE.test(c.text)) throw new Error("chunk with a lone surrogate");
    if (c.hash !== sha256(c.text)) throw new Error("hash is not sha256(utf8(text))");
  }
  return chunks;
}
const chunk = (c) => checked(chunkMarkdown(c.content, { tokens: c.tokens, overlap: effectiveOverlap(c) }));
const nonBlank = (chunks) => chunks.filter((x) => x.text.trim().length > 0);
const rows = (chunks) => chunks.map((x) => [x.startLine, x.endLine, x.text, x.hash]);
const digest = (chunks) => sha256(chunks.map((x) => x.hash).join(","));

// --- new inputs ---------------------------------------------------------------------------------
const para = (n, seed) => Array.from({ length: n }, (_, i) => `w${seed}x${i}`).join(" ").slice(0, n);
const zh = "今天我们讨论了记忆搜索的分块策略。中文文本没有空格，所以整段通常是一行。";
const ko = "오늘 우리는 메모리 검색의 청크 전략을 논의했습니다. ";
const ja = "記憶検索のチャンク戦略について話し合いました。カタカナとひらがな。";
const extB = "𠜎𠜱𠝹𠱓𠱸𠲖𠳏𠳕𠴕𠵼";
const NEW_CHUNK_CASES = [
  { name: "v5_cjk_weighted_lines", content: Array(40).fill(zh).join("\n"), tokens: 400, overlap: 80 },
  { name: "v5_cjk_one_long_line", content: zh.repeat(60), tokens: 400, overlap: 80 },
  { name: "v5_korean_japanese_mix", content: [ko.repeat(20), ja.repeat(20), "tail"].join("\n"), tokens: 64, overlap: 16 },
  { name: "v5_ext_b_long_line", content: extB.repeat(80), tokens: 32, overlap: 8 },
  { name: "v5_surrogates_long_line", content: `a${"😀".repeat(1000)}b${extB.repeat(30)}`, tokens: 400, overlap: 80 },
  { name: "v5_surrogates_tokens8", content: `a${"😀".repeat(40)}\n${"👨‍👩‍👧‍👦".repeat(9)}`, tokens: 8, overlap: 3 },
  { name: "v5_long_paragraphs", content: ["intro", para(2000, 1), "tail line", para(1800, 2)].join("\n"), tokens: 400, overlap: 80 },
  { name: "v5_long_line_5000", content: para(5000, 3), tokens: 400, overlap: 80 },
  { name: "v5_mixed_middle_dot_fullwidth", content: Array(30).fill("名前·なまえ ＡＢＣ ｶﾀｶﾅ ˇˉ︰ note").join("\n"), tokens: 32, overlap: 8 },
];
const memoryNote = [
  "# Long-term memory",
  "",
  "Intro paragraph before any bullet.",
  "- Prefers dark roast coffee <!-- importance: 8 -->",
  "  continuation line of the coffee entry",
  "- Works on memq <!-- project: github.com/Memq/memq -->   ",
  "- Birthday is in May <!-- trigger: birthday, cake; party --> <!-- note: keep -->",
  "## Projects",
  "Some text under a heading.",
  "#hashtag is not a heading",
  "####### seven hashes are not a heading",
  "-not a bullet",
  "  - nested bullet stays in its entry",
  "#",
  "- <!-- importance: 3 -->",
  "- multi-line carrier <!-- trigger: a",
  "  b --> stays",
  "- two on a line <!-- trigger: x --><!-- IMPORTANCE : 2 -->\tend  ",
  "trailing spaces elsewhere   ",
  "- CJK entry " + zh.repeat(3),
  "",
].join("\n");
const bigEntries = Array.from({ length: 12 }, (_, i) => `- entry ${i}: ${para(60 + i * 37, i)}`).join("\n");
const NEW_INDEX_CASES = [
  { name: "memory_md_per_entry", path: "MEMORY.md", content: memoryNote },
  { name: "user_md_per_entry", path: "USER.md", content: memoryNote.replaceAll("memory", "user") },
  { name: "memory_md_big_entries_tokens32", path: "MEMORY.md", content: bigEntries, tokens: 32, overlap: 8 },
  { name: "memory_md_long_entry", path: "MEMORY.md", content: `- first\n- ${para(4000, 9)}\n- last` },
  { name: "memory_md_crlf", path: "MEMORY.md", content: memoryNote.replaceAll("\n", "\r\n") },
  { name: "memory_md_first_line_text", path: "MEMORY.md", content: "plain first line\n- a\n- b" },
  { name: "daily_note_not_per_entry", path: "memory/2026-09-01.md", content: memoryNote },
  { name: "daily_note_big_entries", path: "memory/notes.md", content: bigEntries, tokens: 32, overlap: 8 },
  { name: "lowercase_memory_md_not_per_entry", path: "memory.md", content: bigEntries, tokens: 32, overlap: 8 },
  { name: "nested_memory_md_not_per_entry", path: "memory/MEMORY.md", content: bigEntries, tokens: 32, overlap: 8 },
  { name: "user_md_lowercase_not_per_entry", path: "user.md", content: bigEntries, tokens: 32, overlap: 8 },
  { name: "no_annotations_untouched", path: "MEMORY.md", content: "- a   \n- b\t\n" },
];
const STRIP_CASES = [
  "plain text   \nno carriers  ",
  "- a <!-- importance: 5 -->",
  "- a <!--importance:5-->b  \n  c   \r\nd \u2028e",
  "<!-- Trigger : x --> <!-- PROJECT: y -->",
  "<!-- trigger: never closed",
  "<!-- trigger: spans\nlines --> <!-- importance: 1 -->",
  "<!-- trigger: a <!-- importance: 2 --> b",
  "<!-- other: kept --> <!-- project: p -->",
  "<!-- tr\u0131gger: dotless i -->",
  "<!--\u3000importance\u00a0: wide spaces -->",
  "x <!-- importance: 1 --> \u3000",
  "a\t \t<!-- project: p -->\t \n",
];

// --- chunkMarkdown --------------------------------------------------------------------------
const chunkFile = load("chunk_cases.json");
const chunkInputs = chunkFile.cases.map(({ name, content, tokens, overlap }) => ({ name, content, tokens, overlap }));
for (const c of NEW_CHUNK_CASES) if (!chunkInputs.some((x) => x.name === c.name)) chunkInputs.push(c);
save("chunk_cases.json", {
  source,
  cases: chunkInputs.map((c) => {
    const raw = chunk(c);
    return { ...c, effective_overlap: effectiveOverlap(c),
             raw: raw.map((x) => [x.startLine, x.endLine, x.text]), chunks: rows(nonBlank(raw)) };
  }),
});

const fuzzFile = load("chunk_fuzz_cases.json");
save("chunk_fuzz_cases.json", {
  source, seed: fuzzFile.seed,
  cases: fuzzFile.cases.map(({ name, content, tokens, overlap }) => {
    const kept = nonBlank(chunk({ content, tokens, overlap }));
    return { name, content, tokens, overlap, effective_overlap: effectiveOverlap({ tokens, overlap }),
             chunks: kept.map((x) => [x.startLine, x.endLine, x.text]), hashes_sha256: digest(kept) };
  }),
});

// --- input limits: a provider whose limit is the case's byte budget -------------------------
const limitFile = load("limit_cases.json");
save("limit_cases.json", {
  source,
  cases: limitFile.cases.map(({ name, content, tokens, overlap, provider, model, max_bytes }) => {
    const kept = nonBlank(chunk({ content, tokens, overlap }));
    const out = checked(enforceLimit({ id: provider, model, maxInputTokens: max_bytes }, kept));
    return { name, content, tokens, overlap, provider, model, max_bytes, input_count: kept.length,
             input_hashes_sha256: digest(kept), output: rows(out) };
  }),
});

// --- the indexer's preparation of memory files ----------------------------------------------
save("index_cases.json", {
  source,
  strip: STRIP_CASES.map((text) => [text, stripAnnotations(text)]),
  cases: NEW_INDEX_CASES.map((c) => {
    const chunking = { tokens: c.tokens ?? 400, overlap: c.overlap ?? 80 };
    const { chunks } = prepare({
      entry: { path: c.path, mtimeMs: 0 }, source: "memory", content: c.content,
      pathClassification: { originClass: "owner", curatedRoot: true }, chunking,
    });
    return { ...c, ...chunking, chunks: rows(checked(chunks)) };
  }),
});
console.log(`openclaw ${version}, chunking version ${chunkingVersion}: goldens written to ${golden}`);
