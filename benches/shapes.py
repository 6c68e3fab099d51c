#!/usr/bin/env python3
"""Writes the request shapes of `benches/load.sh`'s `shapes` section.

For each shape: the wrk script (the request body and an SDK's headers), the fixed
answer the upstream gives, and the proxy's configuration in both logging modes.
Every WCPQ question uses the shipped delivery codebook and the tuple-bench workflows;
the contract pins each question's text, as a production contract does.

Usage: shapes.py OUT_DIR PROXY_PORT ADMIN_PORT UP_PORT KEY KEY_SHA256 CODEBOOK
Prints one line per shape: "name target_cpu_ratio".
"""

import json
import sys

LABELS = ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"]
INSTRUCTIONS = (
    "Choose the coarse route the recipient may receive under the stated permission. "
    "Do not name a finer internal mechanism."
)
DESCRIPTIONS = {
    "DELAY": "The shipment is late because its transport or handling progress stalled.",
    "ADDRESS": "The destination information used for the shipment is wrong or incomplete.",
    "DAMAGE": "The shipment or its contents were physically harmed in transit.",
    "DELIVERY_RECORD": "The delivery confirmation or handover record is inconsistent.",
}
LEVELS = ["Calm", "Frustrated", "Very angry"]
SCORE_INSTRUCTIONS = "How frustrated is the customer?"
# Native answers that differ per question, so no shape answers every question alike.
PROBABILITIES = [
    [0.85, 0.04, 0.06, 0.05],
    [0.10, 0.62, 0.08, 0.20],
    [0.05, 0.15, 0.70, 0.10],
    [0.25, 0.25, 0.10, 0.40],
    [0.40, 0.35, 0.15, 0.10],
    [0.02, 0.03, 0.05, 0.90],
    [0.30, 0.10, 0.45, 0.15],
    [0.55, 0.05, 0.30, 0.10],
]
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json",
    "User-Agent": "typesafe-sdk/0.7.5",
    "X-TypeSafe-SDK": "typesafe-sdk/0.7.5",
    "X-TypeSafe-Runtime": "python/3.11.2 (Linux; x86_64)",
}


def note(size):
    """A ticket's free text of about `size` bytes, with escapes and non-ASCII text."""
    words = (
        "the parcel left the depot on monday but the tracking page still says "
        "\"awaiting collection\"; customer called twice, asked for a refund or a "
        "new delivery date. Adresse vérifiée, livraison prévue à 14h.\n"
    )
    text = ""
    while len(text.encode()) < size:
        text += words
    return text[: size - 80]


def choice_question(with_text):
    if with_text:
        return {"type": "choice", "instructions": INSTRUCTIONS, "criteria": dict(DESCRIPTIONS)}
    return {"type": "choice", "criteria": {label: None for label in LABELS}}


def score_question():
    return {"type": "score", "criteria": list(LEVELS)}


def choice_answer(i):
    p = dict(zip(LABELS, PROBABILITIES[i % len(PROBABILITIES)]))
    choice = max(p, key=p.get)
    return {"type": "choice", "choice": choice, "confidence": 0.78, "probabilities": p}


def score_answer():
    return {
        "type": "score",
        "score": 1.05,
        "confidence": 0.92,
        "legend": {str(i): level for i, level in enumerate(LEVELS)},
        "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05},
    }


# name -> (questions: [(id, kind)], caller sends the text, state note bytes, CPU target)
SHAPES = {
    "one": ([("coarse_cause", "choice")], False, 0, 1.5),
    "one-text": ([("coarse_cause", "choice")], True, 0, 1.5),
    "four": ([("q0", "choice"), ("q1", "choice"), ("q2", "choice"), ("frustration", "score")], False, 0, 2.0),
    "eight": ([(f"q{i}", "choice") for i in range(8)], False, 0, 2.0),
    "state-12k": ([("coarse_cause", "choice")], False, 12 * 1024, 2.0),
}


def config(questions, codebook, ports, key_sha, logging):
    proxy, admin, up = ports
    lines = [
        "[server]",
        f'listen = "127.0.0.1:{proxy}"',
        f'admin_listen = "127.0.0.1:{admin}"',
        f"access_log = {'true' if logging == 'files' else 'false'}",
        "[providers.up]",
        'kind = "systemone"',
        f'base_url = "http://127.0.0.1:{up}"',
        "timeout_ms = 5000",
        "max_concurrency = 256",
        "[[recipients]]",
        'name = "load"',
        f'key_sha256 = "{key_sha}"',
        'contracts = ["load"]',
        "[contracts.load]",
        'provider = "up"',
    ]
    for qid, kind in questions:
        lines.append(f"[contracts.load.questions.{qid}]")
        if kind == "choice":
            lines += [
                f"classes = {json.dumps(LABELS)}",
                'view = "full_native"',
                f'mechanism = {{ kind = "wcpq", codebook = "{codebook}", fallback = "native" }}',
                'workflows = { preset = "tuple-bench" }',
                f"instructions = {json.dumps(INSTRUCTIONS)}",
                "descriptions = { "
                + ", ".join(f"{k} = {json.dumps(v)}" for k, v in DESCRIPTIONS.items())
                + " }",
            ]
        else:
            lines += [
                'classes = ["0", "1", "2"]',
                'view = "full_native"',
                f"instructions = {json.dumps(SCORE_INSTRUCTIONS)}",
                "descriptions = { "
                + ", ".join(f'"{i}" = {json.dumps(v)}' for i, v in enumerate(LEVELS))
                + " }",
            ]
    return "\n".join(lines) + "\n"


def lua_string(s):
    return "[==[" + s + "]==]"


def main():
    out, proxy, admin, up, key, key_sha, codebook = sys.argv[1:8]
    for name, (questions, with_text, state_bytes, target) in SHAPES.items():
        state = {"ticket_id": "T-18236", "note": "parcel late, customer called twice"}
        if state_bytes:
            state["note"] = note(state_bytes)
        request = {"model": "jev-latest", "state": state, "questions": {}}
        answers = {}
        for i, (qid, kind) in enumerate(questions):
            if kind == "choice":
                request["questions"][qid] = choice_question(with_text)
                answers[qid] = choice_answer(i)
            else:
                request["questions"][qid] = score_question()
                answers[qid] = score_answer()
        body = json.dumps(request, ensure_ascii=False, separators=(",", ":"))
        with open(f"{out}/shape-{name}.lua", "w") as f:
            f.write('wrk.method = "POST"\n')
            for h, v in HEADERS.items():
                f.write(f'wrk.headers["{h}"] = "{v}"\n')
            f.write(f'wrk.headers["Authorization"] = "Bearer {key}"\n')
            f.write(f"wrk.body = {lua_string(body)}\n")
        answer = {
            "model": "jev-1.13.0",
            "answers": answers,
            "usage": {"input_tokens": 412 + len(body) // 4, "output_tokens": len(questions)},
        }
        with open(f"{out}/shape-{name}.answer.json", "w") as f:
            f.write(json.dumps(answer, separators=(",", ":")))
        for logging in ("files", "off"):
            with open(f"{out}/shape-{name}-{logging}.toml", "w") as f:
                f.write(config(questions, codebook, (proxy, admin, up), key_sha, logging))
        print(name, target, len(body.encode()))


if __name__ == "__main__":
    main()
