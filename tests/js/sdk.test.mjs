// The official JS SDK (@typesafe-ai/sdk, pinned in package-lock.json) against the real
// proxy: every view, answer type and mechanism reads as the SDK's types promise, errors
// raise the SDK's classes with the proxy's messages and request ids, retries, and the
// contract chosen by path or header. Run with tests/js/run.sh.

import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import {
  APIError,
  AuthenticationError,
  BadRequestError,
  choice,
  InternalServerError,
  noul,
  PermissionDeniedError,
  RateLimitError,
  score,
  TypeSafeClient,
  UnprocessableEntityError,
} from "@typesafe-ai/sdk";

import { KEY, MECHANISMS, MULTI_KEY, startProxy, Upstream, VIEWS } from "./harness.mjs";

const STATE = { ticket: "late parcel" };
const upstream = new Upstream();
let proxy;

before(async () => {
  await upstream.start();
  proxy = await startProxy(upstream);
});

after(async () => {
  await proxy?.stop();
  await upstream.stop();
});

beforeEach(() => upstream.reset());

/** The questions every scripted contract pins (the SDK sends exactly this text). */
const questions = () => ({
  cause: choice("Why?", { A: null, B: "b", C: null, D: null }),
  level: score("How bad?", ["low", "mid", "high"]),
  urgent: noul("Urgent?"),
});

const client = ({ key = MULTI_KEY, root = "", retry = { maxRetries: 0 }, headers } = {}) =>
  new TypeSafeClient({
    apiKey: key,
    baseURL: `${proxy.url}${root}`,
    retry,
    defaultHeaders: headers,
    logLevel: "off",
  });

const close = (a, b, what) => assert.ok(Math.abs(a - b) < 1e-9, `${what}: ${a} vs ${b}`);
const sum = (map) => Object.values(map).reduce((a, b) => a + b, 0);

/** Every field the SDK's types promise is there, with its JSON type. */
function assertTyped(result) {
  assert.equal(typeof result.model, "string");
  assert.ok(Number.isInteger(result.usage.input_tokens));
  assert.ok(Number.isInteger(result.usage.output_tokens));
  const { cause, level, urgent } = result.answers;
  assert.equal(cause.type, "choice");
  assert.equal(typeof cause.choice, "string");
  assert.equal(typeof cause.confidence, "number");
  assert.ok(cause.choice in cause.probabilities, JSON.stringify(cause));
  close(sum(cause.probabilities), 1, "cause sums to 1");
  assert.equal(level.type, "score");
  assert.equal(typeof level.score, "number");
  assert.equal(typeof level.confidence, "number");
  assert.deepEqual(level.legend, { 0: "low", 1: "mid", 2: "high" });
  assert.deepEqual(Object.keys(level.probabilities), ["0", "1", "2"]);
  close(sum(level.probabilities), 1, "level sums to 1");
  assert.equal(urgent.type, "noul");
  assert.equal(typeof urgent.noul, "number");
  // Nothing the provider sent besides the released fields.
  assert.ok(!JSON.stringify(result).includes("UPSTREAM-SECRET"), JSON.stringify(result));
}

describe("views", () => {
  // What each view releases of NATIVE, with the complete shape's fills.
  const expected = {
    choice: { cause: [{ A: 0, B: 1, C: 0, D: 0 }, 1], level: [1, 1], urgent: 1 },
    choice_confidence: {
      cause: [{ A: 0.0975, B: 0.7075, C: 0.0975, D: 0.0975 }, 0.61],
      level: [1, 0.92],
      urgent: 1,
    },
    full_probabilities: { cause: [{ A: 0.15, B: 0.7, C: 0.05, D: 0.1 }, 0.6], level: [1.05, null], urgent: 0.8 },
    full_native: { cause: [{ A: 0.15, B: 0.7, C: 0.05, D: 0.1 }, 0.61], level: [1.05, 0.92], urgent: 0.8 },
  };
  for (const view of VIEWS) {
    test(`${view} parses into the SDK's typed answers`, async () => {
      const { data, requestId } = await client({ root: `/contracts/view_${view}` })
        .systemOne({ state: STATE, questions: questions() })
        .withResponse();
      assert.match(requestId, /^rg-[0-9a-f]{16}$/);
      assertTyped(data);
      const want = expected[view];
      const { cause, level, urgent } = data.answers;
      assert.equal(cause.choice, "B");
      for (const [label, p] of Object.entries(want.cause[0])) {
        close(cause.probabilities[label], p, `${view} p(${label})`);
      }
      close(cause.confidence, want.cause[1], `${view} confidence`);
      close(level.score, want.level[0], `${view} score`);
      if (want.level[1] !== null) close(level.confidence, want.level[1], `${view} score confidence`);
      close(urgent.noul, want.urgent, `${view} noul`);
      // Canonical class order, whatever order the provider used.
      assert.deepEqual(Object.keys(cause.probabilities), ["A", "B", "C", "D"]);
    });
  }
});

