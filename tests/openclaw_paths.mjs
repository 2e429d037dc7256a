// OpenClaw 2026.9.6's own answers for the path index, from the installed package:
//   node tests/openclaw_paths.mjs <openclaw package dir>   (cases as JSON on stdin)
//
// Input: {"workspaces": [{"files": [[path, source]], "queries": [{query, limit}]}],
//         "keywords": [query], "merges": [{query, vector, keyword, vectorWeight, textWeight,
//         minScore, maxResults}]}
// Output: per workspace, per query, the keyword side's path hits as OpenClaw's builtin search
// makes them when no chunk's text matches: searchPathKeyword (manager-search) on the query,
// then on each fallback keyword (resolveKeywordFallbackTerms: extractKeywords, at most 6) with
// the whole query naming exact paths, merged and cut by MemoryKeywordRetrieval's
// mergeKeywordSearchHits and limitKeywordSearchHits, as [{path, pathScore, score,
// exactPathSpecificity}] in OpenClaw's order; extractKeywords(query) per keyword case; and per
// merge case the hybrid answer OpenClaw makes of given vector hits ([{id, path, startLine,
// endLine, score}]) and keyword hits (as mergeKeywordSearchHits leaves them): its own
// projectHybridCandidates, mergeHybridResults and selectHybridSearchResults (decay and MMR
// off), as [{path, startLine, score}] in order (regions of manager-runtime.js, evaluated as
// they are).
// The store is OpenClaw's own schema (ensureMemoryIndexSchema) in a node:sqlite database,
// each file one chunk; the MemoryKeywordRetrieval methods are read from their region of
// manager-runtime.js (the class is not exported).
import { readdirSync, readFileSync } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { pathToFileURL } from "node:url";
import * as openclawDist from "./openclaw_dist.mjs";

const pkg = process.argv[2];
const dist = `${pkg}/dist`;

const exported = (prefix, name) => openclawDist.exported(dist, prefix, name);

const region = (name) => openclawDist.region(dist, name);

const ensureSchema = await exported("memory-schema-", "ensureMemoryIndexSchema");
const searchPathKeyword = await exported("manager-search-", "searchPathKeyword");
const prepareExactPathMatcher = await exported("manager-search-", "prepareExactPathMatcher");
const buildFtsQuery = await exported("manager-search-", "buildFtsQuery");
const bm25RankToScore = await exported("manager-search-", "bm25RankToScore");
const extractKeywords = await exported("query-expansion-", "extractKeywords");
const Retrieval = new Function(
  "MemoryProviderLifecycle", "MEMORY_INDEX_FTS_TABLE", "MEMORY_INDEX_PATHS_FTS_TABLE",
  "createSubsystemLogger", "prepareExactPathMatcher", "extractKeywords", "buildFtsQuery",
  `${region("manager-keyword-retrieval.ts")}\nreturn MemoryKeywordRetrieval;`,
)(class {}, "memory_index_chunks_fts", "memory_index_paths_fts", () => ({ warn() {} }),
  prepareExactPathMatcher, extractKeywords, buildFtsQuery);
const INVALID_PROJECT_ANNOTATION_KEY = await exported("curated-annotations-", "INVALID_PROJECT_ANNOTATION_KEY");
const hybrid = new Function(
  "path", "fs$1", "INVALID_PROJECT_ANNOTATION_KEY", "prepareExactPathMatcher", "tokenize",
  "jaccardSimilarity", "normalizeLowercaseStringOrEmpty",
  ["importance.ts", "mmr.ts", "project-ranking.ts", "temporal-decay.ts", "hybrid.ts",
   "manager-hybrid-candidates.ts"].map(region).join("\n") +
  "\nreturn { mergeHybridResults, selectHybridSearchResults, projectHybridCandidates };",
)(path, fs, INVALID_PROJECT_ANNOTATION_KEY, prepareExactPathMatcher, () => new Set(), () => 0,
  (v) => String(v ?? "").toLowerCase());
const retrieval = Object.create(Retrieval.prototype);
retrieval.settings = { store: { fts: { tokenizer: "unicode61" } } };

function store(files) {
  const db = new DatabaseSync(":memory:");
  const made = ensureSchema({ db, ftsEnabled: true, cacheEnabled: false });
  if (!made.ftsAvailable) throw new Error(`no FTS5: ${made.ftsError}`);
  const source = db.prepare("INSERT INTO memory_index_sources (path, source, hash, mtime, size) " +
                            "VALUES (?, ?, 'h', 0, 1)");
  const chunk = db.prepare("INSERT INTO memory_index_chunks (id, path, source, start_line, " +
                           "end_line, hash, model, text, embedding, updated_at) " +
                           "VALUES (?, ?, ?, 1, 1, 'h', 'm', ?, x'', 0)");
  files.forEach(([path, src], i) => {
    source.run(path, src);
    chunk.run(`c${i}`, path, src, `text of ${i}`);
  });
  return db;
}

async function pathSide(db, query, limit) {
  const search = (text) => searchPathKeyword({
    db, pathFtsTable: "memory_index_paths_fts", query: text, exactPathQuery: query,
    exactPathLimit: 200, ftsTokenizer: "unicode61", limit, snippetMaxChars: 700,
    sourceFilter: { sql: "", params: [] }, buildFtsQuery, bm25RankToScore,
  });
  const sets = [await search(query)];
  for (const term of retrieval.resolveKeywordFallbackTerms(query)) sets.push(await search(term));
  const hits = retrieval.limitKeywordSearchHits(retrieval.mergeKeywordSearchHits(sets, query), limit);
  return hits.map((h) => ({ path: h.path, pathScore: h.pathScore, score: h.score,
                            exactPathSpecificity: h.exactPathSpecificity }));
}

let input = "";
for await (const part of process.stdin) input += part;
const cases = JSON.parse(input);
const workspaces = [];
for (const ws of cases.workspaces ?? []) {
  const db = store(ws.files);
  const answers = [];
  for (const q of ws.queries) answers.push(await pathSide(db, q.query, q.limit ?? 24));
  workspaces.push(answers);
  db.close();
}
const merges = [];
for (const m of cases.merges ?? []) {
  const fill = (h) => ({ source: "memory", snippet: "", ...h });
  const vector = m.vector.map(fill);
  const keyword = m.keyword.map(fill);
  const merged = await hybrid.mergeHybridResults({
    ...hybrid.projectHybridCandidates(m.query, vector, keyword),
    vectorWeight: m.vectorWeight, textWeight: m.textWeight, mmr: { enabled: false },
    temporalDecay: { enabled: false }, workspaceDir: "/nonexistent",
  });
  const picked = hybrid.selectHybridSearchResults({ merged, keyword, maxResults: m.maxResults,
                                                    minScore: m.minScore });
  merges.push(picked.map((h) => ({ path: h.path, startLine: h.startLine, score: h.score })));
}
const out = { workspaces, keywords: (cases.keywords ?? []).map((q) => extractKeywords(q)),
              merges };
process.stdout.write(JSON.stringify(out));
