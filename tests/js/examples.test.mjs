// The shipped examples and the fetched questions through the official JS SDK: every example
// of config/examples is sent unchanged to every contract of the shipped configuration
// (config/releasegate.toml, its demo keys) that covers its questions, and the questions of
// every contract, fetched from GET /v1/questions, are sent back unchanged. Run with
// tests/js/run.sh.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, beforeEach, describe, test } from "node:test";

import { TypeSafeClient } from "@typesafe-ai/sdk";

import { MULTI_KEY, REPO, shippedRecipients, startProxy, startShipped, Upstream } from "./harness.mjs";

const EXAMPLES = readdirSync(join(REPO, "config", "examples"))
  .filter((name) => name.endsWith(".json"))
  .sort();
const upstream = new Upstream();
let shipped;
let scripted;

before(async () => {
  await upstream.start();
  [shipped, scripted] = await Promise.all([startShipped(), startProxy(upstream)]);
});

after(async () => {
  await Promise.all([shipped?.stop(), scripted?.stop()]);
  await upstream.stop();
});

beforeEach(() => upstream.reset());

const sdk = (root, key) => new TypeSafeClient({ apiKey: key, baseURL: root, retry: { maxRetries: 0 }, logLevel: "off" });

/** GET {root}/v1/questions with `key`: the body's questions. */
async function fetchQuestions(root, key, headers = {}) {
  const response = await fetch(`${root}/v1/questions`, { headers: { Authorization: `Bearer ${key}`, ...headers } });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "application/json");
  assert.match(response.headers.get("x-request-id"), /^rg-[0-9a-f]{16}$/);
  return (await response.json()).questions;
}

/** Every asked question is answered with the fields the SDK's types promise for its type. */
function assertTyped(result, questions) {
  for (const [id, question] of Object.entries(questions)) {
    const answer = result.answers[id];
    assert.ok(answer, `${id} answered: ${JSON.stringify(result)}`);
    assert.equal(answer.type, question.type);
    if (question.type === "choice") {
      assert.equal(typeof answer.choice, "string");
      assert.ok(answer.choice in answer.probabilities, JSON.stringify(answer));
      assert.equal(typeof answer.confidence, "number");
    } else if (question.type === "score") {
      assert.equal(typeof answer.score, "number");
      assert.equal(typeof answer.confidence, "number");
      assert.equal(Object.keys(answer.legend).length, question.criteria.length);
    } else {
      assert.ok(answer.noul >= 0 && answer.noul <= 1, JSON.stringify(answer));
    }
  }
}

describe("shipped examples", () => {
  for (const name of EXAMPLES) {
    test(`${name} works unchanged on every shipped contract that covers it`, async () => {
      const request = JSON.parse(readFileSync(join(REPO, "config", "examples", name)));
      let sent = 0;
      for (const { key, contracts } of shippedRecipients()) {
        for (const contract of contracts) {
          const root = `${shipped.url}/contracts/${contract}`;
          const listed = await fetchQuestions(root, key);
          if (!Object.keys(request.questions).every((id) => id in listed)) continue;
          assertTyped(await sdk(root, key).systemOne(request), request.questions);
          sent += 1;
        }
      }
      assert.ok(sent > 0, `no shipped contract covers ${name}`);
    });
  }
});

describe("fetched questions", () => {
  test("every shipped contract's questions go back unchanged", async () => {
    for (const { key, contracts } of shippedRecipients()) {
      for (const contract of contracts) {
        const root = `${shipped.url}/contracts/${contract}`;
        const questions = await fetchQuestions(root, key);
        assert.ok(Object.keys(questions).length > 0, contract);
        const result = await sdk(root, key).systemOne({ model: "jev-latest", state: "a late parcel", questions });
        assertTyped(result, questions);
      }
    }
  });

  test("are what goes upstream, by path prefix and by header", async () => {
    const questions = await fetchQuestions(`${scripted.url}/contracts/full`, MULTI_KEY);
    assert.deepEqual(await fetchQuestions(scripted.url, MULTI_KEY, { "X-Release-Contract": "full" }), questions);
    assert.deepEqual(questions, {
      cause: { type: "choice", instructions: "Why?", criteria: { A: null, B: "b", C: null, D: null } },
      level: { type: "score", instructions: "How bad?", criteria: ["low", "mid", "high"] },
      urgent: { type: "noul", instructions: "Urgent?" },
    });
    const result = await sdk(`${scripted.url}/contracts/full`, MULTI_KEY).systemOne({ state: "s", questions });
    assert.equal(result.answers.cause.choice, "B");
    assert.equal(result.answers.urgent.noul, 0.8);
    assert.equal(upstream.seen.length, 1);
    assert.deepEqual(upstream.seen[0].body.questions, questions);
  });
});
