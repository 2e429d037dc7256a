// OpenClaw's own MCP client runtime, as its embedded agent runs use it, driven without a
// gateway: connect to the servers saved in $OPENCLAW_CONFIG_PATH (by `openclaw mcp set`),
// list the catalog, ask OpenClaw's approval rule about every tool, then execute the agent
// tools named in the calls argument and print everything as JSON.
//
//   node openclaw_client.mjs <openclaw package dir> '[["memq__memory_search", {"query": "x"}]]'
//
// The modules are OpenClaw internals of the pinned version (tests/test_openclaw_client.py
// checks it): dist/agents/*.js have stable names; the approval rule lives in a hashed chunk,
// found by its file prefix and its export alias.
import { readdirSync, readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [pkg, callsJson] = process.argv.slice(2);
const dist = `${pkg}/dist`;
const load = (file) => import(pathToFileURL(`${dist}/${file}`).href);

async function approvalRule() {
  const file = readdirSync(dist).find((f) => /^mcp-codex-tool-approval-[\w-]+\.mjs$/.test(f));
  if (!file) throw new Error(`no mcp-codex-tool-approval chunk in ${dist}`);
  const alias = /requiresMcpCodexToolApproval as (\w+)/.exec(readFileSync(`${dist}/${file}`, "utf8"));
  if (!alias) throw new Error(`${file} does not export requiresMcpCodexToolApproval`);
  return (await load(file))[alias[1]];
}

const cfg = JSON.parse(readFileSync(process.env.OPENCLAW_CONFIG_PATH, "utf8"));
const { createSessionMcpRuntime } = await load("agents/agent-bundle-mcp-runtime.js");
const { materializeBundleMcpToolsForRun } = await load("agents/agent-bundle-mcp-materialize.js");
const requiresApproval = await approvalRule();

const runtime = createSessionMcpRuntime({
  sessionId: "memq-openclaw-client-test",
  workspaceDir: process.cwd(),
  cfg,
  manifestRegistry: { plugins: [] },
});
const run = await materializeBundleMcpToolsForRun({
  runtime,
  disposeRuntime: () => runtime.dispose(),
});
try {
  const catalog = await runtime.getCatalog();
  const calls = [];
  for (const [name, input] of JSON.parse(callsJson)) {
    const tool = run.tools.find((t) => t.name === name);
    if (!tool) throw new Error(`OpenClaw has no agent tool ${name}`);
    calls.push(await tool.execute(`call-${calls.length + 1}`, input));
  }
  console.log(JSON.stringify({
    diagnostics: catalog.diagnostics ?? [],
    catalog: catalog.tools.map((t) => ({
      server: t.serverName,
      tool: t.toolName,
      title: t.title,
      annotations: t.codexAnnotations,
      // A prompting session posture (no full permission, no per-server override).
      needsApproval: requiresApproval({
        mode: catalog.servers[t.serverName]?.codexApprovalMode,
        fullPermission: false,
        annotations: t.codexAnnotations,
      }),
    })),
    unannotatedNeedsApproval: requiresApproval({ fullPermission: false, annotations: {} }),
    agentTools: run.tools.map((t) => ({ name: t.name, label: t.label })),
    calls,
  }));
} finally {
  await run.dispose();
}
