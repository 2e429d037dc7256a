// OpenClaw 2026.9.6's own session-transcript indexing text and secret masking, run on the
// installed package: buildSessionEntryInProcess (packages/memory-host-sdk/src/host/
// session-files.ts, what its memory indexer reads from a transcript), redactSensitiveText in
// "tools" mode and getDefaultRedactPatterns (src/logging/redact.ts). Functions are found by
// file prefix and export alias, as tests/openclaw_chunking.mjs does.
// argv[2]: the package's dist folder. stdin: {"files": [absolute .jsonl paths], "texts": [...]}.
// stdout: {"patterns": [...], "redacted": [...], "sessions": [{"content", "lineMap"} or null]}.
import { readFileSync } from "node:fs";
import * as openclawDist from "./openclaw_dist.mjs";

const dist = process.argv[2];

const exported = (prefix, name) => openclawDist.exported(dist, prefix, name);

const buildSessionEntryInProcess = await exported("session-files-", "buildSessionEntryInProcess");
const redactSensitiveText = await exported("redact-", "redactSensitiveText");
const getDefaultRedactPatterns = await exported("redact-", "getDefaultRedactPatterns");

const input = JSON.parse(readFileSync(0, "utf8"));
const out = {
  patterns: getDefaultRedactPatterns().map((p) => (typeof p === "string" ? p : String(p))),
  redacted: (input.texts ?? []).map((text) => redactSensitiveText(text, { mode: "tools" })),
  sessions: [],
};
for (const file of input.files ?? []) {
  const entry = await buildSessionEntryInProcess(file);
  out.sessions.push(entry ? { content: entry.content, lineMap: entry.lineMap } : null);
}
process.stdout.write(JSON.stringify(out));
