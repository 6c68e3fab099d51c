//! `releasegate build-codebook`: its arguments, the worlds files it reads (only the worlds one
//! provider answered: a codebook serves that provider's answers), the codebook file it writes
//! and the summary it prints. Building and learning are `releasegate_core::codebook`,
//! reading the training answers `releasegate_sim::dataset::TrainingSet`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use releasegate_core::codebook;
use releasegate_core::config::Config;
use releasegate_core::contract::Contract;
use releasegate_core::mechanism::{ConfidenceMode, Fallback, Mechanism, WcpqMechanism};
use releasegate_core::wcpq::{Admissibility, Mapper};
use releasegate_core::workflow::{self, Spec};
use releasegate_lab::audit::guard;
use releasegate_sim::dataset::{self, TrainingSet};
use releasegate_sim::worlds::{self, Split, World};

use super::super::error::{Error, ResultExt};
use super::{Progress, shared_first_provider};

/// Codebooks above this many grid vectors get a warning (mapping scans them).
const GRID_WARNING: u128 = 200_000;

/// What `build-codebook` is asked for.
#[derive(Debug, Clone, Copy)]
pub(in crate::cli) struct Args<'a> {
    /// Configuration file holding the contracts (its codebooks are not loaded).
    pub config: &'a Path,
    /// The contracts; several pool their questions.
    pub contracts: &'a [String],
    /// The question id.
    pub question: &'a str,
    /// The provider whose answers the codebook is built from (`None`: the first
    /// contract's first provider); every contract must list it.
    pub provider: Option<&'a str>,
    /// Worlds files, read as one in this order.
    pub worlds: &'a [PathBuf],
    /// Output codebook artifact.
    pub out: &'a Path,
    /// The strict codebook's grid and pool.
    pub build: BuildOptions,
    /// With `--budget`: learn a compact codebook.
    pub learn: Option<LearnOptions>,
}

/// `build-codebook --budget α [--max-codewords K] [--pair-weight W]`: learn a
/// compact codebook for admissibility budget α.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::cli) struct LearnOptions {
    /// α.
    pub budget: f64,
    /// K.
    pub max_codewords: usize,
    /// Pair weight of the greedy gain.
    pub pair_weight: u32,
}

/// `build-codebook --pool`: what a codebook may contain besides the simplex grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(in crate::cli) enum Pool {
    /// The grid alone: nothing of the training data is released.
    Grid,
    /// The grid, the training answers verbatim and their pair midpoints.
    #[value(name = "grid+training")]
    GridTraining,
}

/// `build-codebook --denominator D --pool P`: the strict codebook's grid and pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::cli) struct BuildOptions {
    /// The simplex grid's denominator.
    pub denominator: u32,
    /// What the codebook may contain besides the grid.
    pub pool: Pool,
}

/// The codebook and what went into it.
struct Outcome {
    /// The strict codebook (or the learned one) and the strict build's statistics.
    built: codebook::Built,
    /// With `--budget`: the learning's statistics.
    learned: Option<codebook::LearnStats>,
    /// With `--budget`: what the guard measured and which codebook it wrote.
    guard: Option<codebook::Guard>,
}

/// `releasegate build-codebook`.
///
/// With several contracts the codebook is pooled: their questions must share
/// the class count and the frozen workflows up to labels, training answers of
/// all of them enter in each one's canonical order, and the artifact serves
/// every label set positionally. With `learn`, the strict codebook is the
/// candidate pool of a greedy compact codebook learned on the same train split.
pub(in crate::cli) fn build_codebook_command(args: &Args) -> Result<(), Error> {
    let mut inputs: Vec<(&Path, &str)> = args
        .worlds
        .iter()
        .map(|w| (w.as_path(), "--worlds"))
        .collect();
    inputs.push((args.config, "--config"));
    super::refuse_overwriting(args.out, "--out", &inputs)?;
    let config = releasegate_proxy::load::load_without_codebooks(args.config).or_usage()?;
    let contracts = pooled_contracts(&config, args.contracts, args.question)?;
    let provider = provider(args, &contracts)?;
    let args = &Args {
        provider: Some(provider.as_str()),
        ..*args
    };
    let rule = &contracts[0].questions()[args.question];
    let spec = rule
        .workflows()
        .ok_or_else(|| Error::usage("the question has no workflows"))?;
    warn_about_grid(rule.released_labels().len(), args.build.denominator);
    let files = read_files(args.worlds)?;
    let bar = Progress::new("build-codebook", "worlds");
    let (training, worlds) = read_training(args, &files, &contracts, spec, &bar)?;
    if training.answers.is_empty() {
        return Err(no_training(args, &training));
    }
    bar.set_message("building");
    let outcome = build(
        args,
        &contracts,
        spec,
        (&training, &worlds),
        source_sha256(&files),
        &bar,
    )?;
    releasegate_proxy::load::write_file(args.out, &outcome.built.codebook.to_json_bytes())
        .map_err(|error| {
            Error::Failure(format!(
                "cannot write codebook file {}: {error}",
                args.out.display()
            ))
        })?;
    print_summary(args, &training, &outcome)
}

