//! RFC 3339 times in UTC with a fixed number of fractional digits ([`Rfc3339`]).

/// A time in RFC 3339, UTC, with a fixed number of fractional digits: the workspace's one
/// such formatter. Microseconds as tracing's formatter writes them
/// (`2026-12-02T12:38:52.910029Z`, the access lines); milliseconds for the decision log,
/// captures and certificates (`2026-12-02T12:38:52.910Z`). A time before the epoch is
/// written as the epoch.
#[derive(Debug, Clone, Copy)]
pub struct Rfc3339 {
    time: std::time::SystemTime,
    /// Fractional digits: 3 or 6.
    digits: usize,
}

impl Rfc3339 {
    /// With milliseconds.
    pub fn millis(time: std::time::SystemTime) -> Rfc3339 {
        Rfc3339 { time, digits: 3 }
    }

    /// With microseconds.
    pub(crate) fn micros(time: std::time::SystemTime) -> Rfc3339 {
        Rfc3339 { time, digits: 6 }
    }

    /// Year, month, day, hour, minute, second and the fraction, in UTC.
    fn fields(&self) -> [u64; 7] {
        let since = self
            .time
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let seconds = since.as_secs();
        let (year, month, day) = civil_from_days(seconds / 86_400);
        let of_day = seconds % 86_400;
        let fraction = if self.digits == 3 {
            since.subsec_millis()
        } else {
            since.subsec_micros()
        };
        [
            year,
            month,
            day,
            of_day / 3600,
            of_day / 60 % 60,
            of_day % 60,
            u64::from(fraction),
        ]
    }

    /// Appends the time, laid out as `Display` lays it out, without `fmt`'s machinery
    /// for the years it can (0 to 9999). The date and time of day up to the second are
    /// laid out once a second per thread (the access lines of one second share them).
    pub(super) fn push_to(&self, out: &mut String) {
        thread_local! {
            /// The second last laid out, and its `YYYY-MM-DDTHH:MM:SS.`.
            static SECOND: std::cell::Cell<(u64, [u8; 20])> =
                const { std::cell::Cell::new((u64::MAX, [0; 20])) };
        }
        let since = self
            .time
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let (second, prefix) = SECOND.get();
        if second == since.as_secs() {
            let mut fraction = if self.digits == 3 {
                since.subsec_millis()
            } else {
                since.subsec_micros()
            };
            let mut text = [b'0'; 7];
            for slot in text[..self.digits].iter_mut().rev() {
                *slot = b'0' + (fraction % 10) as u8;
                fraction /= 10;
            }
            text[self.digits] = b'Z';
            // ASCII digits and separators only.
            out.push_str(std::str::from_utf8(&prefix).unwrap_or_default());
            out.push_str(std::str::from_utf8(&text[..=self.digits]).unwrap_or_default());
            return;
        }
        let fields = self.fields();
        if fields[0] > 9999 {
            use std::fmt::Write as _;
            let _ = write!(out, "{self}");
            return;
        }
        // "YYYY-MM-DDTHH:MM:SS.uuuuuuZ": each field's offset and width.
        let layout: [(usize, usize); 7] = [
            (0, 4),
            (5, 2),
            (8, 2),
            (11, 2),
            (14, 2),
            (17, 2),
            (20, self.digits),
        ];
        let mut text = *b"0000-00-00T00:00:00.000000Z";
        for ((at, width), mut value) in layout.into_iter().zip(fields) {
            for slot in text[at..at + width].iter_mut().rev() {
                *slot = b'0' + (value % 10) as u8;
                value /= 10;
            }
        }
        let end = 20 + self.digits;
        text[end] = b'Z';
        let mut prefix = [0u8; 20];
        prefix.copy_from_slice(&text[..20]);
        SECOND.set((since.as_secs(), prefix));
        // ASCII digits and separators only.
        out.push_str(std::str::from_utf8(&text[..=end]).unwrap_or_default());
    }
}

impl std::fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [year, month, day, hour, minute, second, fraction] = self.fields();
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{fraction:0width$}Z",
            width = self.digits
        )
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn timestamps_are_rfc3339_in_utc_with_microseconds_or_milliseconds() {
        let at = |seconds: u64, micros: u64| {
            Rfc3339::micros(
                std::time::UNIX_EPOCH + Duration::from_micros(seconds * 1_000_000 + micros),
            )
            .to_string()
        };
        // The direct layout of the access lines agrees with `Display` wherever it is used.
        let pushed = |time: Rfc3339| {
            let mut out = String::new();
            time.push_to(&mut out);
            out
        };
        for micros in [
            0u64,
            7,
            951_782_400_000_007,
            1_796_215_132_910_029,
            4_107_542_399_999_999,
            253_402_300_799_999_999, // 9999-12-31T23:59:59.999999Z
            253_402_300_800_000_000, // year 10000: through `fmt`
        ] {
            let time = std::time::UNIX_EPOCH + Duration::from_micros(micros);
            for time in [Rfc3339::micros(time), Rfc3339::millis(time)] {
                assert_eq!(pushed(time), time.to_string());
            }
        }
        // The second laid out once: later times of the same second, and a second again
        // after another.
        for micros in [5_000_000u64, 5_999_999, 5_000_001, 6_000_000, 5_000_002] {
            let time = Rfc3339::micros(std::time::UNIX_EPOCH + Duration::from_micros(micros));
            assert_eq!(pushed(time), time.to_string());
        }
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 7), "2000-02-29T00:00:00.000007Z");
        assert_eq!(at(1_796_215_132, 910_029), "2026-12-02T12:38:52.910029Z");
        assert_eq!(at(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
        // Every day for 200 years agrees with the HTTP date of the same second.
        for day in 0..73_000u64 {
            let time = std::time::UNIX_EPOCH + Duration::from_secs(day * 86_400 + 3_661);
            let http = httpdate::fmt_http_date(time);
            let ours = Rfc3339::micros(time).to_string();
            let (year, month, date) = (&ours[0..4], &ours[5..7], &ours[8..10]);
            const MONTHS: [&str; 12] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ];
            let month = MONTHS[month.parse::<usize>().unwrap() - 1];
            assert_eq!(&http[5..16], format!("{date} {month} {year}"), "{ours}");
            assert_eq!(&ours[10..], "T01:01:01.000000Z");
        }
        // Milliseconds: the decision log's, captures' and certificates' form.
        let millis = |millis: u64| {
            Rfc3339::millis(std::time::UNIX_EPOCH + Duration::from_millis(millis)).to_string()
        };
        assert_eq!(millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(millis(1_445_412_480_123), "2015-10-21T07:28:00.123Z");
        assert_eq!(millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(millis(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
        assert_eq!(millis(1_767_225_599_000), "2025-12-31T23:59:59.000Z");
        assert_eq!(
            Rfc3339::millis(std::time::UNIX_EPOCH + Duration::from_micros(7_999)).to_string(),
            "1970-01-01T00:00:00.007Z"
        );
        // Before the epoch: the epoch.
        let before = std::time::UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(
            Rfc3339::millis(before).to_string(),
            "1970-01-01T00:00:00.000Z"
        );
    }
}
