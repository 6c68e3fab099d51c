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
    second.world_id = "delivery-p0007-w0".into();
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
    let input = format!(
        "{good}\n\n{{not json\n{missing_split}\n{bad_split}\n{bad_labels}\r\n{s_not_in_hypotheses}\n[1,2]\n{good}"
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
    input.extend_from_slice(LINE.as_bytes());
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
