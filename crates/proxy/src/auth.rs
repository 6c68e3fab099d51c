//! Recipient authentication: keys are compared by SHA-256 digest in constant time.

use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, HeaderName};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use releasegate_core::config::Recipient;

/// Header that selects a contract when a key is bound to several. The path
/// prefix `/contracts/{name}/` selects one too (for clients that cannot send
/// custom headers); both follow the same rules.
pub const CONTRACT_HEADER: &str = "x-release-contract";
/// Alternative to `Authorization: Bearer`.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The two names as header names, made once: a lookup by text parses the name each time.
static CONTRACT_HEADER_NAME: HeaderName = HeaderName::from_static(CONTRACT_HEADER);
static API_KEY_HEADER_NAME: HeaderName = HeaderName::from_static(API_KEY_HEADER);

/// Why a caller is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No key: neither `Authorization: Bearer KEY` nor `X-Api-Key` (403, as the System One
    /// API answers a request without its bearer credentials; a key it does not know is 401).
    #[error("no API key: send it as Authorization: Bearer KEY")]
    NoKey,
    /// A key that matches no recipient (401).
    #[error("invalid API key")]
    Unauthenticated,
    /// The key is not bound to the requested contract (403).
    #[error("this key is not bound to the requested release contract")]
    Forbidden,
    /// The key is bound to several contracts and none was chosen (400).
    #[error(
        "this key is bound to several release contracts; choose one with X-Release-Contract or the /contracts/{{name}}/ path prefix ({0})"
    )]
    Ambiguous(String),
    /// The path and the header name different contracts (400).
    #[error("the /contracts/{{name}}/ path prefix and X-Release-Contract name different contracts")]
    Conflict,
    /// A header that must appear at most once appears several times (400): two components
    /// reading "the" header differently is how request smuggling and confusion start, so
    /// none is chosen.
    #[error("the {0} header appears more than once; send it once")]
    Repeated(&'static str),
    /// `Authorization` and `X-Api-Key` carry different keys (400): like a repeated header,
    /// neither is chosen over the other.
    #[error("the Authorization and X-Api-Key headers carry different keys; send one key")]
    KeyConflict,
}

/// The recipients' key digests.
#[derive(Debug, Clone)]
pub struct Keys {
    recipients: Vec<Recipient>,
}

/// An authenticated caller and the contract its request runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The recipient's configured name.
    pub recipient: String,
    /// The selected contract.
    pub contract: String,
}

// === impl Keys ===

impl Keys {
    /// Builds the lookup from the configured recipients.
    pub fn new(recipients: &[Recipient]) -> Keys {
        Keys {
            recipients: recipients.to_vec(),
        }
    }

    /// Authenticates the request's key and selects its contract: the one named
    /// by the path prefix (`path_contract`) or the header, else the key's only one.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        path_contract: Option<&str>,
    ) -> Result<Caller, Error> {
        for (name, shown) in [
            (&AUTHORIZATION, "Authorization"),
            (&API_KEY_HEADER_NAME, "X-Api-Key"),
            (&CONTRACT_HEADER_NAME, "X-Release-Contract"),
        ] {
            if repeated(headers, name) {
                return Err(Error::Repeated(shown));
            }
        }
        let key = presented_key(headers)?.ok_or(Error::NoKey)?;
        let digest = Sha256::digest(key.as_bytes());
        // Compare against every recipient so timing does not depend on which one matches.
        let mut found: Option<&Recipient> = None;
        for recipient in &self.recipients {
            if bool::from(recipient.key_sha256.as_slice().ct_eq(digest.as_slice())) {
                found = Some(recipient);
            }
        }
        let recipient = found.ok_or(Error::Unauthenticated)?;
        let header = headers
            .get(&CONTRACT_HEADER_NAME)
            .map(|value| value.to_str().map(str::trim).unwrap_or(""));
        let requested = match (path_contract, header) {
            (Some(path), Some(header)) if path != header => return Err(Error::Conflict),
            (path, header) => path.or(header),
        };
        let contract = match requested {
            Some(name) => recipient
                .contracts
                .iter()
                .find(|c| c.as_str() == name)
                .ok_or(Error::Forbidden)?,
            None => match recipient.contracts.as_slice() {
                [only] => only,
                several => return Err(Error::Ambiguous(several.join(", "))),
            },
        };
        Ok(Caller {
            recipient: recipient.name.clone(),
            contract: contract.clone(),
        })
    }
}

