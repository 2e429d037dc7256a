// OpenClaw 2026.9.6's own memory_get tool (extensions/memory-core/src/tools.ts,
// createMemoryGetTool, over read-file.ts's readMemoryFile), run from the installed package:
//   node tests/openclaw_get.mjs <openclaw package dir>   (the input as JSON on stdin)
//
// Input: {"workspace": dir, "extraPaths": [dir|file], "calls": [{path, from?, lines?, corpus?}]}
// Output: per call, the tool result's structured answer (`details`) and its text (the answer as
// JSON.stringify(answer, null, 2)), as [details, text]. The tool is built for agent "main" of
// a configuration whose default workspace is `workspace`; HOME and OPENCLAW_STATE_DIR should
// point at a scratch folder (the caller's job).
import { readdirSync, readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const dist = `${process.argv[2]}/dist`;

async function createMemoryGetTool() {
  for (const file of readdirSync(dist).filter((f) => f.startsWith("tools-") && f.endsWith(".mjs"))) {
    if (/export \{[^}]*\bcreateMemoryGetTool\b/.test(readFileSync(`${dist}/${file}`, "utf8"))) {
      return (await import(pathToFileURL(`${dist}/${file}`).href)).createMemoryGetTool;
    }
  }
  throw new Error("no tools-* chunk exports createMemoryGetTool");
}

let input = "";
for await (const part of process.stdin) input += part;
const cases = JSON.parse(input);

const config = { agents: { defaults: { workspace: cases.workspace } },
                 memory: { search: { extraPaths: cases.extraPaths ?? [] } } };
const tool = (await createMemoryGetTool())({ config, agentId: "main" });
if (!tool) throw new Error("OpenClaw built no memory_get tool for this configuration");
const out = [];
for (const call of cases.calls) {
  const result = await tool.execute("golden", call);
  out.push([result.details, result.content[0].text]);
}
process.stdout.write(JSON.stringify(out));
