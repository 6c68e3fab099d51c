// Fixtures: a scripted local System One upstream and the real proxy binary.
//
// The proxy (PROXY_BIN, default target/debug/releasegate) starts on 127.0.0.1
// port 0 with a configuration written here, and reports its bound ports in its
// "listeners bound" log line. Its providers are the scripted upstream below and
// the embedded simulated provider (WCPQ with the shipped codebook).

import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const KEY = "js-conformance-key";
export const MULTI_KEY = "js-conformance-multi-key";
// Every view a contract may give an allowed question.
export const VIEWS = ["choice", "choice_confidence", "full_probabilities", "full_native"];
// The mechanisms, each on the choice question of its own full_native contract.
export const MECHANISMS = {
  none: '{ kind = "none" }',
  quantize: '{ kind = "quantize", step = 0.1 }',
  top_k: '{ kind = "top_k", k = 2 }',
  temperature: '{ kind = "temperature", tau = 2 }',
  gaussian: '{ kind = "gaussian", sigma = 0.05, seed = 7 }',
};

// What the scripted upstream answers by default: one answer per question of
// `questions()` (sdk.test.mjs), plus fields no release may pass on.
export const NATIVE = {
  model: "jev-1.13.0",
  id: "UPSTREAM-SECRET-ID",
  answers: {
    cause: {
      type: "choice",
      choice: "B",
      confidence: 0.61,
      rationale: "UPSTREAM-SECRET",
      probabilities: { D: 0.1, C: 0.05, B: 0.7, A: 0.15 },
    },
    level: {
      type: "score",
      score: 1.05,
      confidence: 0.92,
      legend: { 0: "UPSTREAM-SECRET" },
      probabilities: { 0: 0.0, 1: 0.95, 2: 0.05 },
    },
    urgent: { type: "noul", noul: 0.8 },
  },
  usage: { input_tokens: 392, output_tokens: 1, cost: "UPSTREAM-SECRET" },
};

/** A scripted answer cut to the questions the request asked, as a provider answers. */
function toAsked(request, body) {
  try {
    const native = JSON.parse(body);
    if (!native.answers || !request.questions) return body;
    native.answers = Object.fromEntries(
      Object.entries(native.answers).filter(([id]) => id in request.questions),
    );
    return JSON.stringify(native);
  } catch {
    return body;
  }
}

/** A System One provider whose answers the tests script. */
export class Upstream {
  constructor() {
    this.seen = [];
    this.queued = [];
    this.server = createServer((request, response) => this.#handle(request, response));
  }

  async start() {
    await new Promise((done) => this.server.listen(0, "127.0.0.1", done));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
  }

  async stop() {
    this.server.closeAllConnections();
    await new Promise((done) => this.server.close(done));
  }

  /** Answers the next request (only) with this status, JSON body and headers. */
  once(status, body = {}, headers = {}) {
    this.queued.push({ status, body: JSON.stringify(body), headers });
  }

  reset() {
    this.seen.length = 0;
    this.queued.length = 0;
  }

  #handle(request, response) {
    const chunks = [];
    request.on("data", (chunk) => chunks.push(chunk));
    request.on("end", () => {
      const body = Buffer.concat(chunks);
      if (request.method === "GET") {
        const models = { models: [{ name: "jev-latest", description: "d", release_date: "2026-09-15" }] };
        return this.#reply(response, { status: 200, body: JSON.stringify(models), headers: {} });
      }
      this.seen.push({ path: request.url, headers: request.headers, body: JSON.parse(body.toString()) });
      const script = this.queued.shift() ?? { status: 200, body: JSON.stringify(NATIVE), headers: {} };
      this.#reply(response, { ...script, body: toAsked(this.seen.at(-1).body, script.body) });
    });
  }

  #reply(response, { status, body, headers }) {
    response.writeHead(status, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
      ...headers,
    });
    response.end(body);
  }
}

const digest = (key) => createHash("sha256").update(key).digest("hex");

/** The three questions of `questions()`, each pinning the text the SDK sends for it. */
const questionsToml = (contract, view, provider = "up", cause = "") =>
  `[contracts.${contract}]\nprovider = "${provider}"\nusage = "keep"\n` +
  `forward_headers = ["TypeSafe-Danger-Zone-Images"]\n` +
  `[contracts.${contract}.questions.cause]\nclasses = ["A", "B", "C", "D"]\nview = "${view}"\n` +
  `instructions = "Why?"\ndescriptions = { B = "b" }\n${cause}` +
  `[contracts.${contract}.questions.level]\nclasses = ["0", "1", "2"]\nview = "${view}"\n` +
  `instructions = "How bad?"\ndescriptions = { "0" = "low", "1" = "mid", "2" = "high" }\n` +
  `[contracts.${contract}.questions.urgent]\nclasses = ["false", "true"]\nview = "${view}"\n` +
  `instructions = "Urgent?"\n`;

/** The delivery example's coarse question, as the shipped contracts pin it. */
const deliveryText = (contract) => {
  const request = JSON.parse(readFileSync(join(REPO, "config", "examples", "delivery-request.json")));
  const question = request.questions.coarse_cause;
  const lines = [`instructions = ${JSON.stringify(question.instructions)}`];
  lines.push(`[contracts.${contract}.questions.coarse_cause.descriptions]`);
  for (const [label, text] of Object.entries(question.criteria)) {
    lines.push(`${label} = ${JSON.stringify(text)}`);
  }
  return `${lines.join("\n")}\n`;
};

