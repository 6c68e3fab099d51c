#!/usr/bin/env python3
"""Domains of our own with 3 and 5 classes, derived from `releasegate simulate` worlds.

`releasegate simulate` writes three 4-class domains (delivery, equipment, it_ops). A privacy
figure counts only if it also holds on domains with other class counts, so this tool rewrites
each world's coarse question and asks the project's simulated provider again:

* ``--classes 3``: two coarse classes of each domain are merged into one new label with a
  description of its own (DOMAINS below), in the question's criteria and in ``labels.T``.
* ``--classes 5``: a fifth class, a new label with its own description, is added to each
  domain's question.
* ``--classes 4``: the question unchanged (the control: the same contracts, codebooks and
  commands on the simulator's own classes; the provider gives the same answers).

The rewritten question is asked as the contract pins it, so every world's request carries its
domain's classes in the contract's order (the simulator's per-pair candidate order is not kept;
the provider's answer does not depend on it).

The answers are the simulated provider's own answers to the rewritten requests, not arithmetic
on the old ones: the tool writes a configuration with one contract per domain (provider
``simulated``, ``view = "full_native"``, ``usage = "keep"``, the rewritten instructions and
descriptions pinned) and runs ``releasegate collect`` on it, which sends every request the way
``serve`` sends it (request check, the contract's pinned text, answer validation) to the
in-process provider: no port is opened and nothing leaves the process. Every world keeps its
``world_id``, ``pair_id``, ``split``, ``domain``, state, ``S`` and hypotheses; ``labels.T`` is
the new class. The output is written in input order, so two runs give byte-identical files.

The simulated provider matches a label to a coarse class by name (docs/simulator.md, "Limits"),
so it recognizes neither the merged label nor the added one: worlds whose class was merged are
answered from the request hash (its generic mode) unless a distractor cue names another class,
and the added class only ever receives noise. The summary line (stderr and ``summary.json``)
gives, per domain and class, how often the provider's choice is the world's ``T``.

The configuration written beside the worlds (``own-domains-<n>.toml``) holds, per domain D:

* ``D``: the plain contract (``full_native``, no mechanism) that ``collect`` asks through;
* ``D-wcpq``: the same question with ``mechanism = { kind = "wcpq", codebook =
  "codebooks/D-<n>.json", fallback = "native" }`` and explicit frozen workflows (the three
  families, the six profiles, the paper's costs 10 / 2 / 0.4 and an (n+1) x n matrix: the
  paper's authored 4-class matrix cut to 3 classes or extended by one class, MATRICES below),
  since the ``tuple-bench`` preset is a 4-class model;
* ``D-coarse``: the ``choice`` view with two classes no derivation merges coarsened into one
  label (``coarsen``, DOMAINS below);
* with ``--max-recovery-gain B``, ``policy = { hide = ["secret"], max_recovery_gain = B }`` on
  every ``D-wcpq``, for ``audit --gate --certificate-dir``.

``D`` releases the provider's token counts (``usage = "keep"``), so the collected worlds carry
them as the provider sent them; ``D-wcpq`` and ``D-coarse`` release what ``--usage`` says
(default ``drop``, as the shipped contracts that hide something: the audit's attacker reads
released counts, and the input count follows the private report's length, docs/audit.md).

With ``--build-codebooks`` it also runs ``releasegate build-codebook --pool grid`` (strict,
denominator 20, from the train split) for every ``D-wcpq``; without those files every command
that loads the configuration's codebooks (``audit``, ``check-config``, ``serve``) refuses it.

Usage (Python 3.11 standard library only; B is the project's binary):

    B=target/debug/releasegate
    $B simulate --pairs-per-domain 240 --seed 0 --out w0.jsonl
    python3 benches/own_domains.py --releasegate $B --worlds w0.jsonl --classes 3 \\
        --out-dir own3-s0 --build-codebooks
    $B audit --config own3-s0/own-domains-3.toml \\
        --contract delivery-wcpq --contract equipment-wcpq --contract it_ops-wcpq \\
        --views no_output,choice,full_native --worlds own3-s0/worlds-3.jsonl

The figures measured with it, and every command: docs/own-domains.md.

Files in --out-dir: ``worlds-<n>.jsonl`` (the new worlds), ``own-domains-<n>.toml``,
``codebooks/`` (with --build-codebooks), ``summary.json``, and ``collect/`` (collect's requests,
raw output and errors files, kept for inspection). Exit status: 0 on success, 1 when a step
fails (its command and output are printed), 2 for unusable arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

QUESTION = "coarse_cause"

# Each domain's canonical class order (config/tuple-bench.toml), the two classes merged for
# 3 classes with the new label and its description, the two classes the `D-coarse` contract
# coarsens (classes no derivation merges, so they exist in both) and the class added for 5.
DOMAINS = {
    "delivery": {
        "classes": ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"],
        "merge": (
            "ADDRESS",
            "DELIVERY_RECORD",
            "DESTINATION_OR_RECORD",
            "The destination information is wrong or incomplete, or the delivery confirmation "
            "or handover record is inconsistent.",
        ),
        "coarsen": ("DELAY", "DAMAGE", "IN_TRANSIT"),
        "add": (
            "CUSTOMS_HOLD",
            "The shipment is held by a customs, import or other regulatory check.",
        ),
    },
    "equipment": {
        "classes": ["POWER", "LINK", "SENSOR", "MOTION"],
        "merge": (
            "SENSOR",
            "MOTION",
            "FIELD_DEVICE",
            "The fault lies in how the unit measures its process or in its mechanical drive "
            "or positioning.",
        ),
        "coarsen": ("POWER", "LINK", "SUPPLY_OR_LINK"),
        "add": (
            "CONTROL_LOGIC",
            "The fault lies in the unit's control program or its configured set points.",
        ),
    },
    "it_ops": {
        "classes": ["IDENTITY", "NETWORK", "STORAGE", "APPLICATION"],
        "merge": (
            "STORAGE",
            "APPLICATION",
            "DATA_OR_SERVICE",
            "The incident stems from databases, volumes or file systems, or from the "
            "service's own code, configuration or runtime.",
        ),
        "coarsen": ("IDENTITY", "NETWORK", "ACCESS_PATH"),
        "add": (
            "CAPACITY",
            "The incident stems from exhausted compute, memory or quota.",
        ),
    },
}

# The asymmetric family's cost matrix: rows are the class actions in canonical order, then the
# general inspection; columns the true class. 3 classes: the paper's authored 4-class matrix
# (crates/core/src/workflow/cost.rs) cut to its first three rows and columns; 5 classes: that
# matrix with one more action and one more true class.
MATRICES = {
    3: [[0, 4, 10], [5, 0, 9], [8, 8, 0], [1.8, 1.8, 1.8]],
    4: [[0, 4, 10, 12], [5, 0, 9, 10], [8, 8, 0, 6], [8, 6, 4, 0], [1.8, 1.8, 1.8, 1.8]],
    5: [
        [0, 4, 10, 12, 11],
        [5, 0, 9, 10, 8],
        [8, 8, 0, 6, 7],
        [8, 6, 4, 0, 6],
        [6, 7, 5, 9, 0],
        [1.8, 1.8, 1.8, 1.8, 1.8],
    ],
}

PUBLIC_FEATURES = """public = [
  { pointer = "/public/region", kind = "categorical" },
  { pointer = "/public/intake_channel", kind = "categorical" },
  { pointer = "/public/operating_window", kind = "categorical" },
  { pointer = "/public/case_context", kind = "tokens" },
]"""

STEP_TIMEOUT_S = 1800


class Failure(Exception):
    pass


def toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def read_worlds(path: Path) -> list[dict]:
    worlds = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                worlds.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise Failure(f"{path}:{number}: not JSON: {e}") from e
    if not worlds:
        raise Failure(f"{path}: no worlds")
    return worlds


def domain_texts(worlds: list[dict]) -> dict[str, dict]:
    """Each domain's instructions and class descriptions, checked identical across its worlds."""
    texts: dict[str, dict] = {}
    for w in worlds:
        d = w["domain"]
        if d not in DOMAINS:
            raise Failure(f"world {w['world_id']}: unknown domain {d!r} (expected {sorted(DOMAINS)})")
        q = w["request"]["questions"][QUESTION]
        got = {"instructions": q.get("instructions"), "criteria": dict(q["criteria"])}
        if set(got["criteria"]) != set(DOMAINS[d]["classes"]):
            raise Failure(f"world {w['world_id']}: classes {sorted(got['criteria'])} are not {d}'s")
        if d in texts and texts[d] != got:
            raise Failure(f"world {w['world_id']}: the question's text differs from {d}'s other worlds")
        texts[d] = got
    return texts


