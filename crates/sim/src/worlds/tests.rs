use super::*;

const LINE: &str = r#"{"world_id":"delivery-p0007-w1","pair_id":"delivery-p0007","split":"train","domain":"delivery","request":{"model":"jev-1.13.0","state":{"z":1,"a":2},"questions":{"coarse_cause":{"type":"choice","criteria":{"DELAY":"d","ADDRESS":null}}}},"response":{"model":"jev-1.13.0","answers":{"coarse_cause":{"type":"choice","choice":"DELAY","probabilities":{"DELAY":0.91,"ADDRESS":0.09},"confidence":0.82}},"usage":{"input_tokens":412,"output_tokens":1}},"labels":{"question":"coarse_cause","T":"DELAY","S":"missed_transfer","hypotheses":["missed_transfer","sorting_backlog"],"note":"kept"},"zeta":[1,2],"alpha":{"b":1,"a":2}}"#;

#[test]
fn round_trip_keeps_unknown_keys_and_key_order() {
    let world = World::from_line(LINE, 1).expect("valid line");
    assert_eq!(world.split, Split::Train);
    let keys: Vec<&String> = world.extra.keys().collect();
    assert_eq!(keys, ["zeta", "alpha"]);
    let labels = world.labels.as_ref().expect("labels");
    assert_eq!(labels.t, "DELAY");
    assert_eq!(labels.extra.get("note"), Some(&Value::from("kept")));
    // The line is already in canonical order, so the rewrite is byte-identical.
    assert_eq!(world.to_line().expect("serializes"), LINE);
}

#[test]
fn unknown_keys_move_after_known_keys_but_keep_their_order() {
    let line = r#"{"b_extra":1,"world_id":"w","pair_id":"p","a_extra":2,"split":"test","domain":"d","request":{},"response":{}}"#;
    let world = World::from_line(line, 1).expect("valid line");
    assert_eq!(
        world.to_line().expect("serializes"),
        r#"{"world_id":"w","pair_id":"p","split":"test","domain":"d","request":{},"response":{},"b_extra":1,"a_extra":2}"#
    );
    assert!(world.labels.is_none());
}

#[test]
fn writer_and_reader_round_trip_many_worlds() {
    let world = World::from_line(LINE, 1).expect("valid line");
    let mut second = world.clone();
    second.world_id = "delivery-p0008-w0".into();
    second.pair_id = "delivery-p0008".into();
    second.split = Split::Validation;
    let mut bytes = Vec::new();
    let n_written = write_all(&mut bytes, [&world, &second]).expect("writes");
    assert_eq!(n_written, 2);
    let text = String::from_utf8(bytes.clone()).expect("utf-8");
    assert_eq!(text.lines().count(), 2);
    assert!(text.ends_with('\n'));
    let back = read_all(bytes.as_slice()).expect("reads");
    assert_eq!(back, vec![world, second]);
}

