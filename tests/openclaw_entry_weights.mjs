// OpenClaw 2026.9.6's own answers for entry weights, from the installed package:
//   node tests/openclaw_entry_weights.mjs <openclaw package dir>   (cases as JSON on stdin)
//
// Input: {"index": [{path, content, curatedRoot, tokens, overlap}], "importance": [n|null],
//         "projects": [{projectKey, active: [keys]|null}], "paths": [{query, path}]}
// Output: the same lists answered: per index case its chunks' [startLine, endLine, importance,
// triggers, projectKey] (prepareMemoryIndexChunks), importanceMultiplier(n), the project
// ranking of one entry (projectScoreMultiplier, and whether applyProjectRanking keeps it), and
// prepareExactPathMatcher(query)(path). Functions the package does not export (importance.ts,
// project-ranking.ts) are read from their regions of manager-runtime.js.
import { readdirSync, readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import * as openclawDist from "./openclaw_dist.mjs";

const pkg = process.argv[2];
const dist = `${pkg}/dist`;

const exported = (prefix, name) => openclawDist.exported(dist, prefix, name);

const region = (name) => openclawDist.region(dist, name);

const prepare = await exported("manager-index-preparation-", "prepareMemoryIndexChunks");
const exactPath = await exported("manager-search-", "prepareExactPathMatcher");
const INVALID_PROJECT_ANNOTATION_KEY = await exported("curated-annotations-", "INVALID_PROJECT_ANNOTATION_KEY");
const ranking = new Function("INVALID_PROJECT_ANNOTATION_KEY",
  `${region("importance.ts")}\n${region("project-ranking.ts")}\n` +
  "return { importanceMultiplier, prepareActiveProjectKeys, projectScoreMultiplier, applyProjectRanking };",
)(INVALID_PROJECT_ANNOTATION_KEY);

let input = "";
for await (const part of process.stdin) input += part;
const cases = JSON.parse(input);

const out = {
  index: (cases.index ?? []).map((c) => prepare({
    entry: { path: c.path, mtimeMs: 0 }, source: "memory", content: c.content,
    pathClassification: { originClass: "owner", curatedRoot: c.curatedRoot },
    chunking: { tokens: c.tokens ?? 400, overlap: c.overlap ?? 80 },
  }).chunks.map((x) => [x.startLine, x.endLine, x.importance, x.triggers, x.projectKey])),
  importance: (cases.importance ?? []).map((n) => ranking.importanceMultiplier(n)),
  projects: (cases.projects ?? []).map((c) => {
    const active = ranking.prepareActiveProjectKeys(c.active ?? undefined);
    const kept = ranking.applyProjectRanking([{ score: 1, projectKey: c.projectKey ?? undefined }], active);
    return { multiplier: ranking.projectScoreMultiplier(c.projectKey ?? undefined, active),
             kept: kept.length === 1, score: kept[0]?.score ?? null };
  }),
  paths: (cases.paths ?? []).map((c) => exactPath(c.query)(c.path)),
};
process.stdout.write(JSON.stringify(out));