def new_question(domain: str, classes: int, texts: dict) -> tuple[list[str], dict[str, str]]:
    """The rewritten question of a domain: canonical class order and descriptions."""
    spec = DOMAINS[domain]
    old = spec["classes"]
    descriptions = dict(texts["criteria"])
    if classes == 3:
        a, b, merged, text = spec["merge"]
        order = [merged if c == a else c for c in old if c != b]
        descriptions = {c: descriptions[c] for c in old if c not in (a, b)}
        descriptions[merged] = text
    elif classes == 4:
        order = list(old)
    elif classes == 5:
        added, text = spec["add"]
        order = old + [added]
        descriptions[added] = text
    else:
        raise Failure(f"--classes must be 3, 4 or 5, got {classes}")
    return order, {c: descriptions[c] for c in order}


def new_t(world: dict, classes: int) -> str:
    """The world's coarse class under the rewritten question."""
    if classes == 3:
        a, b, merged, _ = DOMAINS[world["domain"]]["merge"]
        return merged if world["labels"]["T"] in (a, b) else world["labels"]["T"]
    return world["labels"]["T"]


def workflows_toml(n: int) -> str:
    rows = ", ".join("[" + ", ".join(f"{v:g}" for v in row) + "]" for row in MATRICES[n])
    return (
        'families = ["selective", "clarification", "asymmetric"]\n'
        'profiles = ["authored", "review_half", "review_double", "check_quarter", '
        '"error_double", "asymmetric_class0_double"]\n'
        f"costs = {{ c_wrong = 10, c_review = 2, c_check = 0.4, matrix = [{rows}] }}\n"
    )


