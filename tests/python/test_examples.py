"""The shipped examples and the fetched questions through the official SDK (sync and async).

Every example of config/examples is sent unchanged, as a user copies it, to every contract of
the shipped configuration (config/releasegate.toml, its demo keys) that covers its questions;
and the questions of every contract, fetched from GET /v1/questions, are sent back unchanged.
The SDK must build each request (it refuses some questions before sending anything, e.g. a
noul question without text) and read each answer into its typed classes.
"""

import asyncio
import json
import tomllib
import urllib.request

import pytest
from conftest import MULTI_KEY, REPO, SHIPPED_CONFIG
from test_conformance import NO_RETRY, STATE, assert_full_native
from typesafe_sdk import AsyncTypeSafeClient, TypeSafeClient

EXAMPLES = sorted((REPO / "config" / "examples").glob("*.json"))
# The shipped recipients and their contracts; each demo key is `demo-NAME-key` (README, "Try it").
RECIPIENTS = [(f"demo-{r['name']}-key", r["contracts"]) for r in tomllib.loads(SHIPPED_CONFIG.read_text())["recipients"]]


def fetch_questions(root, key, headers=None):
    """GET {root}/v1/questions with `key`: the body's questions."""
    request = urllib.request.Request(f"{root}/v1/questions", headers={"Authorization": f"Bearer {key}", **(headers or {})})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        assert response.headers["content-type"] == "application/json"
        assert response.headers["x-request-id"].startswith("rg-")
        return json.load(response)["questions"]


def ask(mode, root, key, request):
    """Sends `request` (model, state, questions) through the SDK, sync or async."""
    if mode == "sync":
        with TypeSafeClient(api_key=key, base_url=root, retry=NO_RETRY) as sdk:
            return sdk.system_one(request["state"], request["questions"], model=request["model"])

    async def main():
        async with AsyncTypeSafeClient(api_key=key, base_url=root, retry=NO_RETRY) as sdk:
            return await sdk.system_one(request["state"], request["questions"], model=request["model"])

    return asyncio.run(main())


def assert_typed(result, questions):
    """Every asked question is answered, read through the SDK's class for its type."""
    typed = {"choice": result.choices, "score": result.scores, "noul": result.nouls}
    for qid, question in questions.items():
        answer = typed[question["type"]][qid]
        if question["type"] == "choice":
            assert isinstance(answer.choice, str) and answer.choice in answer.probabilities
            assert 0 <= answer.confidence <= 1
        elif question["type"] == "score":
            assert 0 <= answer.score <= len(question["criteria"]) - 1
            assert set(answer.legend) == set(range(len(question["criteria"])))
        else:
            assert 0 <= answer.noul <= 1
    assert result.request_id.startswith("rg-")


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_every_shipped_example_works_unchanged_in_the_sdk(shipped, example, mode):
    request = json.loads(example.read_text())
    sent = 0
    for key, contracts in RECIPIENTS:
        for contract in contracts:
            root = f"{shipped.url}/contracts/{contract}"
            if not set(request["questions"]) <= set(fetch_questions(root, key)):
                continue
            assert_typed(ask(mode, root, key, request), request["questions"])
            sent += 1
    assert sent, f"no shipped contract covers {example.name}"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_shipped_contracts_fetched_questions_go_back_unchanged(shipped, mode):
    for key, contracts in RECIPIENTS:
        for contract in contracts:
            root = f"{shipped.url}/contracts/{contract}"
            questions = fetch_questions(root, key)
            assert questions, contract
            request = {"model": "jev-latest", "state": STATE, "questions": questions}
            assert_typed(ask(mode, root, key, request), questions)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_fetched_questions_are_what_goes_upstream(proxy, upstream, mode):
    # By path prefix and by header: the same questions, the contract's own text.
    questions = fetch_questions(f"{proxy.url}/contracts/full", MULTI_KEY)
    assert fetch_questions(proxy.url, MULTI_KEY, {"X-Release-Contract": "full"}) == questions
    assert questions == {
        "cause": {"type": "choice", "instructions": "Why?", "criteria": {"A": None, "B": "b", "C": None, "D": None}},
        "level": {"type": "score", "instructions": "How bad?", "criteria": ["low", "mid", "high"]},
        "urgent": {"type": "noul", "instructions": "Urgent?"},
    }
    request = {"model": "jev-latest", "state": STATE, "questions": questions}
    assert_full_native(ask(mode, f"{proxy.url}/contracts/full", MULTI_KEY, request))
    (seen,) = upstream.seen
    assert json.loads(seen.body)["questions"] == questions
