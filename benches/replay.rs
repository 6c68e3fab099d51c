//! Replay throughput: answers released per second for each field view, on
//! simulator worlds held in memory (parsing, release and writing included;
//! disk excluded). Run: `cargo bench --bench replay`.

use std::io::Cursor;
use std::time::Instant;

use releasegate_core::contract::View;
use releasegate_sim::simulate::{self, Options};
use releasegate_sim::worlds::{Reader, Writer};

/// The same allocator as the `releasegate` binary.
#[global_allocator]
static GLOBAL: releasegate_alloc::Allocator = releasegate_alloc::Allocator;

fn main() {
    let worlds = simulate::generate(&Options {
        pairs_per_domain: 240,
        seed: 7,
    })
    .expect("simulate");
    // One contract covers one class set: replay the delivery domain's worlds, repeated
    // under new ids (world ids are unique, the reader refuses a repeated one).
    let delivery: Vec<_> = worlds.iter().filter(|w| w.domain == "delivery").collect();
    let mut input = String::new();
    let mut round = 0;
    while input.lines().count() < 100_000 {
        for world in &delivery {
            let mut world = (*world).clone();
            world.world_id = format!("{}-r{round}", world.world_id);
            world.pair_id = format!("{}-r{round}", world.pair_id);
            input.push_str(&world.to_line().expect("line"));
            input.push('\n');
        }
        round += 1;
    }
    let n_lines = input.lines().count();
    println!(
        "replay benchmark: {n_lines} worlds, {} MiB in memory",
        input.len() >> 20
    );
    let delivery = releasegate_sim::simulate::ontology::domain("delivery").expect("delivery");
    // Every view a contract can declare: `no_output` on an allowed question is refused
    // by the configuration (a typed client cannot read an answer left out).
    for view in View::ALL.into_iter().filter(|view| view.has_choice()) {
        let text = format!(
            "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\n\
             [contracts.c.questions.coarse_cause]\n\
             classes = [\"DELAY\", \"ADDRESS\", \"DAMAGE\", \"DELIVERY_RECORD\"]\nview = \"{view}\"\n{}",
            releasegate_sim::simulate::pinned_text_toml(delivery)
        );
        let contract = releasegate_proxy::load::from_toml(&text)
            .expect("config")
            .contracts()["c"]
            .clone();
        let mut best = f64::MAX;
        let mut released = 0;
        for _ in 0..3 {
            let mut writer = Writer::new(Vec::with_capacity(input.len()));
            let started = Instant::now();
            let summary = releasegate_lab::replay::replay(
                &contract,
                Reader::new(Cursor::new(input.as_bytes())),
                &mut writer,
                &mut |_| {},
            )
            .expect("replay");
            best = best.min(started.elapsed().as_secs_f64());
            released = summary
                .answers_released
                .values()
                .flat_map(|m| m.values())
                .sum::<u64>();
            assert_eq!(
                summary.rejected_requests.total, 0,
                "worlds must fit the contract"
            );
        }
        println!(
            "view {:<20} {released} answers in {best:.3} s = {:.0} answers/s",
            view.as_str(),
            released as f64 / best
        );
    }
}