describe("mechanisms", () => {
  for (const mechanism of Object.keys(MECHANISMS)) {
    test(`${mechanism} releases answers the SDK reads`, async () => {
      const sdk = client({ root: `/contracts/mech_${mechanism}` });
      const result = await sdk.systemOne({ state: STATE, questions: questions() });
      const { cause } = result.answers;
      assert.equal(cause.type, "choice");
      assert.equal(cause.choice, "B");
      assert.equal(typeof cause.confidence, "number");
      const values = Object.values(cause.probabilities);
      assert.ok(values.every((p) => p >= 0 && p <= 1), JSON.stringify(cause));
      if (mechanism !== "top_k") close(sum(cause.probabilities), 1, `${mechanism} sums to 1`);
      if (mechanism === "quantize") {
        for (const p of values) close(Math.round(p * 10) / 10, p, "a multiple of 0.1");
      } else if (mechanism === "top_k") {
        // The two largest as sent, the others omitted: a partial map the SDK accepts.
        assert.deepEqual(cause.probabilities, { A: 0.15, B: 0.7 });
      } else if (mechanism === "temperature") {
        const roots = { A: Math.sqrt(0.15), B: Math.sqrt(0.7), C: Math.sqrt(0.05), D: Math.sqrt(0.1) };
        const total = sum(roots);
        for (const [label, root] of Object.entries(roots)) {
          close(cause.probabilities[label], root / total, `tau 2 p(${label})`);
        }
      } else if (mechanism === "gaussian") {
        // Seeded: the same request gets the same noise.
        const again = await sdk.systemOne({ state: STATE, questions: questions() });
        assert.deepEqual(again.answers.cause, cause);
      } else {
        assert.deepEqual(cause.probabilities, { A: 0.15, B: 0.7, C: 0.05, D: 0.1 });
      }
    });
  }

  test("wcpq on the simulated provider releases a complete answer", async () => {
    const request = JSON.parse(
      (await import("node:fs")).readFileSync(new URL("../../config/examples/delivery-request.json", import.meta.url)),
    );
    const { instructions, criteria } = request.questions.coarse_cause;
    const result = await client({ root: "/contracts/sim_planner" }).systemOne({
      model: request.model,
      state: request.state,
      questions: { coarse_cause: choice(instructions, criteria) },
    });
    const answer = result.answers.coarse_cause;
    assert.equal(answer.type, "choice");
    assert.deepEqual(Object.keys(answer.probabilities), ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"]);
    assert.ok(answer.choice in answer.probabilities);
    assert.equal(typeof answer.confidence, "number");
    close(sum(answer.probabilities), 1, "wcpq sums to 1");
  });

  test("coarsened labels are the contract's, not the request's", async () => {
    const result = await client({ root: "/contracts/coarse" }).systemOne({ state: STATE, questions: questions() });
    const { cause } = result.answers;
    // The SDK's type says "A" | "B" | "C" | "D"; the value is the coarse label.
    assert.equal(cause.choice, "AB");
    assert.deepEqual(Object.keys(cause.probabilities), ["AB", "C", "D"]);
    close(cause.probabilities.AB, 0.85, "AB = A + B");
  });
});

describe("contract selection", () => {
  test("by path prefix and by header, and the single contract of a key", async () => {
    const byPath = await client({ root: "/contracts/view_choice" }).systemOne({ state: STATE, questions: questions() });
    close(byPath.answers.urgent.noul, 1, "choice view by path");
    const byHeader = await client({ headers: { "X-Release-Contract": "view_choice" } }).systemOne({
      state: STATE,
      questions: questions(),
    });
    assert.deepEqual(byHeader.answers, byPath.answers);
    const single = await client({ key: KEY }).systemOne({ state: STATE, questions: questions() });
    close(single.answers.urgent.noul, 0.8, "the full contract");
    // The models list goes through the same selection.
    const models = await client({ root: "/contracts/full" }).models.list();
    assert.deepEqual(
      models.map((m) => m.name),
      ["jev-latest"],
    );
  });
});

describe("errors", () => {
  const errorOf = async (call, Class) => {
    const error = await call().then(
      () => assert.fail("expected an error"),
      (error) => error,
    );
    assert.ok(error instanceof Class, `${error?.constructor?.name}: ${error?.message}`);
    assert.match(error.requestId ?? "", /^rg-/, "the proxy's request id");
    return error;
  };

  test("each status raises the SDK's class with the proxy's message", async () => {
    let error = await errorOf(
      () => client({ key: "wrong-key" }).systemOne({ state: STATE, questions: questions() }),
      AuthenticationError,
    );
    assert.match(error.message, /invalid API key/);
    error = await errorOf(
      () => client({ headers: { "X-Release-Contract": "nope" } }).systemOne({ state: STATE, questions: questions() }),
      PermissionDeniedError,
    );
    assert.equal(error.body.detail.error_type, "permission_denied");
    error = await errorOf(
      () => client({ key: KEY }).systemOne({ state: STATE, questions: { ...questions(), secret: noul("Internal?") } }),
      PermissionDeniedError,
    );
    assert.equal(error.body.detail.error_type, "question_not_released");
    assert.match(error.message, /question `secret` is not released/);
    error = await errorOf(
      () =>
        client({ key: KEY }).systemOne({
          state: STATE,
          questions: { ...questions(), cause: choice("Why?", { A: null, B: "b" }) },
        }),
      BadRequestError,
    );
    assert.equal(error.body.detail.error_type, "invalid_request");
    // The SDK validates nothing of a choice's criteria: a number reaches the schema check.
    error = await errorOf(
      () =>
        client({ key: KEY }).systemOne({
          state: STATE,
          questions: { ...questions(), cause: { type: "choice", criteria: { A: 5, B: null, C: null, D: null } } },
        }),
      UnprocessableEntityError,
    );
    assert.match(error.message, /questions\.cause\.choice\.criteria\.A\.str: Input should be a valid string/);
    error = await errorOf(
      () => client({ key: KEY }).systemOne({ state: "x".repeat(70_000), questions: questions() }),
      APIError,
    );
    assert.equal(error.status, 413);
    assert.equal(error.body.detail.error_type, "request_too_large");
    assert.equal(upstream.seen.length, 0, "nothing refused reached the provider");
  });

  test("provider errors keep their kind, never their text", async () => {
    upstream.once(400, { detail: { error_type: "max_tokens_exceeded", message: "UPSTREAM-SECRET" } });
    let error = await errorOf(() => client({ key: KEY }).systemOne({ state: STATE, questions: questions() }), BadRequestError);
    assert.equal(error.body.detail.error_type, "max_tokens_exceeded");
    assert.ok(!error.message.includes("UPSTREAM-SECRET"), error.message);
    upstream.once(422, { detail: [{ loc: ["body", "state", "ticket"], msg: "UPSTREAM-SECRET", type: "string_type" }] });
    error = await errorOf(
      () => client({ key: KEY }).systemOne({ state: STATE, questions: questions() }),
      UnprocessableEntityError,
    );
    assert.deepEqual(error.body.detail, [
      { loc: ["body", "state", "ticket"], msg: "Input should be a valid string", type: "string_type" },
    ]);
    upstream.once(503, { detail: "UPSTREAM-SECRET" });
    error = await errorOf(() => client({ key: KEY }).systemOne({ state: STATE, questions: questions() }), InternalServerError);
    assert.equal(error.status, 502);
    upstream.once(429, {}, { "retry-after-ms": "1500" });
    error = await errorOf(() => client({ key: KEY }).systemOne({ state: STATE, questions: questions() }), RateLimitError);
    assert.equal(error.retryAfterMs, 1500);
    assert.equal(error.headers.get("retry-after"), "2");
  });
});

describe("retries", () => {
  test("429 and 5xx are retried with the retry count forwarded", async () => {
    upstream.once(429, {}, { "retry-after-ms": "10" });
    upstream.once(500, {});
    const result = await client({ key: KEY, retry: { maxRetries: 2, backoffInitialMs: 1, backoffMaxMs: 5 } }).systemOne({
      state: STATE,
      questions: questions(),
    });
    assertTyped(result);
    assert.equal(upstream.seen.length, 3);
    assert.equal(upstream.seen[0].headers["x-typesafe-retry-count"], undefined);
    assert.equal(upstream.seen[2].headers["x-typesafe-retry-count"], "2");
    assert.match(upstream.seen[2].headers["x-typesafe-sdk"], /^typesafe-sdk\/0\.6\.0$/);
  });
});

describe("headers", () => {
  test("a contract's forward_headers reach the provider; the caller's key does not", async () => {
    await client({ key: KEY }).systemOne(
      { state: STATE, questions: questions() },
      { headers: { "TypeSafe-Danger-Zone-Images": "true", "X-Other": "CALLER-SECRET" } },
    );
    const seen = upstream.seen[0];
    assert.equal(seen.headers["typesafe-danger-zone-images"], "true");
    assert.equal(seen.headers["x-other"], undefined);
    assert.ok(!JSON.stringify(seen.headers).includes(KEY));
    assert.equal(
      await proxy.metric("releasegate_forwarded_headers_total", 'contract="full"', "typesafe-danger-zone-images"),
      1,
    );
    // What went upstream is the contract's question, rebuilt.
    assert.deepEqual(seen.body.questions.cause, { type: "choice", instructions: "Why?", criteria: { A: null, B: "b", C: null, D: null } });
  });
});
