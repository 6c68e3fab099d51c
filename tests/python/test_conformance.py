"""Conformance with the official Python SDK (typesafe-sdk 0.7.5, sync and async).

Every call sends a body of more than 1 KiB, so the SDK compresses it with
zstd; the proxy must decode it, check it, release the answer, and answer in
the shapes and headers the SDK reads.
"""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import httpx2
import pytest
from conftest import KEY, MULTI_KEY, REPO, VIEWS, wait_until
from typesafe_sdk import (
    AsyncTypeSafeClient,
    Box,
    Image,
    Choice,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeAPIError,
    TypeSafeAuthenticationError,
    TypeSafeBadRequestError,
    TypeSafeClient,
    TypeSafeInternalServerError,
    TypeSafeNotFoundError,
    TypeSafePermissionDeniedError,
    TypeSafeRateLimitError,
    TypeSafeUnprocessableEntityError,
)

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
NO_RETRY = RetryPolicy(max_retries=0)
# Fast retries for errors without retry-after (the proxy's 502).
QUICK = dict(backoff_initial=0.01, backoff_max=0.05)

# The release views whose answers leave out a field the SDK requires: they
# parse once every release is schema-complete (then empty this set).
STATE = {
    "ticket": "The parcel was marked delivered but never arrived; the customer needs it for Saturday. " * 12,
    "order": "SHP-118204",
}


def questions():
    return {
        "cause": Choice(instructions="Why?", criteria={"A": None, "B": "b", "C": None, "D": None}),
        "level": Score(instructions="How bad?", criteria=["low", "mid", "high"]),
        "urgent": Noul(instructions="Urgent?"),
    }


def client(proxy, key=KEY, retry=NO_RETRY, root="", **options):
    return TypeSafeClient(api_key=key, base_url=proxy.url + root, retry=retry, model="jev-latest", **options)


def assert_full_native(result):
    cause = result.choices["cause"]
    assert cause.choice == "B"
    assert cause.confidence == 0.61
    assert cause.probabilities == {"A": 0.15, "B": 0.7, "C": 0.05, "D": 0.1}
    level = result.scores["level"]
    assert level.score == 1.05
    assert level.confidence == 0.92
    assert level.legend == {0: "low", 1: "mid", 2: "high"}
    assert level.probabilities == {0: 0.0, 1: 0.95, 2: 0.05}
    assert result.nouls["urgent"].noul == 0.8
    assert result.model == "jev-1.13.0"
    assert result.usage.input_tokens == 392 and result.usage.output_tokens == 1


def assert_request_id(result_or_error, raw_headers):
    request_id = result_or_error.request_id
    assert request_id.startswith("rg-")
    assert request_id == raw_headers["x-request-id"]


def test_sync_client_sends_zstd_and_reads_typed_answers(proxy, upstream):
    sent = []
    http = httpx2.Client(event_hooks={"request": [sent.append]}, trust_env=False, timeout=30)
    with client(proxy, http_client=http) as sdk:
        result = sdk.system_one(STATE, questions())
    assert_full_native(result)
    assert_request_id(result, result.raw_http_response.headers)
    assert "UPSTREAM-SECRET" not in result.raw_http_response.text
    # The SDK compressed the body with zstd ...
    (request,) = sent
    assert request.headers["content-encoding"] == "zstd"
    assert request.content.startswith(ZSTD_MAGIC)
    # ... and the proxy decoded it: the provider got the plain JSON request.
    (seen,) = upstream.seen
    assert "content-encoding" not in seen.headers
    forwarded = json.loads(seen.body)
    assert forwarded["state"] == STATE
    assert list(forwarded["questions"]) == ["cause", "level", "urgent"]
    assert seen.headers["x-typesafe-sdk"] == "typesafe-sdk/0.7.5"
    assert "authorization" not in seen.headers or KEY not in seen.headers["authorization"]


def test_async_client_reads_typed_answers_concurrently(proxy, upstream):
    async def main():
        async with AsyncTypeSafeClient(api_key=KEY, base_url=proxy.url, retry=NO_RETRY) as sdk:
            return await asyncio.gather(*(sdk.system_one(STATE, questions()) for _ in range(4)))

    results = asyncio.run(main())
    ids = set()
    for result in results:
        assert_full_native(result)
        assert_request_id(result, result.raw_http_response.headers)
        ids.add(result.request_id)
    assert len(ids) == 4, "each response has its own request id"
    assert upstream.count() == 4


