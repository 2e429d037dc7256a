// OpenClaw 2026.9.6's own memory paths of transcript files and its rememberAcrossConversations
// rules, run on the installed package: sessionPathForFile (packages/memory-host-sdk/src/host/
// session-files.ts), resolveRememberAcrossConversations (config-utils.ts: the default from
// session.dmScope and bindings) and resolveMemorySearchSourcePolicy (src/agents/
// memory-search-source-policy.ts: indexed sources and search sources). Functions are found by
// file prefix and export alias, as tests/openclaw_chunking.mjs does.
// argv[2]: the package's dist folder. stdin: {"files": [absolute paths], "configs":
// [openclaw.json objects], "policies": [{configuredSources, rememberAcrossConversations,
// configuredSessionMemory}]}. stdout: {"paths": [...], "remember": [...], "policies": [...]}.
import { readFileSync } from "node:fs";
import * as openclawDist from "./openclaw_dist.mjs";

const dist = process.argv[2];

const exported = (prefix, name) => openclawDist.exported(dist, prefix, name);

const sessionPathForFile = await exported("session-files-", "sessionPathForFile");
const remember = await exported("legacy-", "resolveRememberAcrossConversations");
const policy = await exported("memory-search-source-policy-", "resolveMemorySearchSourcePolicy");

const input = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify({
  paths: (input.files ?? []).map((file) => sessionPathForFile(file)),
  remember: (input.configs ?? []).map((cfg) => remember(cfg, "main")),
  policies: (input.policies ?? []).map((p) => policy(p)),
}));