def contract_toml(name: str, usage: str, lines: list[str], question: list[str], tables: list[tuple[str, list[str]]]) -> list[str]:
    out = [f"[contracts.{toml_str(name)}]", 'provider = "sim"', f"usage = {toml_str(usage)}", PUBLIC_FEATURES]
    out += lines + ["", f"[contracts.{toml_str(name)}.questions.{QUESTION}]"] + question
    for table, body in tables:
        out += ["", f"[contracts.{toml_str(name)}.questions.{QUESTION}.{table}]"] + body
    return out + [""]


def config_toml(classes: int, questions: dict, instructions: dict, budget: float | None, usage: str) -> str:
    out = [
        f"# {classes}-class domains derived from `releasegate simulate` worlds by",
        "# benches/own_domains.py (docs/own-domains.md). Generated: edit the script, not this file.",
        "",
        "[providers.sim]",
        'kind = "simulated"',
        "",
    ]
    for domain, (order, descriptions) in questions.items():
        classes_line = "classes = [" + ", ".join(toml_str(c) for c in order) + "]"
        text = [f"instructions = {toml_str(instructions[domain])}"]
        described = ("descriptions", [f"{toml_str(c)} = {toml_str(descriptions[c])}" for c in order])
        # D: what collect asks through; the provider's answers and token counts kept as they are.
        out += contract_toml(domain, "keep", [], [classes_line, 'view = "full_native"'] + text, [described])
        # D-wcpq: strict WCPQ over the full native answer, with explicit frozen workflows.
        policy = [f'policy = {{ hide = ["secret"], max_recovery_gain = {budget:g} }}'] if budget is not None else []
        mechanism = (
            f'mechanism = {{ kind = "wcpq", codebook = "codebooks/{domain}-{classes}.json", '
            'fallback = "native" }'
        )
        out += contract_toml(
            f"{domain}-wcpq", usage, policy, [classes_line, 'view = "full_native"', mechanism] + text,
            [described, ("workflows", [workflows_toml(classes)])],
        )
        # D-coarse: the choice view with two classes coarsened into one label.
        a, b, label = DOMAINS[domain]["coarsen"]
        coarsen = f"coarsen = {{ {toml_str(a)} = {toml_str(label)}, {toml_str(b)} = {toml_str(label)} }}"
        out += contract_toml(f"{domain}-coarse", usage, [], [classes_line, 'view = "choice"', coarsen] + text, [described])
    return "\n".join(out)


def run(cmd: list[str], ok: tuple[int, ...] = (0,)) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise Failure(f"timed out after {STEP_TIMEOUT_S} s: {' '.join(cmd)}") from e
    if done.returncode not in ok:
        raise Failure(
            f"exit {done.returncode}: {' '.join(cmd)}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releasegate", required=True, help="the releasegate binary")
    parser.add_argument("--worlds", required=True, type=Path, help="worlds from `releasegate simulate`")
    parser.add_argument("--classes", required=True, type=int, choices=(3, 4, 5))
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--build-codebooks", action="store_true", help="build each D-wcpq's strict codebook")
    parser.add_argument("--denominator", type=int, default=20, help="codebook grid denominator (default 20)")
    parser.add_argument("--max-recovery-gain", type=float, help="add this policy budget to every D-wcpq")
    parser.add_argument(
        "--usage", default="drop", choices=("drop", "input", "keep"),
        help="the token counts D-wcpq and D-coarse release (default drop; D itself keeps them)",
    )
    args = parser.parse_args()
    try:
        return own_domains(args)
    except Failure as e:
        print(f"own_domains: {e}", file=sys.stderr)
        return 1


