//! HTTP/1.x field values read the same way on both sides of the proxy: by the public
//! listener's plain path (requests) and by the upstream client (answers).

/// Whether a `Connection` value holds the `close` option (a comma-separated list,
/// options compared without case).
pub(crate) fn says_close(value: &[u8]) -> bool {
    says_option(value, b"close")
}

/// Whether a `Connection` value holds the `keep-alive` option (read as `says_close`).
pub(crate) fn says_keep_alive(value: &[u8]) -> bool {
    says_option(value, b"keep-alive")
}

fn says_option(value: &[u8], option: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|said| said.trim_ascii().eq_ignore_ascii_case(option))
}

/// A `Content-Length` value of decimal digits only (no sign, no list, no space);
/// `u64::MAX` when it is more than `u64` holds, which is more than any cap.
pub(crate) fn decimal_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0u64, |n, &digit| {
        n.saturating_mul(10).saturating_add(u64::from(digit - b'0'))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_options_and_lengths() {
        assert!(says_close(b"close"));
        assert!(says_close(b"Keep-Alive, Close"));
        assert!(!says_close(b"closed"));
        assert!(says_keep_alive(b"Keep-Alive"));
        assert!(says_keep_alive(b"close, keep-alive "));
        assert!(!says_keep_alive(b"close"));
        assert!(!says_keep_alive(b"keep-alive2"));
        assert_eq!(decimal_length(b"0"), Some(0));
        assert_eq!(decimal_length(b"00012"), Some(12));
        assert_eq!(decimal_length(b"99999999999999999999999"), Some(u64::MAX));
        for bad in [&b""[..], b"-1", b"+1", b"1,1", b" 1", b"1 "] {
            assert_eq!(decimal_length(bad), None, "{bad:?}");
        }
    }
}
