// OpenClaw's own memory embedding adapters, driven without a gateway: for each case read from
// stdin, create the adapter's provider with the case's options (what memory-core passes:
// config, provider, model, remote, dimensions, input types), embed the documents and the
// query against the case's server, and print what it reported (cache key data, widths) or the
// error it raised, as JSON.
//
//   node openclaw_embeddings.mjs <openclaw package dir> < '{"cases": [{"adapter": ...}]}'
//
// The adapters are OpenClaw internals of the pinned version (tests/test_provider_ids.py):
// they live in hashed chunks, found by file prefix and export alias.
import { readdirSync, readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const dist = `${process.argv[2]}/dist`;

async function exported(prefix, name) {
  for (const file of readdirSync(dist).filter((f) => f.startsWith(prefix) && f.endsWith(".mjs"))) {
    const alias = new RegExp(`\\b${name} as (\\w+)`).exec(readFileSync(`${dist}/${file}`, "utf8"));
    if (alias) return (await import(pathToFileURL(`${dist}/${file}`).href))[alias[1]];
  }
  throw new Error(`no chunk ${prefix}* exports ${name}`);
}

const registered = await exported("gateway-startup-plugin-config-", "getRegisteredEmbeddingProvider");
const adapters = {
  "openai-compatible": registered("openai-compatible").adapter,
  lmstudio: await exported("memory-embedding-adapter-", "lmstudioMemoryEmbeddingProviderAdapter"),
  gemini: await exported("memory-embedding-adapter-", "geminiMemoryEmbeddingProviderAdapter"),
};

let input = "";
for await (const chunk of process.stdin) input += chunk;
const out = [];
for (const c of JSON.parse(input).cases) {
  const adapter = adapters[c.adapter];
  // memory-core's resolveAdapterCreateOptions: the adapter's default model when none is set.
  const options = { ...c.options, model: c.options.model?.trim() || adapter.defaultModel || "" };
  try {
    const { provider, runtime } = await adapter.create(options);
    const documents = await provider.embedBatch(c.documents, { inputType: "document" });
    const query = await provider.embed(c.query, { inputType: "query" });
    out.push({ cacheKeyData: runtime.cacheKeyData ?? null,
               widths: [...documents.map((v) => v.length), query.length] });
  } catch (error) {
    out.push({ error: String(error?.message ?? error) });
  }
}
console.log(JSON.stringify(out));