def own_domains(args: argparse.Namespace) -> int:
    n = args.classes
    worlds = read_worlds(args.worlds)
    texts = domain_texts(worlds)
    secrets = {w["labels"]["S"].lower() for w in worlds} | {h.lower() for w in worlds for h in w["labels"]["hypotheses"]}
    questions, instructions = {}, {}
    for domain in sorted(texts):
        order, descriptions = new_question(domain, n, texts[domain])
        for c in order:
            if c.lower() in secrets:
                raise Failure(f"{domain}: the new label {c} is a mechanism's name")
        questions[domain] = (order, descriptions)
        instructions[domain] = texts[domain]["instructions"]

    out = args.out_dir
    (out / "collect").mkdir(parents=True, exist_ok=True)
    config = out / f"own-domains-{n}.toml"
    config.write_text(config_toml(n, questions, instructions, args.max_recovery_gain, args.usage), encoding="utf-8")

    # One requests file per domain, in input order.
    wanted: dict[str, list[str]] = {d: [] for d in questions}
    expected_t: dict[str, str] = {}
    for domain in questions:
        path = out / "collect" / f"requests-{domain}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for w in worlds:
                if w["domain"] != domain:
                    continue
                t = new_t(w, n)
                request = json.loads(json.dumps(w["request"]))
                request["questions"][QUESTION]["criteria"] = dict(questions[domain][1])
                line = {
                    "id": w["world_id"], "request": request, "pair_id": w["pair_id"],
                    "split": w["split"], "domain": domain, "question": w["labels"]["question"],
                    "coarse": t, "secret": w["labels"]["S"], "hypotheses": w["labels"]["hypotheses"],
                }
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
                wanted[domain].append(w["world_id"])
                expected_t[w["world_id"]] = t

    # Ask the provider: `collect` sends each request through the contract as `serve` does.
    collected: dict[str, dict] = {}
    for domain in questions:
        raw = out / "collect" / f"collected-{domain}.jsonl"
        raw.unlink(missing_ok=True)  # collect resumes; a fresh run asks everything again
        run([
            args.releasegate, "collect", "--config", str(config), "--contract", domain,
            "--requests", str(out / "collect" / f"requests-{domain}.jsonl"), "--out", str(raw),
            "--errors", str(out / "collect" / f"errors-{domain}.jsonl"),
        ])
        for line in raw.read_text(encoding="utf-8").splitlines():
            if line.strip():
                w = json.loads(line)
                collected[w["world_id"]] = w

    # Rewrite in input order; check every world came back with the expected labels.
    worlds_out = out / f"worlds-{n}.jsonl"
    tally: dict[str, dict[str, list[int]]] = {}
    with worlds_out.open("w", encoding="utf-8") as f:
        for w in worlds:
            got = collected.get(w["world_id"])
            if got is None:
                raise Failure(f"collect wrote no world for {w['world_id']}")
            for key in ("pair_id", "split", "domain"):
                if got[key] != w[key]:
                    raise Failure(f"{w['world_id']}: {key} {got[key]!r} != {w[key]!r}")
            if got["labels"]["S"] != w["labels"]["S"] or got["labels"]["T"] != expected_t[w["world_id"]]:
                raise Failure(f"{w['world_id']}: labels changed: {got['labels']}")
            if got["request"]["state"] != w["request"]["state"]:
                raise Failure(f"{w['world_id']}: the state changed on the way")
            f.write(json.dumps(got, ensure_ascii=False, separators=(",", ":")) + "\n")
            answer = got["response"]["answers"][QUESTION]
            cell = tally.setdefault(w["domain"], {}).setdefault(got["labels"]["T"], [0, 0])
            cell[0] += answer["choice"] == got["labels"]["T"]
            cell[1] += 1

    codebooks = []
    if args.build_codebooks:
        (out / "codebooks").mkdir(exist_ok=True)
        for domain in questions:
            path = out / "codebooks" / f"{domain}-{n}.json"
            stdout = run([
                args.releasegate, "build-codebook", "--config", str(config), "--contract",
                f"{domain}-wcpq", "--question", QUESTION, "--worlds", str(worlds_out),
                "--out", str(path), "--pool", "grid", "--denominator", str(args.denominator),
            ])
            codebooks.append({"domain": domain, "path": str(path), "summary": stdout.strip()})

    summary = {
        "classes": n,
        "source": str(args.worlds),
        "source_sha256": hashlib.sha256(args.worlds.read_bytes()).hexdigest(),
        "worlds": str(worlds_out),
        "worlds_sha256": hashlib.sha256(worlds_out.read_bytes()).hexdigest(),
        "config": str(config),
        "questions": {d: {"classes": q[0]} for d, q in questions.items()},
        "provider_choice_equals_T": {
            d: {t: f"{c[0]}/{c[1]}" for t, c in sorted(by_t.items())} for d, by_t in sorted(tally.items())
        },
        "codebooks": codebooks,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary["provider_choice_equals_T"]), file=sys.stderr)
    print(f"wrote {len(worlds)} worlds to {worlds_out} and {config}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