def test_models_are_listed(proxy, upstream):
    with client(proxy) as sdk:
        listed = sdk.models.list()
    assert [model.name for model in listed.models] == ["jev-latest"]
    assert listed.request_id.startswith("rg-")


def test_a_key_bound_to_several_contracts_chooses_by_header_or_path(proxy, upstream):
    with client(proxy, key=MULTI_KEY, headers={"X-Release-Contract": "full"}) as sdk:
        assert_full_native(sdk.system_one(STATE, questions()))
    with client(proxy, key=MULTI_KEY, root="/contracts/full") as sdk:
        assert_full_native(sdk.system_one(STATE, questions()))
        assert [model.name for model in sdk.models.list().models] == ["jev-latest"]
    with client(proxy, key=MULTI_KEY) as sdk, pytest.raises(TypeSafeBadRequestError) as raised:
        sdk.system_one(STATE, questions())
    error = raised.value
    assert error.body["detail"]["error_type"] == "contract_required"
    assert "X-Release-Contract" in str(error)
    assert_request_id(error, error.headers)
    with client(proxy, key=MULTI_KEY, root="/contracts/full", headers={"X-Release-Contract": "saturable"}) as sdk:
        with pytest.raises(TypeSafeBadRequestError) as raised:
            sdk.system_one(STATE, questions())
    assert raised.value.body["detail"]["error_type"] == "contract_conflict"


def error_of(call, expected):
    with pytest.raises(expected) as raised:
        call()
    error = raised.value
    assert type(error) is expected, f"{type(error).__name__}: {error}"
    assert_request_id(error, error.headers)
    return error


def test_each_status_raises_its_exception_with_a_useful_message(proxy, upstream):
    with client(proxy, key="wrong-key") as sdk:
        error = error_of(lambda: sdk.system_one(STATE, questions()), TypeSafeAuthenticationError)
    assert "invalid API key" in str(error)
    with client(proxy, key=MULTI_KEY, headers={"X-Release-Contract": "nope"}) as sdk:
        error = error_of(lambda: sdk.system_one(STATE, questions()), TypeSafePermissionDeniedError)
    assert error.body["detail"]["error_type"] == "permission_denied"
    with client(proxy) as sdk:
        outside = {**questions(), "secret": Noul(instructions="Internal?")}
        # A question the contract does not release: 403 naming it, never a missing answer.
        error = error_of(lambda: sdk.system_one(STATE, outside), TypeSafePermissionDeniedError)
        assert error.body["detail"]["error_type"] == "question_not_released"
        assert "question `secret` is not released" in str(error)
        # Schema errors: FastAPI's list, which the SDK renders as `loc: msg`.
        malformed = {**questions(), "cause": {"type": "choice", "criteria": {"A": 5, "B": None, "C": None, "D": None}}}
        error = error_of(lambda: sdk.system_one(STATE, malformed), TypeSafeUnprocessableEntityError)
        assert "questions.cause.choice.criteria.A.str: Input should be a valid string" in str(error)
        assert error.body["detail"][0] == {
            "loc": ["body", "questions", "cause", "choice", "criteria", "A", "str"],
            "msg": "Input should be a valid string",
            "type": "string_type",
        }
        unknown = {**questions(), "cause": {"type": "ranking"}}
        error = error_of(lambda: sdk.system_one(STATE, unknown), TypeSafeUnprocessableEntityError)
        assert error.body["detail"][0]["type"] == "union_tag_invalid"
        assert "ranking" not in json.dumps(error.body), "the input is not echoed"
        # A zstd body that is small on the wire but over the limit once decoded.
        huge = {"ticket": "x" * 200_000}
        error = error_of(lambda: sdk.system_one(huge, questions()), TypeSafeAPIError)
        assert error.status == 413 and error.body["detail"]["error_type"] == "request_too_large"
    with client(proxy, root="/nowhere") as sdk:
        error = error_of(lambda: sdk.system_one(STATE, questions()), TypeSafeNotFoundError)
    assert error.body["detail"]["error_type"] == "not_found"
    assert upstream.count() == 0, "refused requests never reach the provider"