/// The contracts named, each with `question` declaring workflows, all of them able to share
/// one codebook (the first one's).
fn pooled_contracts(
    config: &Config,
    names: &[String],
    question: &str,
) -> Result<Vec<Arc<Contract>>, Error> {
    let mut contracts = Vec::new();
    for name in names {
        let contract = config
            .contract(name)
            .ok_or_else(|| Error::usage(format!("no contract named `{name}`")))?;
        let rule = contract.questions().get(question).ok_or_else(|| {
            Error::usage(format!("contract `{name}` has no question `{question}`"))
        })?;
        if rule.workflows().is_none() {
            return Err(Error::usage(format!(
                "contracts.{name}.questions.{question} has no `workflows` table: a codebook is built for frozen workflows"
            )));
        }
        contracts.push(contract.clone());
    }
    let first = contracts
        .first()
        .ok_or_else(|| Error::usage("name at least one --contract"))?;
    let rule = &first.questions()[question];
    let spec = rule
        .workflows()
        .ok_or_else(|| Error::usage("the question has no workflows"))?;
    let n_classes = rule.released_labels().len();
    for contract in &contracts[1..] {
        let other = &contract.questions()[question];
        let same = other.released_labels().len() == n_classes
            && other
                .workflows()
                .is_some_and(|w| codebook::Codebook::can_pool(spec, w));
        if !same {
            return Err(Error::usage(format!(
                "contract `{}` cannot share the codebook: its question needs the same class count and the same frozen workflows as `{}`",
                contract.name(),
                first.name()
            )));
        }
    }
    Ok(contracts)
}

/// `--provider`, or the first contract's first provider: one every contract lists.
fn provider(args: &Args, contracts: &[Arc<Contract>]) -> Result<String, Error> {
    let provider = args.provider.unwrap_or(contracts[0].provider());
    for contract in contracts {
        if !contract.providers().iter().any(|p| p == provider) {
            return Err(Error::usage(format!(
                "contract `{}` has no provider `{provider}` (its providers: {})",
                contract.name(),
                contract.providers().join(", ")
            )));
        }
    }
    Ok(provider.to_string())
}

/// Warns on stderr when the grid is large enough to slow every mapping down.
fn warn_about_grid(n_classes: usize, denominator: u32) {
    let grid = codebook::grid_size(n_classes, denominator);
    if grid > GRID_WARNING {
        let suggestion = codebook::largest_denominator_within(n_classes, GRID_WARNING)
            .map_or_else(String::new, |d| {
                format!("; --denominator {d} keeps it under {GRID_WARNING}")
            });
        eprintln!(
            "warning: the denominator-{denominator} grid has {grid} vectors for {n_classes} classes (times 3 confidences){suggestion}"
        );
    }
}

/// Every worlds file's bytes, in the order given; a blank file is a usage error.
fn read_files(inputs: &[PathBuf]) -> Result<Vec<(&Path, Vec<u8>)>, Error> {
    inputs
        .iter()
        .map(|input| {
            let bytes = std::fs::read(input).map_err(|error| {
                Error::usage(format!("cannot read {}: {error}", input.display()))
            })?;
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Err(Error::usage(format!(
                    "{} is empty: expected worlds JSONL lines",
                    input.display()
                )));
            }
            Ok((input.as_path(), bytes))
        })
        .collect()
}

