// OpenClaw's own agent-id and workspace rules, run on the installed package (2026.9.6).
// argv[2]: the package's dist folder. stdin: {"ids": [...], "configs": [{cfg, env, ids}]}.
// stdout: {"ids": [[normalizeAgentId, normalizeAgentIdStrict or null, isValidAgentId]...],
//          "workspaces": [{id: dir}...], "agents": [[listed ids]...]}.
import { readFileSync, readdirSync } from "node:fs";
import { pathToFileURL } from "node:url";
import path from "node:path";

const dist = process.argv[2];
const ids = await import(pathToFileURL(path.join(dist, "normalization-core", "agent-id.js")));
const scopeFile = readdirSync(dist).find((f) => /^agent-scope-config-.*\.mjs$/.test(f));
const scope = await import(pathToFileURL(path.join(dist, scopeFile)));
// The bundle exports by minified letters; its export line names them (see the file's end).
const source = readFileSync(path.join(dist, scopeFile), "utf8");
const letter = (name) => source.match(new RegExp(`${name} as (\\w+)`))[1];
const resolveAgentWorkspaceDir = scope[letter("resolveAgentWorkspaceDir")];
const listAgentIds = scope[letter("listAgentIds")];

const input = JSON.parse(readFileSync(0, "utf8"));
const out = { ids: [], workspaces: [], agents: [] };
for (const id of input.ids) {
  const strict = ids.normalizeAgentIdStrict(id);
  out.ids.push([ids.normalizeAgentId(id), strict.ok ? strict.value : null, ids.isValidAgentId(id)]);
}
for (const { cfg, env, ids: wanted } of input.configs) {
  const dirs = {};
  for (const id of wanted) dirs[id] = resolveAgentWorkspaceDir(cfg, id, env);
  out.workspaces.push(dirs);
  out.agents.push(listAgentIds(cfg));
}
process.stdout.write(JSON.stringify(out));