def test_throttling_overload_and_provider_failures_are_retried(proxy, upstream):
    upstream.once(429, headers={"retry-after": "0"})
    upstream.once(529, headers={"retry-after": "0"})
    upstream.once(503)  # the proxy answers 502 for a provider 5xx
    with client(proxy, retry=RetryPolicy(max_retries=3, **QUICK)) as sdk:
        result = sdk.system_one(STATE, questions())
    assert_full_native(result)
    retry_counts = [seen.headers.get("x-typesafe-retry-count") for seen in upstream.seen]
    assert retry_counts == [None, "1", "2", "3"]


def test_exhausted_retries_raise_the_last_status(proxy, upstream):
    for _ in range(2):
        upstream.once(429, headers={"retry-after": "0", "retry-after-ms": "0"})
    with client(proxy, retry=RetryPolicy(max_retries=1)) as sdk:
        error = error_of(lambda: sdk.system_one(STATE, questions()), TypeSafeRateLimitError)
    assert error.retry_after_ms == 0
    assert error.body["detail"]["error_type"] == "rate_limited"
    assert upstream.count() == 2
    upstream.reset()
    for _ in range(2):
        upstream.once(500, body=b'{"detail": "UPSTREAM-SECRET"}')
    with client(proxy, retry=RetryPolicy(max_retries=1, **QUICK)) as sdk:
        error = error_of(lambda: sdk.system_one(STATE, questions()), TypeSafeInternalServerError)
    assert error.status == 502 and error.body["detail"]["error_type"] == "upstream_error"
    assert "UPSTREAM-SECRET" not in str(error.body)
    assert "retry-after" not in error.headers
    assert upstream.count() == 2


def test_a_saturated_provider_sheds_with_retry_after_and_the_sdk_waits(proxy, upstream):
    saturable = dict(key=MULTI_KEY, root="/contracts/saturable")
    shed_before = proxy.metric("releasegate_upstream_errors_total", "saturated", '"narrow"')
    upstream.gate.clear()
    with ThreadPoolExecutor(max_workers=2) as pool:
        try:
            # The provider's only slot is taken by a request the upstream holds.
            with client(proxy, **saturable) as holder_sdk:
                held = pool.submit(holder_sdk.system_one, STATE, questions())
                wait_until(lambda: upstream.count() == 1, "the held request")
                with client(proxy, **saturable) as sdk:
                    error = error_of(lambda: sdk.system_one(STATE, questions()), TypeSafeInternalServerError)
                assert error.status == 503
                assert error.headers["retry-after"] == "1"
                assert error.body["detail"]["error_type"] == "upstream_saturated"
                # A retrying client is shed too, waits the 1 s retry-after, and gets through
                # once the slot frees.
                with client(proxy, retry=RetryPolicy(max_retries=4, **QUICK), **saturable) as patient_sdk:
                    patient = pool.submit(patient_sdk.system_one, STATE, questions())
                    wait_until(
                        lambda: proxy.metric("releasegate_upstream_errors_total", "saturated", '"narrow"')
                        >= shed_before + 2,
                        "the patient client's first attempt to be shed",
                    )
                    upstream.gate.set()
                    assert_full_native(held.result(timeout=30))
                    assert_full_native(patient.result(timeout=30))
        finally:
            upstream.gate.set()
    patient_seen = upstream.seen[-1]
    assert int(patient_seen.headers["x-typesafe-retry-count"]) >= 1


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_parses_into_typed_answers(proxy, upstream, view):
    with client(proxy, key=MULTI_KEY, root=f"/contracts/view_{view}") as sdk:
        result = sdk.system_one(STATE, questions())
    cause, level, urgent = result.choices["cause"], result.scores["level"], result.nouls["urgent"]
    has_probabilities = view in ("full_probabilities", "full_native")
    has_confidence = view in ("choice_confidence", "full_native")
    assert cause.choice == "B"
    assert level.legend == {0: "low", 1: "mid", 2: "high"}
    assert level.score == (1.05 if has_probabilities else 1.0)
    assert urgent.noul == (0.8 if has_probabilities else 1.0)
    if has_probabilities:
        assert cause.probabilities == {"A": 0.15, "B": 0.7, "C": 0.05, "D": 0.1}
        assert level.probabilities == {0: 0.0, 1: 0.95, 2: 0.05}
    else:
        assert cause.probabilities != {"A": 0.15, "B": 0.7, "C": 0.05, "D": 0.1}
    if has_confidence:
        assert (cause.confidence, level.confidence) == (0.61, 0.92)
    else:
        assert cause.confidence != 0.61 and level.confidence != 0.92