/// Whether `name` appears more than once among `headers`.
pub(crate) fn repeated(headers: &HeaderMap, name: &HeaderName) -> bool {
    let mut values = headers.get_all(name).iter();
    values.next().is_some() && values.next().is_some()
}

/// The key from `Authorization: Bearer KEY` or `X-Api-Key: KEY` (`None`: no usable key).
/// Both headers may be sent only with the same key: the caller's two keys are compared
/// with each other, before either is checked, so the refusal says nothing about which
/// keys exist.
fn presented_key(headers: &HeaderMap) -> Result<Option<&str>, Error> {
    let api_key = headers
        .get(&API_KEY_HEADER_NAME)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|key| !key.is_empty());
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Ok(api_key);
    };
    let bearer = value.to_str().ok().and_then(|text| {
        let (scheme, key) = text.trim().split_once(' ')?;
        let key = key.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
    });
    match (bearer, api_key) {
        (Some(bearer), Some(api_key)) if bearer != api_key => Err(Error::KeyConflict),
        // An `Authorization` that is not a bearer key is no key, whatever else is sent (the
        // System One API refuses one with 403, as it does a missing one).
        (bearer, _) => Ok(bearer),
    }
}

/// Hex SHA-256 of a key (for `releasegate hash-key`).
pub fn hash_key(key: &str) -> String {
    releasegate_core::workflow::sha256_hex(key.as_bytes())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn keys() -> Keys {
        let digest = |k: &str| releasegate_core::config::parse_sha256_hex(&hash_key(k)).unwrap();
        Keys::new(&[
            Recipient {
                name: "one".into(),
                key_sha256: digest("k1"),
                contracts: vec!["a".into()],
                rate_limit: None,
                max_in_flight: None,
                policy: None,
            },
            Recipient {
                name: "two".into(),
                key_sha256: digest("k2"),
                contracts: vec!["a".into(), "b".into()],
                rate_limit: None,
                max_in_flight: None,
                policy: None,
            },
        ])
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn keys_select_contracts() {
        let keys = keys();
        let caller = |h: &[(&'static str, &str)]| keys.authenticate(&headers(h), None);
        assert_eq!(
            caller(&[("authorization", "Bearer k1")]).unwrap().contract,
            "a"
        );
        assert_eq!(
            caller(&[("authorization", "bearer  k1 ")])
                .unwrap()
                .recipient,
            "one"
        );
        assert_eq!(caller(&[("x-api-key", "k1")]).unwrap().contract, "a");
        assert_eq!(
            caller(&[("x-api-key", "k2"), ("x-release-contract", "b")])
                .unwrap()
                .contract,
            "b"
        );
        // No key (nor a bearer one) is 403, as the System One API answers; an unknown one 401.
        for no_key in [
            &[][..],
            &[("authorization", "Basic k1")],
            &[("authorization", "Bearer ")],
            &[("x-api-key", " ")],
        ] {
            assert_eq!(caller(no_key), Err(Error::NoKey), "{no_key:?}");
        }
        assert_eq!(
            caller(&[("authorization", "Bearer nope")]),
            Err(Error::Unauthenticated)
        );
        assert_eq!(
            caller(&[("x-api-key", "nope")]),
            Err(Error::Unauthenticated)
        );
        assert_eq!(
            caller(&[("authorization", "Bearer k1"), ("x-release-contract", "b")]),
            Err(Error::Forbidden)
        );
        assert!(matches!(
            caller(&[("authorization", "Bearer k2")]),
            Err(Error::Ambiguous(_))
        ));
    }

    #[test]
    fn the_path_selects_a_contract_like_the_header() {
        let keys = keys();
        let caller = |h: &[(&'static str, &str)], path| keys.authenticate(&headers(h), path);
        let k2 = ("authorization", "Bearer k2");
        assert_eq!(caller(&[k2], Some("b")).unwrap().contract, "b");
        assert_eq!(
            caller(&[k2, ("x-release-contract", "b")], Some("b"))
                .unwrap()
                .contract,
            "b"
        );
        assert_eq!(
            caller(&[k2, ("x-release-contract", "a")], Some("b")),
            Err(Error::Conflict)
        );
        assert_eq!(
            caller(&[("authorization", "Bearer k1")], Some("b")),
            Err(Error::Forbidden)
        );
        assert_eq!(caller(&[k2], Some("nope")), Err(Error::Forbidden));
        // The key is checked first: a stranger learns nothing about contracts.
        assert_eq!(
            caller(&[("x-release-contract", "a")], Some("b")),
            Err(Error::NoKey)
        );
        assert_eq!(
            caller(&[("authorization", "Bearer nope")], Some("b")),
            Err(Error::Unauthenticated)
        );
    }

    #[test]
    fn a_repeated_key_or_contract_header_is_refused_whichever_value_comes_first() {
        let keys = keys();
        let caller = |h: &[(&'static str, &str)]| keys.authenticate(&headers(h), None);
        let cases: [(&[(&'static str, &str)], &str); 4] = [
            (
                &[
                    ("authorization", "Bearer k1"),
                    ("authorization", "Bearer k2"),
                ],
                "Authorization",
            ),
            (
                &[
                    ("authorization", "Bearer k1"),
                    ("authorization", "Bearer k1"),
                ],
                "Authorization",
            ),
            (&[("x-api-key", "k2"), ("x-api-key", "k1")], "X-Api-Key"),
            (
                &[
                    ("authorization", "Bearer k2"),
                    ("x-release-contract", "b"),
                    ("x-release-contract", "a"),
                ],
                "X-Release-Contract",
            ),
        ];
        for (pairs, shown) in cases {
            assert_eq!(caller(pairs), Err(Error::Repeated(shown)), "{pairs:?}");
        }
        // Before the key is checked: a repeated header tells nothing about the keys.
        assert_eq!(
            caller(&[("authorization", "Bearer x"), ("authorization", "Bearer y")]),
            Err(Error::Repeated("Authorization"))
        );
    }

    #[test]
    fn two_key_headers_must_carry_the_same_key() {
        let keys = keys();
        let caller = |h: &[(&'static str, &str)]| keys.authenticate(&headers(h), None);
        // Refused before either key is checked: known and unknown keys alike.
        for (bearer, api_key) in [("Bearer k1", "k2"), ("Bearer x", "y"), ("Bearer k1", "x")] {
            assert_eq!(
                caller(&[("authorization", bearer), ("x-api-key", api_key)]),
                Err(Error::KeyConflict),
                "{bearer} / {api_key}"
            );
        }
        assert_eq!(
            caller(&[("authorization", "Bearer k1"), ("x-api-key", " k1 ")])
                .unwrap()
                .contract,
            "a"
        );
        // An empty X-Api-Key is no key; an `Authorization` that is not a bearer key is
        // no key either, and does not fall back to X-Api-Key.
        assert!(caller(&[("authorization", "Bearer k1"), ("x-api-key", "")]).is_ok());
        assert_eq!(
            caller(&[("authorization", "Basic k1"), ("x-api-key", "k1")]),
            Err(Error::NoKey)
        );
    }

    #[test]
    fn hash_key_is_hex_sha256() {
        assert_eq!(
            hash_key("demo-dispatcher-key"),
            "d2aacb68b85bbdced6e4c3f176f8c2c9f0e8faa9e41842a3c426d1111a37022b"
        );
    }
}
