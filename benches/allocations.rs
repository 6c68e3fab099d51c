//! Heap allocations per request on the proxy's request path, outside the network: the
//! caller's body parsed and checked against the contract, the upstream body built and
//! serialized, the provider's answer parsed and released, the release serialized. The same
//! request and answer as `benches/load.sh` (one 4-class choice question), under the
//! `choice`, `full_native` and WCPQ contracts of that script.
//!
//! Counts are deterministic (a counting allocator around the system one), unlike timings on
//! a shared machine: a change that removes allocations shows here exactly.
//!
//!   cargo bench --bench allocations

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;

use releasegate_core::release::{self, Options};
use releasegate_core::rng::Rng;
use releasegate_core::wire;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const REQUEST: &[u8] = br#"{"model":"jev-latest","state":{"note":"parcel late"},"questions":{"coarse_cause":{"type":"choice","criteria":{"DELAY":null,"ADDRESS":null,"DAMAGE":null,"DELIVERY_RECORD":null}}}}"#;
const ANSWER: &[u8] = br#"{"model":"jev-1.13.0","answers":{"coarse_cause":{"type":"choice","choice":"DELAY","confidence":0.78,"probabilities":{"ADDRESS":0.04,"DELAY":0.85,"DAMAGE":0.06,"DELIVERY_RECORD":0.05}}},"usage":{"input_tokens":120,"output_tokens":1}}"#;

fn config(view: &str, mechanism: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    format!(
        "[providers.up]\nkind = \"systemone\"\nbase_url = \"http://127.0.0.1:9\"\n\
         [[recipients]]\nname = \"load\"\nkey_sha256 = \"{}\"\ncontracts = [\"load\"]\n\
         [contracts.load]\nprovider = \"up\"\n\
         [contracts.load.questions.coarse_cause]\n\
         classes = [\"DELAY\", \"ADDRESS\", \"DAMAGE\", \"DELIVERY_RECORD\"]\nview = \"{view}\"\n{}",
        "0".repeat(64),
        mechanism.replace("ROOT", root)
    )
}

/// One request through the pure request path; the released body's length.
fn one(contract: &releasegate_core::contract::Contract, rng: &mut Rng) -> usize {
    let request = wire::Json::parse(REQUEST).unwrap();
    let asked = wire::check_json(&request, contract).unwrap();
    drop(request);
    let upstream = asked.upstream_bytes();
    std::hint::black_box(&upstream);
    let native = wire::Json::parse(ANSWER).unwrap();
    let mut options = Options {
        rng,
        evaluate: false,
    };
    let released = release::release(contract, &asked, &native, &mut options).unwrap();
    released.to_bytes().len()
}

fn main() {
    let cases = [
        ("choice", config("choice", "")),
        ("full_native", config("full_native", "")),
        (
            "wcpq",
            config(
                "full_native",
                "mechanism = { kind = \"wcpq\", codebook = \"ROOT/config/codebooks/delivery-coarse_cause.json\", fallback = \"native\" }\n\
                 workflows = { preset = \"tuple-bench\" }\n",
            ),
        ),
    ];
    const N: u64 = 1000;
    println!("| contract | allocations per request | bytes allocated per request |");
    println!("|---|---|---|");
    for (name, text) in cases {
        let config = releasegate_proxy::load::from_toml(&text).unwrap();
        let contract = config.contract("load").unwrap().clone();
        let mut rng = Rng::new(7);
        one(&contract, &mut rng); // warm: lazily built state is not per request
        let region = Region::new(GLOBAL);
        for _ in 0..N {
            std::hint::black_box(one(&contract, &mut rng));
        }
        let change = region.change();
        println!(
            "| {name} | {} | {} |",
            (change.allocations + change.reallocations) as u64 / N,
            change.bytes_allocated as u64 / N
        );
    }
}