@pytest.mark.parametrize("contract", ["sim_auditor", "sim_planner"])
def test_the_simulated_provider_through_the_sdk(proxy, upstream, contract):
    request = json.loads((REPO / "config" / "examples" / "delivery-request.json").read_text())
    async def main():
        async with AsyncTypeSafeClient(
            api_key=MULTI_KEY, base_url=f"{proxy.url}/contracts/{contract}", retry=NO_RETRY
        ) as sdk:
            return await sdk.system_one(request["state"], request["questions"], model=request["model"])

    result = asyncio.run(main())
    cause = result.choices["coarse_cause"]
    labels = {"DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"}
    assert cause.choice in labels
    assert set(cause.probabilities) == labels
    assert abs(sum(cause.probabilities.values()) - 1) < 1e-6
    assert 0 <= cause.confidence <= 1
    assert result.request_id.startswith("rg-")
    assert upstream.count() == 0, "answered in-process"


# A tiny PNG and JPEG (their signatures and some bytes: the proxy checks the signature, the
# scripted upstream only compares bytes).
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"py-conformance-png" * 80
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF" + b"py-conformance-jpeg" * 80


def multipart_parts(seen):
    """The (name, content type, bytes) parts of a multipart body the upstream received."""
    content_type = seen.headers["content-type"]
    assert content_type.startswith("multipart/form-data; boundary="), content_type
    delimiter = b"--" + content_type.split("boundary=", 1)[1].encode()
    parts = []
    for chunk in seen.body.split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, content = chunk.partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().strip().split("\r\n"))
        name = headers["Content-Disposition"].split('name="', 1)[1].split('"', 1)[0]
        parts.append((name, headers["Content-Type"], content[: -len(b"\r\n")]))
    return parts


def assert_images_forwarded(seen):
    parts = multipart_parts(seen)
    assert [name for name, _, _ in parts] == ["request", "asset-0", "asset-1"]
    request = json.loads(parts[0][2])
    # The contract's questions went up, and the assets name the proxy's own parts.
    assert request["questions"]["cause"]["instructions"] == "Why?"
    assert sorted(entry["part"] for entry in request["assets"].values()) == ["asset-0", "asset-1"]
    assert {(kind, data) for _, kind, data in parts[1:]} == {("image/png", PNG), ("image/jpeg", JPEG)}
    # The proxy decoded the caller's body; what goes upstream is its own, uncompressed.
    assert "content-encoding" not in seen.headers


@pytest.mark.parametrize("compression", ["zstd", False])
def test_image_requests_go_through_as_multipart(proxy, upstream, compression):
    photo, label = Image(PNG), Image(JPEG)
    state = {**STATE, "photo": photo, "label": label}
    with client(proxy, compression=compression) as sdk:
        result = sdk.system_one(state, questions())
    assert_full_native(result)
    seen = upstream.seen[-1]
    assert_images_forwarded(seen)
    # Images passed by name in `assets` work the same way.
    with client(proxy, compression=compression) as sdk:
        result = sdk.system_one({**STATE, "photo": "<photo>", "label": "<label>"}, questions(), assets={"<photo>": photo, "<label>": label})
    assert_full_native(result)
    assert_images_forwarded(upstream.seen[-1])


@pytest.mark.parametrize("compression", ["zstd", False])
def test_async_image_requests_go_through_as_multipart(proxy, upstream, compression):
    async def main():
        async with AsyncTypeSafeClient(api_key=KEY, base_url=proxy.url, retry=NO_RETRY, model="jev-latest", compression=compression) as sdk:
            return await sdk.system_one({**STATE, "photo": Image(PNG), "label": Image(JPEG)}, questions())

    assert_full_native(asyncio.run(main()))
    assert_images_forwarded(upstream.seen[-1])


def test_an_image_that_is_not_png_or_jpeg_is_refused(proxy, upstream):
    with client(proxy) as sdk:
        error = error_of(lambda: sdk.system_one({**STATE, "photo": Image(b"GIF89a" * 100)}, questions()), TypeSafeBadRequestError)
    assert error.body["detail"]["error_type"] == "invalid_asset"
    assert upstream.count() == 0


