use super::*;

/// Recipients `a` and `b` on contract `mine` (recipient scope) and `ours` (provider scope,
/// shared with contract `theirs` of recipient `c`); every cache holds `max_bytes` (none
/// with 0).
fn config(max_bytes: u64) -> Config {
    let question = "[contracts.{}.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice\"\n";
    let mut text = String::from("[providers.p]\nkind = \"simulated\"\n");
    for (name, scope) in [
        ("mine", "recipient"),
        ("ours", "provider"),
        ("theirs", "provider"),
    ] {
        let cache =
            format!("cache = {{ ttl_s = 60, max_bytes = {max_bytes}, scope = \"{scope}\" }}\n");
        text.push_str(&format!(
            "[contracts.{name}]\nprovider = \"p\"\n{}{}",
            if max_bytes > 0 { cache.as_str() } else { "" },
            question.replace("{}", name)
        ));
    }
    for (name, contracts) in [
        ("a", "\"mine\", \"ours\""),
        ("b", "\"mine\""),
        ("c", "\"theirs\""),
    ] {
        text.push_str(&format!(
            "[[recipients]]\nname = \"{name}\"\nkey_sha256 = \"{}\"\ncontracts = [{contracts}]\n",
            crate::auth::hash_key(name)
        ));
    }
    crate::load::from_toml(&text).unwrap()
}

fn digest(n: usize) -> RequestDigest {
    RequestDigest::new(format!("{{\"n\":{n}}}").as_bytes(), std::iter::empty(), &[])
}

fn answer() -> Bytes {
    Bytes::from(vec![b' '; 600])
}

fn bytes_gauge(metrics: &Metrics, contract: &str) -> i64 {
    metrics
        .routing
        .cache_bytes
        .with_label_values(&[contract])
        .get()
}

#[test]
fn no_other_recipients_traffic_evicts_a_recipients_entries() {
    // `mine`'s 2048 bytes are 1024 for each of its two recipients: one entry each.
    let config = config(2048);
    let metrics = Metrics::new().unwrap();
    let cache = AnswerCache::new(&config, &metrics).unwrap();
    let mine = &config.contracts()["mine"];
    cache.fill(mine, Some("a"), digest(0), "p", answer());
    // Far more than the room `b` has, all of them b's own.
    for n in 1..200 {
        cache.fill(mine, Some("b"), digest(n), "p", answer());
    }
    for entries in cache.inner.recipients.read().unwrap().values() {
        entries.run_pending_tasks();
    }
    assert!(cache.get(mine, Some("a"), digest(0), "p").is_some());
    // b's partition stayed within its room; a's entry is a's alone.
    let partitions = cache.inner.recipients.read().unwrap();
    assert!(partitions["b"].weighted_size() <= 1024);
    assert_eq!(partitions["a"].entry_count(), 1);
    drop(partitions);
    assert!(cache.get(mine, Some("b"), digest(0), "p").is_none());
    assert!(cache.get(mine, None, digest(0), "p").is_none());
    // Only the named provider's entry: another provider's is not the answer a miss would get.
    assert!(cache.get(mine, Some("a"), digest(0), "q").is_none());
}

#[test]
fn provider_scoped_contracts_share_one_partition_and_recipients_their_contracts() {
    let config = config(4096);
    let metrics = Metrics::new().unwrap();
    let cache = AnswerCache::new(&config, &metrics).unwrap();
    let (ours, theirs) = (&config.contracts()["ours"], &config.contracts()["theirs"]);
    cache.fill(ours, Some("a"), digest(1), "p", answer());
    assert!(cache.get(theirs, Some("c"), digest(1), "p").is_some());
    // a's room is its share of its one recipient-scoped contract (bound to a and b); b's
    // partition is made at its first fill.
    assert_eq!(cache.inner.plans["a"].max_bytes, 2048);
    assert!(!cache.inner.recipients.read().unwrap().contains_key("b"));
    assert!(!cache.inner.plans.contains_key("c"));
}

#[test]
fn the_bytes_gauge_shows_the_newest_generation_only() {
    let config = config(1 << 20);
    let metrics = Metrics::new().unwrap();
    let mine = &config.contracts()["mine"];
    let old = AnswerCache::new(&config, &metrics).unwrap();
    old.fill(mine, Some("a"), digest(1), "p", answer());
    let held = bytes_gauge(&metrics, "mine");
    assert!(held > 600, "{held}");
    // A reload: the new generation starts from nothing, and the old one's entries (dropped
    // with it) no longer count.
    let new = AnswerCache::new(&config, &metrics).unwrap();
    assert_eq!(bytes_gauge(&metrics, "mine"), 0);
    old.fill(mine, Some("a"), digest(2), "p", answer());
    assert_eq!(bytes_gauge(&metrics, "mine"), 0);
    new.fill(mine, Some("b"), digest(3), "p", answer());
    // (b's entry weighs what a's did: the same answer, provider and length of name.)
    assert_eq!(bytes_gauge(&metrics, "mine"), held);
    // An entry removed takes its bytes off.
    for entries in new.inner.recipients.read().unwrap().values() {
        entries.invalidate_all();
        entries.run_pending_tasks();
    }
    assert_eq!(bytes_gauge(&metrics, "mine"), 0);
    new.fill(mine, Some("b"), digest(4), "p", answer());
    assert_eq!(bytes_gauge(&metrics, "mine"), held);
    // A reload to a configuration without a cache leaves no series behind.
    assert!(AnswerCache::new(&self::config(0), &metrics).is_none());
    new.fill(mine, Some("b"), digest(5), "p", answer());
    let families = metrics.registry().gather();
    let series = families
        .iter()
        .find(|family| family.name() == "releasegate_cache_bytes")
        .map_or(0, |family| family.get_metric().len());
    assert_eq!(series, 0);
}
