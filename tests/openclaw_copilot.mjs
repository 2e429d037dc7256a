// OpenClaw's own GitHub Copilot memory embedding adapter, driven without a gateway: create its
// provider with the options read from stdin (what memory-core passes: config, model, remote),
// embed the documents and the query against the server those options name, and print the
// cache key data and vector widths it reported (or the error it raised) as JSON.
//
//   node openclaw_copilot.mjs <openclaw package dir> < '{"options": ..., "documents": [...], "query": "..."}'
import { pathToFileURL } from "node:url";

const dist = `${process.argv[2]}/dist`;
const { githubCopilotMemoryEmbeddingProviderAdapter: adapter } = await import(
  pathToFileURL(`${dist}/extensions/github-copilot/embeddings.js`).href);

let input = "";
for await (const chunk of process.stdin) input += chunk;
const c = JSON.parse(input);
try {
  const { provider, runtime } = await adapter.create({ config: {}, ...c.options });
  const documents = await provider.embedBatch(c.documents, { inputType: "document" });
  const query = await provider.embedBatch([c.query], { inputType: "query" });
  console.log(JSON.stringify({ model: provider.model, cacheKeyData: runtime.cacheKeyData,
                               widths: [...documents, ...query].map((v) => v.length) }));
} catch (error) {
  console.log(JSON.stringify({ error: String(error?.message ?? error) }));
}
