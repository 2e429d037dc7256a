// OpenClaw 2026.9.6's own answers for memory_search's result fields, from the installed package:
//   node tests/openclaw_search_fields.mjs <openclaw package dir>   (cases as JSON on stdin)
//
// Input: {"presentation": [{hits: [hit], include}], "citationsModes": [mode|null],
//         "unavailable": [{error, warning?, action?}], "merge": [{vector, keyword,
//         vectorWeight, textWeight}], "provenance": {workspace, hits: [{path, source,
//         startLine, endLine}]}}
// Output: the same lists answered: buildMemorySearchPresentation(hits, include) (the results
// memory_search returns: corpus, citation and the snippet's Source: footer),
// resolveMemoryCitationsMode({memory: {citations}}) (the top-level `citations`),
// buildMemorySearchUnavailableResult(error, overrides) (the disabled answer), mergeHybridResults
// (decay and MMR off: the hits with their vectorScore and textScore) and, per hit of a real
// workspace, resolveChunkProvenance with resolveMemoryPathClassification's origin class.
// tools.citations.ts and tools.shared.ts are read from their regions of the tools chunk, hybrid.ts
// and the ranking helpers it calls from manager-runtime.js (the package exports none of them).
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import * as openclawDist from "./openclaw_dist.mjs";

const pkg = process.argv[2];
const dist = `${pkg}/dist`;

const exported = (prefix, name) => openclawDist.exported(dist, prefix, name);

function region(text, name) {
  const start = text.indexOf(`//#region extensions/memory-core/src/${name}`);
  if (start < 0) throw new Error(`no region ${name}`);
  return text.slice(start, text.indexOf("//#endregion", start));
}

function toolsChunk() {
  for (const file of readdirSync(dist).filter((f) => f.startsWith("tools-") && f.endsWith(".mjs"))) {
    const text = readFileSync(`${dist}/${file}`, "utf8");
    if (text.includes("//#region extensions/memory-core/src/tools.citations.ts")) return text;
  }
  throw new Error("no tools-*.mjs chunk holds tools.citations.ts");
}

const normalizeLowercaseStringOrEmpty = await exported("string-coerce-", "normalizeLowercaseStringOrEmpty");
const stripMemoryAnnotationCarriers = await exported("curated-annotations-", "stripMemoryAnnotationCarriers");
const parseAgentSessionKey = await exported("session-key-", "parseAgentSessionKey");
const INVALID_PROJECT_ANNOTATION_KEY = await exported("curated-annotations-", "INVALID_PROJECT_ANNOTATION_KEY");
const resolveMemoryPathClassification = await exported("memory-path-provenance-", "resolveMemoryPathClassification");
const resolveChunkProvenance = await exported("manager-index-preparation-", "resolveChunkProvenance");

const tools = toolsChunk();
const citations = new Function("stripMemoryAnnotationCarriers", "parseAgentSessionKey",
  "normalizeLowercaseStringOrEmpty",
  `${region(tools, "tools.citations.ts")}\n` +
  "return { resolveMemoryCitationsMode, buildMemorySearchPresentation };",
)(stripMemoryAnnotationCarriers, parseAgentSessionKey, normalizeLowercaseStringOrEmpty);
const shared = new Function("normalizeLowercaseStringOrEmpty", "createLazyRuntimeModule",
  "DEFAULT_MEMORY_SEARCH_TIMEOUT_MS",
  `${region(tools, "tools.shared.ts")}\nreturn { buildMemorySearchUnavailableResult };`,
)(normalizeLowercaseStringOrEmpty, () => () => { throw new Error("not loaded here"); }, 30000);

const runtime = readFileSync(`${dist}/extensions/memory-core/manager-runtime.js`, "utf8");
const hybrid = new Function("INVALID_PROJECT_ANNOTATION_KEY", "normalizeLowercaseStringOrEmpty",
  "path",
  ["importance.ts", "mmr.ts", "project-ranking.ts", "temporal-decay.ts", "hybrid.ts"]
    .map((name) => region(runtime, `memory/${name}`)).join("\n") +
  "\nreturn { mergeHybridResults };",
)(INVALID_PROJECT_ANNOTATION_KEY, normalizeLowercaseStringOrEmpty, path);

let input = "";
for await (const part of process.stdin) input += part;
const cases = JSON.parse(input);

const provenance = cases.provenance ?? { hits: [] };
const out = {
  presentation: (cases.presentation ?? []).map((c) => {
    const shown = citations.buildMemorySearchPresentation(c.hits, c.include);
    return c.hits.map((hit) => shown.get(hit));
  }),
  citationsModes: (cases.citationsModes ?? []).map((mode) =>
    citations.resolveMemoryCitationsMode({ memory: mode === null ? {} : { citations: mode } })),
  unavailable: (cases.unavailable ?? []).map((c) => shared.buildMemorySearchUnavailableResult(
    c.error, c.warning || c.action ? { warning: c.warning, action: c.action } : undefined)),
  merge: await Promise.all((cases.merge ?? []).map((c) => hybrid.mergeHybridResults({
    vector: c.vector, keyword: c.keyword, vectorWeight: c.vectorWeight,
    textWeight: c.textWeight, temporalDecay: { enabled: false }, mmr: { enabled: false },
  }))),
  provenance: await Promise.all(provenance.hits.map(async (hit) => {
    const absolutePath = path.join(provenance.workspace, hit.path);
    const classified = await resolveMemoryPathClassification({
      absolutePath, source: hit.source, workspaceDir: provenance.workspace });
    return resolveChunkProvenance({ path: hit.path, mtimeMs: statSync(absolutePath).mtimeMs },
      hit.source, { startLine: hit.startLine, endLine: hit.endLine }, classified.originClass);
  })),
};
process.stdout.write(JSON.stringify(out));