def test_danger_zone_headers_are_forwarded_when_the_contract_allows_them(proxy, upstream):
    with client(proxy) as sdk:
        sdk.system_one(STATE, questions(), extra_headers={"TypeSafe-Danger-Zone-Images": "true", "X-Other": "CALLER-SECRET"})
    seen = upstream.seen[-1]
    assert seen.headers["typesafe-danger-zone-images"] == "true"
    assert "x-other" not in seen.headers
    assert proxy.metric("releasegate_forwarded_headers_total", 'contract="full"', "typesafe-danger-zone-images") >= 1


def test_provider_error_kinds_reach_the_sdk_without_the_providers_text(proxy, upstream):
    upstream.once(400, json.dumps({"detail": {"error_type": "max_tokens_exceeded", "message": "UPSTREAM-SECRET"}}).encode())
    with client(proxy) as sdk:
        error = error_of(lambda: sdk.system_one(STATE, questions()), TypeSafeBadRequestError)
    assert error.body["detail"]["error_type"] == "max_tokens_exceeded"
    assert "token limit" in str(error) and "UPSTREAM-SECRET" not in str(error)
    upstream.once(422, json.dumps({"detail": [{"loc": ["body", "state", "order"], "msg": "UPSTREAM-SECRET", "type": "string_type"}]}).encode())
    with client(proxy) as sdk:
        error = error_of(lambda: sdk.system_one(STATE, questions()), TypeSafeUnprocessableEntityError)
    assert "state.order: Input should be a valid string" in str(error)
    assert "UPSTREAM-SECRET" not in json.dumps(error.body)


BOXED = {
    "model": "jev-1.13.0",
    "answers": {
        "dent": {"type": "box", "box": {"top": 0.123, "bottom": 0.456, "left": 0.2, "right": 0.97}, "confidence": 0.734, "rationale": "UPSTREAM-SECRET"},
        "cause": {"type": "choice", "choice": "B", "confidence": 0.61, "probabilities": {"D": 0.1, "C": 0.05, "B": 0.7, "A": 0.15}},
    },
    "usage": {"input_tokens": 392, "output_tokens": 1},
}


def box_questions():
    return {
        "dent": Box(instructions="Where is the dent?"),
        "cause": Choice(instructions="Why?", criteria={"A": None, "B": "b", "C": None, "D": None}),
    }


def assert_box_released(result, seen):
    dent = result.boxes["dent"]
    assert (dent.box.top, dent.box.bottom, dent.box.left, dent.box.right) == (0.1, 0.45, 0.2, 0.95)
    assert dent.confidence == 0.75
    assert result.choices["cause"].choice == "B"
    # Upstream: the contract's box question, with the image and the header the contract allows.
    parts = multipart_parts(seen)
    request = json.loads(parts[0][2])
    assert request["questions"]["dent"] == {"type": "box", "instructions": "Where is the dent?"}
    assert seen.headers["typesafe-danger-zone-images"] == "true"


def test_box_questions_with_an_image_come_back_quantized(proxy, upstream):
    upstream.once(200, json.dumps(BOXED).encode())
    with client(proxy, key=MULTI_KEY, root="/contracts/boxes") as sdk:
        result = sdk.system_one({**STATE, "photo": Image(PNG)}, box_questions(), extra_headers={"TypeSafe-Danger-Zone-Images": "true"})
    assert_box_released(result, upstream.seen[-1])


def test_async_box_questions_come_back_quantized(proxy, upstream):
    upstream.once(200, json.dumps(BOXED).encode())

    async def main():
        async with AsyncTypeSafeClient(api_key=MULTI_KEY, base_url=proxy.url + "/contracts/boxes", retry=NO_RETRY, model="jev-latest") as sdk:
            return await sdk.system_one({**STATE, "photo": Image(PNG)}, box_questions(), extra_headers={"TypeSafe-Danger-Zone-Images": "true"})

    assert_box_released(asyncio.run(main()), upstream.seen[-1])


def test_an_invalid_box_never_reaches_the_sdk(proxy, upstream):
    broken = json.loads(json.dumps(BOXED))
    broken["answers"]["dent"]["box"]["top"] = 0.9
    upstream.once(200, json.dumps(broken).encode())
    with client(proxy, key=MULTI_KEY, root="/contracts/boxes") as sdk:
        error = error_of(lambda: sdk.system_one({**STATE, "photo": Image(PNG)}, box_questions()), TypeSafeInternalServerError)
    assert error.status == 502
    assert error.body["detail"]["error_type"] == "invalid_upstream_answer"
