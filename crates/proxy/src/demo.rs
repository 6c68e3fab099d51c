//! The demo keys stay on loopback: a configuration that holds a key of the embedded demo
//! (`config/releasegate.toml`, whose keys the README publishes) is served only on a loopback
//! address. Anyone who read the README could call it anywhere else.

use releasegate_core::config::Config;

use crate::load::EMBEDDED_DEFAULT;

/// The key digests (`key_sha256`, hex) of the embedded demo's recipients, read from its text.
pub fn demo_key_digests() -> Vec<&'static str> {
    EMBEDDED_DEFAULT
        .lines()
        .filter_map(|line| line.trim().strip_prefix("key_sha256"))
        .filter_map(|rest| rest.trim().strip_prefix('='))
        .map(|value| value.trim().trim_matches('"'))
        .filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect()
}

/// Why `config` must not be served: it holds a demo key and its public listener is not on
/// loopback. `None` when it may be.
pub fn exposed(config: &Config) -> Option<String> {
    let listen = config.server().listen();
    if listen.ip().is_loopback() {
        return None;
    }
    let demo = demo_key_digests();
    let holders: Vec<&str> = config
        .recipients()
        .iter()
        .filter(|recipient| demo.contains(&sha256_hex_of(&recipient.key_sha256).as_str()))
        .map(|recipient| recipient.name.as_str())
        .collect();
    if holders.is_empty() {
        return None;
    }
    let source = config.source();
    let holders = holders
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "the configuration ({source}) holds the published demo keys of {holders} and would serve \
         them on {listen}, beyond loopback: \
         anyone who read the README could call it. Give the proxy a configuration of your own, \
         with your own recipients' key hashes (`releasegate hash-key`), and name it with \
         `--config PATH` (in the container image: mount it at the path its CMD names, \
         /etc/releasegate/releasegate.toml); or keep the demo on loopback (server.listen = \
         \"127.0.0.1:8080\")"
    ))
}

/// A digest as lower-case hex.
fn sha256_hex_of(digest: &[u8; 32]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::{demo_key_digests, exposed};
    use crate::auth::hash_key;
    use crate::load::{EMBEDDED_DEFAULT, from_toml};

    /// The embedded demo's text with `listen` replaced.
    fn demo_on(listen: &str) -> String {
        EMBEDDED_DEFAULT
            .replace(
                "listen = \"127.0.0.1:8080\"",
                &format!("listen = \"{listen}\""),
            )
            .replace("certification = \"required\"", "certification = \"off\"")
            // Unit tests run in the crate's directory.
            .replace("\"codebooks/", "\"../../config/codebooks/")
    }

    #[test]
    fn the_demo_digests_are_the_published_keys() {
        let published = ["dispatcher", "analyst", "auditor", "support", "planner"]
            .map(|name| hash_key(&format!("demo-{name}-key")));
        assert_eq!(demo_key_digests(), published);
    }

    #[test]
    fn a_demo_key_is_served_on_loopback_only() {
        for listen in ["127.0.0.1:8080", "[::1]:8080", "127.0.0.2:0"] {
            let config = from_toml(&demo_on(listen)).unwrap();
            assert_eq!(exposed(&config), None, "{listen}");
        }
        for listen in ["0.0.0.0:8080", "[::]:8080", "10.1.2.3:80"] {
            let config = from_toml(&demo_on(listen)).unwrap();
            let refusal = exposed(&config).expect(listen);
            assert!(refusal.contains("demo keys of `dispatcher`, `analyst`"));
            assert!(
                refusal.contains(listen) && refusal.contains("--config PATH"),
                "{refusal}"
            );
        }
    }

    #[test]
    fn one_demo_key_among_real_ones_is_enough_and_real_keys_alone_are_served() {
        let config = |keys: &[&str]| {
            let mut text = "[server]\nlisten = \"0.0.0.0:8080\"\n[providers.p]\nkind = \"simulated\"\n\
                 [contracts.c]\nprovider = \"p\"\n[contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"choice\"\n"
                .to_string();
            for (i, key) in keys.iter().enumerate() {
                text.push_str(&format!(
                    "[[recipients]]\nname = \"r{i}\"\nkey_sha256 = \"{}\"\ncontracts = [\"c\"]\n",
                    hash_key(key)
                ));
            }
            from_toml(&text).unwrap()
        };
        assert_eq!(exposed(&config(&["a-real-key", "another-real-key"])), None);
        let refusal = exposed(&config(&["a-real-key", "demo-support-key"])).unwrap();
        assert!(
            refusal.contains("`r1`") && !refusal.contains("`r0`"),
            "{refusal}"
        );
    }
}