/// The hash the codebook records of its source. A capture's rotations are read in the order
/// given, as one file: the hash of their concatenation (each ended by a newline); one file's
/// own hash, whatever its last byte.
fn source_sha256(files: &[(&Path, Vec<u8>)]) -> String {
    if let [(_, bytes)] = files {
        return workflow::sha256_hex(bytes);
    }
    let mut all = Vec::new();
    for (_, bytes) in files {
        all.extend_from_slice(bytes);
        if all.last() != Some(&b'\n') {
            all.push(b'\n');
        }
    }
    workflow::sha256_hex(&all)
}

/// The training answers of every file's worlds, counted on `bar`; validation answers only
/// with `--budget` (they choose the learned codebook's assignment; never the test split), and
/// then the train and validation worlds themselves (the guard's audit reads them).
fn read_training(
    args: &Args,
    files: &[(&Path, Vec<u8>)],
    contracts: &[Arc<Contract>],
    spec: &Spec,
    bar: &Progress,
) -> Result<(TrainingSet, Vec<World>), Error> {
    let mut training = TrainingSet::default();
    let mut kept = Vec::new();
    let mut n_read = 0u64;
    // World ids are unique and pairs keep to one split across all the files, read as one.
    let mut seen = worlds::Seen::default();
    if let Some(first) = shared_first_provider(contracts) {
        seen.set_first_provider(first);
    }
    for (input, bytes) in files {
        if files.len() > 1 {
            seen.set_file(input.display().to_string());
        }
        let mut reader = worlds::Reader::with_seen(bytes.as_slice(), seen);
        for world in reader.by_ref() {
            let world = world.or_failure_in(input)?;
            n_read += 1;
            bar.set_position(n_read);
            let provider = args.provider.unwrap_or_default();
            training.add(
                contracts,
                (args.question, provider),
                spec,
                &world,
                args.learn.is_some(),
            );
            let answered = contracts
                .iter()
                .any(|contract| dataset::answered_by(contract, &world) == provider);
            if args.learn.is_some() && world.split != Split::Test && answered {
                kept.push(world);
            }
        }
        seen = reader.into_seen();
    }
    Ok((training, kept))
}

/// No train-split world fits the question: what a codebook is built from.
fn no_training(args: &Args, training: &TrainingSet) -> Error {
    Error::usage(format!(
        "no train-split world of {} answered by `{}` fits question `{}` of {}: a codebook is \
         built from the contract's own native answers (worlds asked with the contract's \
         question, its classes and pinned text, split \"train\", answered by that provider: \
         their `provider`, none for the contract's first); skipped: {:?}",
        args.worlds
            .iter()
            .map(|input| input.display().to_string())
            .collect::<Vec<_>>()
            .join(" + "),
        args.provider.unwrap_or_default(),
        args.question,
        args.contracts.join(", "),
        training.skipped
    ))
}

/// The strict codebook over the grid (and with `--pool grid+training` the training answers),
/// serving every contract's label set; with `--budget` the compact codebook learned from it.
fn build(
    args: &Args,
    contracts: &[Arc<Contract>],
    spec: &Spec,
    (training, worlds): (&TrainingSet, &[World]),
    source_sha256: String,
    bar: &Progress,
) -> Result<Outcome, Error> {
    let classes = contracts[0].questions()[args.question].released_labels();
    // The training answers always choose and order what is kept (learning, validation); they
    // enter the codebook's own codewords only with --pool grid+training.
    let pooled: &[codebook::TrainingAnswer] = match args.build.pool {
        Pool::Grid => &[],
        Pool::GridTraining => &training.answers,
    };
    let built = codebook::build(classes, args.build.denominator, spec, pooled, source_sha256);
    bar.finish_and_clear();
    let mut built = built.or_usage()?;
    let others: Vec<Vec<String>> = contracts[1..]
        .iter()
        .map(|c| c.questions()[args.question].released_labels().to_vec())
        .collect();
    built.codebook = built.codebook.with_other_class_sets(others).or_usage()?;
    let Some(options) = args.learn else {
        return Ok(Outcome {
            built,
            learned: None,
            guard: None,
        });
    };
    let settings = codebook::Settings {
        pair_weight: options.pair_weight,
        ..codebook::Settings::new(options.budget, options.max_codewords)
    };
    let (bounded, stats) = codebook::learn(
        &built.codebook,
        spec,
        &training.responses,
        &training.validation,
        &settings,
    )
    .or_usage()?;
    let record = guard_record(args, contracts, worlds, &built.codebook, &bounded, options)?;
    built.codebook = match record.chosen {
        codebook::Chosen::Bounded => bounded,
        codebook::Chosen::Strict => built.codebook,
    }
    .with_guard(record.clone())
    .map_err(|error| Error::Failure(format!("the guard's record: {error}")))?;
    Ok(Outcome {
        built,
        learned: Some(stats),
        guard: Some(record),
    })
}