export const contractNames = () => [
  "full",
  ...VIEWS.map((view) => `view_${view}`),
  ...Object.keys(MECHANISMS).map((mechanism) => `mech_${mechanism}`),
  "coarse",
  "sim_planner",
];

function config(upstreamUrl) {
  const delivery = '["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"]';
  const codebook = join(REPO, "config", "codebooks", "delivery-coarse_cause.json");
  return (
    '[server]\nlisten = "127.0.0.1:0"\nadmin_listen = "127.0.0.1:0"\n' +
    "max_body_bytes = 65536\nshutdown_grace_ms = 500\n" +
    `[providers.up]\nkind = "systemone"\nbase_url = "${upstreamUrl}"\ntimeout_ms = 40000\n` +
    '[providers.sim]\nkind = "simulated"\n' +
    `[[recipients]]\nname = "one"\nkey_sha256 = "${digest(KEY)}"\ncontracts = ["full"]\n` +
    `[[recipients]]\nname = "multi"\nkey_sha256 = "${digest(MULTI_KEY)}"\ncontracts = ${JSON.stringify(contractNames())}\n` +
    questionsToml("full", "full_native") +
    VIEWS.map((view) => questionsToml(`view_${view}`, view)).join("") +
    Object.entries(MECHANISMS)
      .map(([name, table]) => questionsToml(`mech_${name}`, "full_native", "up", `mechanism = ${table}\n`))
      .join("") +
    questionsToml("coarse", "full_native", "up", 'coarsen = { A = "AB", B = "AB" }\n') +
    '[contracts.sim_planner]\nprovider = "sim"\n' +
    `[contracts.sim_planner.questions.coarse_cause]\nclasses = ${delivery}\nview = "full_native"\n` +
    `mechanism = { kind = "wcpq", codebook = "${codebook}", fallback = "native" }\n` +
    'workflows = { preset = "tuple-bench" }\n' +
    deliveryText("sim_planner")
  );
}

/** Starts the proxy binary against `upstream`; resolves to its URLs and a stop function. */
export async function startProxy(upstream) {
  const dir = mkdtempSync(join(tmpdir(), "releasegate-js-"));
  const path = join(dir, "releasegate.toml");
  writeFileSync(path, config(upstream.url));
  return serve(path, {}, dir);
}

/** The shipped configuration (config/releasegate.toml): its demo recipients and contracts. */
export const SHIPPED_CONFIG = join(REPO, "config", "releasegate.toml");

/** Each shipped recipient's demo key (`demo-NAME-key`, README "Try it") and its contracts. */
export function shippedRecipients() {
  const text = readFileSync(SHIPPED_CONFIG, "utf8");
  return text
    .split("[[recipients]]")
    .slice(1)
    .map((block) => ({
      key: `demo-${block.match(/^name = "([^"]+)"/m)[1]}-key`,
      contracts: JSON.parse(block.match(/^contracts = (\[[^\]]*\])/m)[1]),
    }));
}

/** Starts the proxy on the shipped configuration as it is, on loopback ports of its own. */
export async function startShipped() {
  const listeners = { RELEASEGATE_SERVER__LISTEN: "127.0.0.1:0", RELEASEGATE_SERVER__ADMIN_LISTEN: "127.0.0.1:0" };
  return serve(SHIPPED_CONFIG, listeners, null);
}

/** Starts the proxy binary on `path` with `extraEnv`; `dir` (if any) is removed on stop. */
async function serve(path, extraEnv, dir) {
  const binary = process.env.PROXY_BIN ?? join(REPO, "target", "debug", "releasegate");
  // The proxy reads RELEASEGATE_* variables as configuration: pass none on but ours.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("RELEASEGATE_")));
  Object.assign(env, extraEnv);
  env.RUST_LOG = "releasegate=info";
  const child = spawn(binary, ["serve", "--config", path, "--log-json"], {
    cwd: REPO,
    env,
    stdio: ["ignore", "ignore", "pipe"],
  });
  const logs = [];
  const bound = await new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`the proxy did not report its listeners:\n${logs.slice(-20).join("\n")}`)), 60_000);
    let rest = "";
    child.stderr.on("data", (chunk) => {
      rest += chunk.toString();
      const lines = rest.split("\n");
      rest = lines.pop();
      for (const line of lines) {
        logs.push(line);
        try {
          const fields = JSON.parse(line).fields ?? {};
          if (fields.message === "listeners bound") {
            clearTimeout(timer);
            done(fields);
          }
        } catch {
          // Not a JSON line.
        }
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`the proxy exited (${code}):\n${logs.slice(-20).join("\n")}`));
    });
  });
  return {
    url: `http://${bound.public}`,
    admin: `http://${bound.admin}`,
    logs,
    async metric(prefix, ...needles) {
      const text = await (await fetch(`${this.admin}/metrics`)).text();
      for (const line of text.split("\n")) {
        if (line.startsWith(prefix) && needles.every((needle) => line.includes(needle))) {
          return Number(line.slice(line.lastIndexOf(" ") + 1));
        }
      }
      return 0;
    },
    async stop() {
      const exited = new Promise((done) => child.once("exit", done));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(timer);
      if (dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}
