// Shared by the tests/openclaw_*.mjs scripts: reaching into the installed OpenClaw package's
// bundled dist. `exported` finds the chunk file (its name starts with `prefix`) that exports
// `name` under a minified alias and imports it; `region` is the source text of one of
// manager-runtime.js's `//#region` blocks (functions the package does not export).
import { readdirSync, readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

export async function exported(dist, prefix, name) {
  for (const file of readdirSync(dist).filter((f) => f.startsWith(prefix) && f.endsWith(".mjs"))) {
    const alias = new RegExp(`\\b${name} as (\\w+)`).exec(readFileSync(`${dist}/${file}`, "utf8"));
    if (alias) return (await import(pathToFileURL(`${dist}/${file}`).href))[alias[1]];
  }
  throw new Error(`no chunk ${prefix}* exports ${name}`);
}

export function region(dist, name) {
  const text = readFileSync(`${dist}/extensions/memory-core/manager-runtime.js`, "utf8");
  const start = text.indexOf(`//#region extensions/memory-core/src/memory/${name}`);
  if (start < 0) throw new Error(`no region ${name}`);
  return text.slice(start, text.indexOf("//#endregion", start));
}
