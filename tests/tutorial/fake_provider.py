"""A stand-in for a team's own decision model, for docs/tutorial.md's CI run (tests/tutorial/run.sh).

    fake_provider.py cases OUT.jsonl PAIRS   write the team's cases: a requests file of PAIRS
                                             labelled counterfactual pairs (docs/collect.md)
    fake_provider.py serve PORTFILE          answer System One on 127.0.0.1 (a free port, written
                                             to PORTFILE) with the key in $LENDER_KEY

The model routes a loan application by its public signals alone (a softmax over the five),
answered in the order of the labels it was asked. The underwriter's note, the private evidence
that differs between a pair's two worlds, never changes the answer. Standard library only.
"""

import json
import math
import os
import random
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CLASSES = ["APPROVE", "VERIFY_INCOME", "VERIFY_IDENTITY", "COLLATERAL_REVIEW", "DECLINE"]
CAUSES = [
    ["clean_file", "long_tenure"],
    ["employer_gap", "income_gap"],
    ["address_mismatch", "document_expired"],
    ["appraisal_gap", "lien_found"],
    ["debt_ratio", "fraud_flag"],
]
INSTRUCTIONS = "Route the loan application to the next step of its review."
DESCRIPTIONS = {
    "APPROVE": "The file is complete and within policy.",
    "VERIFY_INCOME": "The stated income needs documents.",
    "VERIFY_IDENTITY": "The applicant's identity needs documents.",
    "COLLATERAL_REVIEW": "The collateral needs an appraiser's review.",
    "DECLINE": "The application is outside policy.",
}


def cases(out, pairs):
    rng = random.Random(7)
    with open(out, "w") as file:
        for pair in range(pairs):
            label = pair % len(CLASSES)
            split = ["train", "train", "validation", "test", "test"][(pair // len(CLASSES)) % 5]
            signals = [round(rng.random() * 1.5, 3) for _ in CLASSES]
            signals[label] = round(signals[label] + 2.5, 3)
            region = rng.choice(["north", "south"])
            hypotheses = sorted(CAUSES[label])
            for world, cause in enumerate(CAUSES[label]):
                request = {
                    "model": "loan-triage-latest",
                    "state": {
                        "region": region,
                        "signals": signals,
                        "underwriter_note": f"Reviewed the file: {cause.replace('_', ' ')} observed.",
                    },
                    "questions": {"route": {"type": "choice", "instructions": INSTRUCTIONS, "criteria": DESCRIPTIONS}},
                }
                line = {
                    "id": f"case-{pair:03}-{world}",
                    "request": request,
                    "pair_id": f"case-{pair:03}",
                    "split": split,
                    "domain": "loans",
                    "coarse": CLASSES[label],
                    "secret": cause,
                    "hypotheses": hypotheses,
                }
                file.write(json.dumps(line) + "\n")


def answer(request):
    labels = list(request["questions"]["route"]["criteria"])
    signals = request["state"]["signals"]
    top = max(signals)
    weights = [math.exp(s - top) for s in signals]
    total = sum(weights)
    p = [round(w / total, 4) for w in weights]
    best = max(range(len(p)), key=lambda i: p[i])
    p[best] = round(1 - sum(v for i, v in enumerate(p) if i != best), 4)
    k = len(p)
    confidence = round(min(1.0, max(0.0, (p[best] - 1 / k) / (1 - 1 / k))), 4)
    return {
        "model": "loan-triage-7",
        "answers": {
            "route": {
                "type": "choice",
                "choice": labels[best],
                "probabilities": dict(zip(labels, p)),
                "confidence": confidence,
            }
        },
        "usage": {"input_tokens": 180, "output_tokens": 1},
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("authorization") != f"Bearer {os.environ['LENDER_KEY']}":
            return self.reply(401, {"detail": "bad key"})
        try:
            self.reply(200, answer(json.loads(body)))
        except (ValueError, KeyError, TypeError):
            self.reply(400, {"detail": "unexpected request"})

    def do_GET(self):
        self.reply(200, {"models": [{"name": "loan-triage-7", "description": "d", "release_date": "2026-11-02"}]})


def serve(portfile):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(portfile, "w") as file:
        file.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1] == "cases":
        cases(sys.argv[2], int(sys.argv[3]))
    else:
        serve(sys.argv[2])
