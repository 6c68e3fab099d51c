//! The retry hints of a provider's 429 and 529, as the proxy re-writes them.

use std::time::{Duration, SystemTime};

use axum::http::HeaderValue;

use super::MAX_RETRY_AFTER_SECONDS;

/// The `retry-after` a client receives: the provider's hint re-written by the proxy, never
/// its bytes. Delay-seconds (digits only) and HTTP dates (IMF-fixdate, RFC 850, asctime)
/// become whole seconds from `now` (a past date is 0), capped at `MAX_RETRY_AFTER_SECONDS`;
/// anything else is dropped.
fn retry_after(value: Option<&HeaderValue>, now: SystemTime) -> Option<HeaderValue> {
    let text = value?.to_str().ok()?.trim();
    let seconds = match digits(text) {
        Some(seconds) => seconds,
        None => {
            let date = httpdate::parse_http_date(text).ok()?;
            let ahead = date.duration_since(now).unwrap_or(Duration::ZERO);
            // Round up: retrying a fraction of a second early would be refused again.
            ahead.as_secs() + u64::from(ahead.subsec_nanos() > 0)
        }
    };
    Some(HeaderValue::from(seconds.min(MAX_RETRY_AFTER_SECONDS)))
}

/// The `retry-after-ms` a client receives: whole milliseconds (digits only), capped at
/// `MAX_RETRY_AFTER_SECONDS` in milliseconds and re-written; anything else is dropped.
fn retry_after_ms(value: Option<&HeaderValue>) -> Option<HeaderValue> {
    let millis = digits(value?.to_str().ok()?.trim())?;
    Some(HeaderValue::from(
        millis.min(MAX_RETRY_AFTER_SECONDS.saturating_mul(1000)),
    ))
}

/// Both retry hints whenever either is valid: the SDKs read `retry-after-ms` first and others
/// only `retry-after`, so one is derived from the other (seconds rounded up from
/// milliseconds); both re-written, never the provider's bytes.
pub(super) fn retry_hints(
    headers: &axum::http::HeaderMap,
    now: SystemTime,
) -> (Option<HeaderValue>, Option<HeaderValue>) {
    let number =
        |value: Option<HeaderValue>| value.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let seconds = number(retry_after(headers.get("retry-after"), now));
    let millis = number(retry_after_ms(headers.get("retry-after-ms")));
    let (seconds, millis) = match (seconds, millis) {
        (Some(s), Some(m)) => (Some(s), Some(m)),
        (Some(s), None) => (Some(s), Some(s.saturating_mul(1000))),
        (None, Some(m)) => (Some(m.div_ceil(1000)), Some(m)),
        (None, None) => (None, None),
    };
    (
        seconds.map(HeaderValue::from),
        millis.map(HeaderValue::from),
    )
}

/// A non-negative integer written with ASCII digits only; saturates instead of overflowing.
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.bytes().fold(0u64, |n, b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(text: &str, now: SystemTime) -> Option<String> {
        let value = HeaderValue::from_str(text).unwrap();
        retry_after(Some(&value), now).map(|v| v.to_str().unwrap().to_string())
    }

    fn millis(text: &str) -> Option<String> {
        let value = HeaderValue::from_str(text).unwrap();
        retry_after_ms(Some(&value)).map(|v| v.to_str().unwrap().to_string())
    }

    #[test]
    fn retry_after_is_a_capped_integer_written_by_the_proxy() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00
        assert_eq!(seconds("120", now).as_deref(), Some("120"));
        assert_eq!(seconds("0", now).as_deref(), Some("0"));
        assert_eq!(seconds("007", now).as_deref(), Some("7"));
        assert_eq!(seconds(" 30 ", now).as_deref(), Some("30"));
        assert_eq!(seconds("86401", now).as_deref(), Some("86400"));
        assert_eq!(
            seconds("99999999999999999999999999", now).as_deref(),
            Some("86400")
        );
        for bad in [
            "",
            "-1",
            "1.5",
            "+5",
            "1e3",
            "12 34",
            "0x10",
            "<script>",
            "7; a=b",
            "NaN",
            "Wed, 21 Oct 2015 07:28:00 GMT junk",
            "Wed, 32 Oct 2015 07:28:00 GMT",
            "tomorrow",
        ] {
            assert_eq!(seconds(bad, now), None, "{bad:?}");
        }
        assert!(retry_after(None, now).is_none());
    }

    #[test]
    fn retry_after_dates_become_seconds_from_now() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00
        assert_eq!(
            seconds("Wed, 21 Oct 2015 07:30:00 GMT", now).as_deref(),
            Some("120")
        );
        // RFC 850 and asctime forms are HTTP dates too.
        assert_eq!(
            seconds("Wednesday, 21-Oct-15 07:29:00 GMT", now).as_deref(),
            Some("60")
        );
        assert_eq!(
            seconds("Wed Oct 21 07:28:05 2015", now).as_deref(),
            Some("5")
        );
        // In the past: retry now. Years ahead: capped.
        assert_eq!(
            seconds("Tue, 20 Oct 2015 07:28:00 GMT", now).as_deref(),
            Some("0")
        );
        assert_eq!(
            seconds("Fri, 01 Jan 2100 00:00:00 GMT", now).as_deref(),
            Some("86400")
        );
        let later = now + Duration::from_millis(500);
        assert_eq!(
            seconds("Wed, 21 Oct 2015 07:30:00 GMT", later).as_deref(),
            Some("120")
        );
    }

    #[test]
    fn retry_after_ms_is_a_capped_integer() {
        assert_eq!(millis("1500").as_deref(), Some("1500"));
        assert_eq!(millis("0").as_deref(), Some("0"));
        assert_eq!(millis("86400001").as_deref(), Some("86400000"));
        for bad in ["1500.5", "-3", "1e3", "Wed, 21 Oct 2015 07:28:00 GMT", "x"] {
            assert_eq!(millis(bad), None, "{bad:?}");
        }
    }
}
