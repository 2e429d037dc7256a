// OpenClaw 2026.9.6's own rule for which memory notes decay and from when, run on the installed
// package. The functions (extensions/memory-core/src/memory/temporal-decay.ts) are not exported:
// the bundle's temporal-decay region is read from dist/extensions/memory-core/manager-runtime.js
// and evaluated as it is.
// argv[2]: the package's dist folder. stdin: {"paths": [...], "mtimeMs": n}.
// stdout: [[extractTimestamp ms or null, isEvergreenMemoryPath], ...] for source "memory", with
// every path's modification time n.
import { readFileSync } from "node:fs";
import fs$1 from "node:fs/promises";
import path from "node:path";

const dist = process.argv[2];
const bundle = readFileSync(path.join(dist, "extensions/memory-core/manager-runtime.js"), "utf8");
const start = bundle.indexOf("//#region extensions/memory-core/src/memory/temporal-decay.ts");
if (start < 0) throw new Error("no temporal-decay region in manager-runtime.js");
const region = bundle.slice(start, bundle.indexOf("//#endregion", start));
const decay = new Function("path", "fs$1",
  `${region}\nreturn { extractTimestamp, isEvergreenMemoryPath };`)(path, fs$1);

const input = JSON.parse(readFileSync(0, "utf8"));
const out = [];
for (const filePath of input.paths) {
  const when = await decay.extractTimestamp({
    filePath, source: "memory", memorySourceMtimes: new Map([[filePath, input.mtimeMs]]),
  });
  out.push([when === null ? null : when.getTime(), decay.isEvergreenMemoryPath(filePath)]);
}
process.stdout.write(JSON.stringify(out));