#[test]
fn errors_carry_one_based_line_numbers_and_are_not_skipped() {
    let good = LINE;
    let missing_split = LINE.replace(r#""split":"train","#, "");
    let bad_split = LINE.replace(r#""split":"train""#, r#""split":"dev""#);
    let bad_labels = LINE.replace(
        r#"["missed_transfer","sorting_backlog"]"#,
        r#"["sorting_backlog","missed_transfer"]"#,
    );
    let s_not_in_hypotheses = LINE.replace(r#""S":"missed_transfer""#, r#""S":"water_ingress""#);
    // The last world is the pair's other one (world ids are unique).
    let mate = LINE.replace("delivery-p0007-w1", "delivery-p0007-w0");
    let input = format!(
        "{good}\n\n{{not json\n{missing_split}\n{bad_split}\n{bad_labels}\r\n{s_not_in_hypotheses}\n[1,2]\n{mate}"
    );
    let results: Vec<Result<World, Error>> = Reader::new(input.as_bytes()).collect();
    assert_eq!(results.len(), 8, "the blank line 2 is the only one skipped");
    assert!(results[0].is_ok());
    let describe = |r: &Result<World, Error>| match r {
        Ok(_) => "ok".to_string(),
        Err(Error::Json { line, .. }) => format!("json@{line}"),
        Err(Error::Invalid { line, source }) => format!("invalid@{line}:{source}"),
        Err(Error::Labels { line, .. }) => format!("labels@{line}"),
        Err(other) => format!("other:{other}"),
    };
    assert_eq!(describe(&results[1]), "json@3");
    let missing = describe(&results[2]);
    assert!(
        missing.starts_with("invalid@4:") && missing.contains("split"),
        "{missing}"
    );
    let unknown = describe(&results[3]);
    assert!(
        unknown.starts_with("invalid@5:") && unknown.contains("dev"),
        "{unknown}"
    );
    assert_eq!(describe(&results[4]), "labels@6");
    assert_eq!(describe(&results[5]), "labels@7");
    assert!(describe(&results[6]).starts_with("invalid@8:"));
    assert_eq!(describe(&results[7]), "ok");
    let message = results[1].as_ref().err().map(ToString::to_string);
    assert_eq!(message.as_deref(), Some("line 3: malformed json"));
}

#[test]
fn invalid_utf8_is_reported_with_its_line() {
    let mut input = LINE.as_bytes().to_vec();
    input.extend_from_slice(b"\n\xff\xfe\n");
    input.extend_from_slice(LINE.replace("p0007-w1", "p0007-w0").as_bytes());
    let results: Vec<_> = Reader::new(input.as_slice()).collect();
    assert_eq!(results.len(), 3);
    assert!(matches!(results[1], Err(Error::Utf8 { line: 2 })));
    assert!(results[2].is_ok());
}

#[test]
fn read_all_stops_at_the_first_error() {
    let input = format!("{LINE}\n{{\n{LINE}\n");
    let err = read_all(input.as_bytes()).expect_err("line 2 is malformed");
    assert!(matches!(err, Error::Json { line: 2, .. }));
}

#[test]
fn null_labels_read_as_absent() {
    let line = r#"{"world_id":"w","pair_id":"p","split":"validation","domain":"d","request":{},"response":{},"labels":null}"#;
    let world = World::from_line(line, 1).expect("valid");
    assert!(world.labels.is_none());
    assert_eq!(
        Split::ALL.map(Split::as_str),
        ["train", "validation", "test"]
    );
}

#[test]
fn the_provider_is_optional_and_written_after_the_labels() {
    let world = World::from_line(LINE, 1).expect("valid line");
    assert_eq!(world.provider, None);
    let named = LINE.replacen(r#","zeta""#, r#","provider":"secondary","zeta""#, 1);
    let read = World::from_line(&named, 1).expect("valid line");
    assert_eq!(read.provider.as_deref(), Some("secondary"));
    assert_eq!(read.to_line().expect("serializes"), named);
    let moved = LINE.replacen(r#"{"world_id""#, r#"{"provider":"secondary","world_id""#, 1);
    assert_eq!(
        World::from_line(&moved, 1).unwrap().to_line().unwrap(),
        named
    );
    let wrong = LINE.replacen(r#","zeta""#, r#","provider":7,"zeta""#, 1);
    assert!(matches!(
        World::from_line(&wrong, 1),
        Err(Error::Invalid { line: 1, .. })
    ));
}

#[test]
fn any_hypothesis_count_but_two_is_an_invalid_world_with_its_line() {
    for (hypotheses, count) in [
        (r#"[]"#, 0),
        (r#"["missed_transfer"]"#, 1),
        (
            r#"["missed_transfer","sorting_backlog","water_ingress"]"#,
            3,
        ),
    ] {
        let line = LINE.replace(r#"["missed_transfer","sorting_backlog"]"#, hypotheses);
        let error = World::from_line(&line, 4).expect_err("not two hypotheses");
        let Error::Invalid { line: 4, source } = &error else {
            panic!("{count} hypotheses: {error:?}");
        };
        assert!(
            source.to_string().starts_with(&format!(
                "labels.hypotheses must hold the pair's two mechanisms, got {count} names"
            )),
            "{source}"
        );
    }
}

/// `LINE` as world `world_id` of pair `pair_id` in `split`.
fn world_line(world_id: &str, pair_id: &str, split: &str) -> String {
    LINE.replace("delivery-p0007-w1", world_id)
        .replace("delivery-p0007", pair_id)
        .replace(r#""split":"train""#, &format!(r#""split":"{split}""#))
}

/// Each line's outcome: `ok`, or its error's message.
fn outcomes<R: std::io::BufRead>(reader: Reader<R>) -> Vec<String> {
    reader
        .map(|r| r.as_ref().map_or_else(ToString::to_string, |_| "ok".into()))
        .collect()
}

#[test]
fn a_repeated_world_id_is_an_error_naming_both_lines() {
    let input = [
        world_line("a-w0", "a", "train"),
        world_line("a-w1", "a", "train"),
        String::new(),
        world_line("a-w0", "b", "test"),
    ]
    .join("\n");
    let results: Vec<_> = Reader::new(input.as_bytes()).collect();
    assert_eq!(results.len(), 3);
    assert!(results[..2].iter().all(Result::is_ok));
    let error = results[2].as_ref().expect_err("a-w0 again");
    assert!(
        matches!(error, Error::DuplicateWorldId { line: 4, world_id, .. } if world_id == "a-w0"),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "line 4: world id `a-w0` repeats the world of line 1 (world ids are unique)"
    );
}

/// Worlds collected from two providers for the same requests share their ids, and two
/// domains may number their pairs alike: neither is a repeat.
#[test]
fn ids_are_unique_per_provider_and_pairs_per_provider_and_domain() {
    let by = |line: String, provider: &str| {
        line.replacen("{", &format!("{{\"provider\":\"{provider}\","), 1)
    };
    let other_domain = |line: String| line.replace(r#""domain":"delivery""#, r#""domain":"it""#);
    let input = [
        world_line("a-w0", "a", "train"),
        by(world_line("a-w0", "a", "test"), "second"),
        by(world_line("a-w1", "a", "test"), "second"),
        other_domain(world_line("it-a-w0", "a", "test")),
        world_line("a-w1", "a", "train"),
    ]
    .join("\n");
    let results: Vec<_> = Reader::new(input.as_bytes()).collect();
    for result in &results {
        assert!(result.is_ok(), "{result:?}");
    }
    // The same provider's repeat is still one.
    let input = [
        by(world_line("a-w0", "a", "train"), "second"),
        by(world_line("a-w0", "a", "train"), "second"),
    ]
    .join("\n");
    let results: Vec<_> = Reader::new(input.as_bytes()).collect();
    assert!(matches!(
        results[1],
        Err(Error::DuplicateWorldId { line: 2, .. })
    ));
}

#[test]
fn a_pair_across_splits_is_an_error_naming_the_pair_and_both_lines() {
    let input = [
        world_line("a-w0", "a", "train"),
        world_line("b-w0", "b", "validation"),
        world_line("a-w1", "a", "test"),
        world_line("b-w1", "b", "validation"),
    ]
    .join("\n");
    assert_eq!(
        outcomes(Reader::new(input.as_bytes())),
        [
            "ok",
            "ok",
            "line 3: pair `a` has a world in split test here and one in split train on line 1 \
             (both worlds of a pair share a split)",
            "ok"
        ]
    );
}

/// A world without `provider` is the contract's first provider's: where the reader knows
/// that provider, a world naming it repeats the id, or splits the pair, of one naming none.
#[test]
fn a_world_naming_the_first_provider_is_one_naming_none_where_the_first_is_known() {
    let by = |line: String, provider: &str| {
        line.replacen("{", &format!("{{\"provider\":\"{provider}\","), 1)
    };
    let input = [
        world_line("a-w0", "a", "train"),
        by(world_line("a-w0", "b", "train"), "first"),
        by(world_line("a-w1", "a", "test"), "first"),
        by(world_line("a-w1", "a", "test"), "second"),
    ]
    .join("\n");
    let mut seen = Seen::default();
    seen.set_first_provider("first");
    assert_eq!(
        outcomes(Reader::with_seen(input.as_bytes(), seen)),
        [
            "ok",
            "line 2: world id `a-w0` repeats the world of line 1 (world ids are unique)",
            "line 3: pair `a` has a world in split test here and one in split train on line 1 \
             (both worlds of a pair share a split)",
            "ok"
        ]
    );
    // Not knowing the first provider, the reader tells them apart.
    assert_eq!(
        outcomes(Reader::new(input.as_bytes())),
        ["ok", "ok", "ok", "ok"]
    );
}

#[test]
fn files_read_as_one_share_their_checks_and_name_the_earlier_file() {
    let mut seen = Seen::default();
    seen.set_file("a.jsonl");
    let first = world_line("a-w0", "a", "train");
    let mut reader = Reader::with_seen(first.as_bytes(), seen);
    assert!(reader.by_ref().all(|r| r.is_ok()));
    let mut seen = reader.into_seen();
    seen.set_file("b.jsonl");
    let second = [
        world_line("a-w1", "a", "test"),
        world_line("a-w0", "c", "train"),
    ]
    .join("\n");
    assert_eq!(
        outcomes(Reader::with_seen(second.as_bytes(), seen)),
        [
            "line 1: pair `a` has a world in split test here and one in split train on line 1 \
             of a.jsonl (both worlds of a pair share a split)",
            "line 2: world id `a-w0` repeats the world of line 1 of a.jsonl (world ids are unique)"
        ]
    );
}