/// The guard: `bounded` against `strict` on the validation split, paired, with the audit's
/// attackers (`releasegate_lab::audit::guard`); its record says which one is written.
fn guard_record(
    args: &Args,
    contracts: &[Arc<Contract>],
    worlds: &[World],
    strict: &codebook::Codebook,
    bounded: &codebook::Codebook,
    options: LearnOptions,
) -> Result<codebook::Guard, Error> {
    let mechanisms = |codebook: &codebook::Codebook, admissibility: Admissibility| {
        contracts
            .iter()
            .map(|contract| {
                let spec = contract.questions()[args.question]
                    .workflows()
                    .cloned()
                    .ok_or_else(|| Error::usage("the question has no workflows"))?;
                let mapper = Mapper::with_admissibility(codebook.clone(), spec, admissibility)
                    .map_err(|error| Error::Failure(format!("the guard's mapper: {error}")))?;
                let mechanism = Mechanism::Wcpq(Arc::new(WcpqMechanism {
                    mapper,
                    fallback: Fallback::Native,
                    confidence: ConfidenceMode::Codeword,
                    codebook_sha256: workflow::sha256_hex(&codebook.to_json_bytes()),
                }));
                Ok((contract.name().to_string(), mechanism))
            })
            .collect::<Result<_, Error>>()
    };
    let strict_mechanisms = mechanisms(strict, Admissibility::Strict)?;
    let bounded_mechanisms = mechanisms(bounded, Admissibility::Budget(options.budget))?;
    let settings = guard::Settings::default();
    let outcome = guard::compare(
        contracts,
        args.question,
        worlds,
        &strict_mechanisms,
        &bounded_mechanisms,
        &settings,
    );
    let learned = guard::Learned {
        budget: options.budget,
        max_codewords: options.max_codewords,
        pair_weight: options.pair_weight,
    };
    let record = guard::record(learned, &outcome, &settings);
    eprintln!("{}", guard_message(&record));
    Ok(record)
}

/// The guard's choice and figures in one line (stderr).
fn guard_message(record: &codebook::Guard) -> String {
    let figures = record.difference.map_or_else(String::new, |d| {
        format!(
            "; bounded minus strict recovery on {} validation pairs: {:+.2} points [{:+.2}, {:+.2}]",
            d.pairs,
            100.0 * d.point,
            100.0 * d.lower,
            100.0 * d.upper
        )
    });
    let written = match record.chosen {
        codebook::Chosen::Bounded => "wrote the bounded codebook",
        codebook::Chosen::Strict => "wrote the strict codebook instead of the bounded one",
    };
    format!(
        "build-codebook --budget {}: {written} ({}){figures}",
        record.budget, record.reason
    )
}

/// The JSON summary on stdout.
fn print_summary(args: &Args, training: &TrainingSet, outcome: &Outcome) -> Result<(), Error> {
    let codebook = &outcome.built.codebook;
    let class_sets: Vec<&[String]> = codebook.class_sets().collect();
    let summary = serde_json::json!({
        "codebook": args.out.display().to_string(),
        "contracts": args.contracts,
        "question": args.question,
        "provider": args.provider,
        "class_sets": class_sets,
        "denominator": args.build.denominator,
        "pool": match args.build.pool {
            Pool::Grid => "grid",
            Pool::GridTraining => "grid+training",
        },
        "training_answers": training.answers.len(),
        "skipped_train_worlds": training.skipped,
        "workflows_sha256": codebook.workflows_sha256(),
        "stats": outcome.built.stats,
        "learned": args.learn.map(|o| serde_json::json!({
            "budget": o.budget,
            "max_codewords": o.max_codewords,
            "pair_weight": o.pair_weight,
            "stats": outcome.learned,
        })),
        "guard": outcome.guard,
    });
    crate::outln!(
        "{}",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    )
}
