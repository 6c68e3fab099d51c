//! The number half of the reader: a number read as serde_json reads it, its common short
//! forms inline where it is ([`Reader::number`]), the rest out of line
//! ([`Reader::number_rest`]).

use super::super::Number;
use super::Reader;

impl Reader<'_> {
    /// A number, read as serde_json reads it: an integer without fraction or exponent
    /// is `Unsigned` if it fits `u64`, `Signed` if negative and it fits `i64` (not
    /// `-0`), and everything else a correctly rounded `f64`.
    ///
    /// One pass: the digits are gathered into one integer as they are passed (the first
    /// 19 of them, which always fit `u64`), so that the common short decimal and
    /// integer need no second look at their bytes. Those are read inline where the
    /// number is; the rest (an exponent, many digits, `-0`) by [`Reader::number_rest`].
    #[inline(always)]
    pub(super) fn number(&mut self) -> Option<Number> {
        let bytes = self.bytes;
        let start = self.at;
        let mut at = start;
        let negative = bytes.get(at) == Some(&b'-');
        if negative {
            at += 1;
        }
        let mut significand = 0u64;
        let mut digits = 0usize;
        match bytes.get(at)? {
            b'0' => {
                at += 1;
                digits = 1;
            }
            b'1'..=b'9' => gather(bytes, &mut at, &mut significand, &mut digits),
            _ => return None,
        }
        let whole = digits;
        let integer_end = at;
        let mut integral = true;
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            if !matches!(bytes.get(at), Some(b'0'..=b'9')) {
                return None;
            }
            gather(bytes, &mut at, &mut significand, &mut digits);
            integral = false;
        }
        let exponent = matches!(bytes.get(at), Some(b'e' | b'E'));
        if !exponent {
            if !integral && digits <= SHORT_DIGITS {
                // `digits` decimal digits make an integer below 2⁵³ and ten to the power
                // of the places is exact: one correctly rounded division gives the double
                // nearest the decimal, as `str::parse` reads it (the classic fast path).
                self.at = at;
                let x = significand as f64 / POWERS[digits - whole];
                return Some(Number::Float(if negative { -x } else { x }));
            }
            if integral && digits < GATHERED {
                self.at = at;
                if !negative {
                    return Some(Number::Unsigned(significand));
                }
                if significand >= 1 {
                    // Below 10¹⁹ - 1 < 2⁶³: always an `i64`.
                    return Some(Number::Signed((significand as i64).wrapping_neg()));
                }
            }
        }
        let read = Read {
            start,
            at,
            negative,
            integral: integral && !exponent,
            digits,
            integer_end,
        };
        self.number_rest(read, exponent)
    }

    /// A number of the form `0.` and one to fourteen digits (not followed by an
    /// exponent): its value, exactly as [`Reader::number`] reads it (the same one
    /// division), the reader then past it; `None`, the reader unmoved, for any other form.
    /// Most probabilities and confidences are written so.
    #[inline(always)]
    pub(super) fn short_fraction(&mut self) -> Option<f64> {
        let bytes = self.bytes;
        let digits_at = self.at + 2;
        if bytes.get(self.at..digits_at)? != b"0." {
            return None;
        }
        let mut at = digits_at;
        let mut significand = 0u64;
        while let Some(&d @ b'0'..=b'9') = bytes.get(at) {
            significand = significand * 10 + u64::from(d - b'0');
            at += 1;
            if at - digits_at == SHORT_DIGITS {
                return None;
            }
        }
        let places = at - digits_at;
        if places == 0 || matches!(bytes.get(at), Some(b'e' | b'E')) {
            return None;
        }
        self.at = at;
        Some(significand as f64 / POWERS[places])
    }

    /// [`Reader::number`] past its short forms: `read` is what it read of the number (up
    /// to an exponent's `e`, if `exponent`).
    #[cold]
    #[inline(never)]
    fn number_rest(&mut self, read: Read, exponent: bool) -> Option<Number> {
        let Read {
            start,
            mut at,
            negative,
            integral,
            digits,
            integer_end,
        } = read;
        let bytes = self.bytes;
        if exponent {
            at = exponent_end(bytes, at + 1)?;
        }
        self.at = at;
        if integral
            && digits >= GATHERED
            && let Some(number) =
                wide_integer(&bytes[start + usize::from(negative)..integer_end], negative)
        {
            return Some(number);
        }
        let token = self.text.get(start..at)?;
        let value: f64 = token.parse().ok()?;
        value.is_finite().then_some(Number::Float(value))
    }
}

/// What [`Reader::number`] read of a number it leaves to [`Reader::number_rest`].
struct Read {
    /// Where the number starts (its sign, if any).
    start: usize,
    /// Where reading stopped (the end, or an exponent's `e`).
    at: usize,
    negative: bool,
    /// No fraction and no exponent.
    integral: bool,
    /// The digits before and after the point.
    digits: usize,
    /// Where the integer part ends.
    integer_end: usize,
}

/// Most digits of a decimal read by one division (their integer is below 2⁵³).
const SHORT_DIGITS: usize = 15;

/// Digits gathered into the significand as they are passed: any `GATHERED - 1` decimal
/// digits fit `u64` (an integer of `GATHERED` digits or more is gathered again, checked).
const GATHERED: usize = 19;

/// Ten to the powers up to [`SHORT_DIGITS`], each exact.
const POWERS: [f64; SHORT_DIGITS + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Where an exponent whose `e` is just before `at` ends (`None`: it has no digits).
fn exponent_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    if let Some(b'+' | b'-') = bytes.get(at) {
        at += 1;
    }
    if !matches!(bytes.get(at), Some(b'0'..=b'9')) {
        return None;
    }
    while let Some(b'0'..=b'9') = bytes.get(at) {
        at += 1;
    }
    Some(at)
}

/// An integer of [`GATHERED`] digits or more (`digits`, ASCII), gathered again with
/// overflow checked: `Unsigned` if it fits `u64`, `Signed` if negative and it fits `i64`,
/// `None` (a float) otherwise.
fn wide_integer(digits: &[u8], negative: bool) -> Option<Number> {
    let mut wide = 0u64;
    for &d in digits {
        wide = wide.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if !negative {
        return Some(Number::Unsigned(wide));
    }
    (1..=1u64 << 63)
        .contains(&wide)
        .then(|| Number::Signed((wide as i64).wrapping_neg()))
}

/// Passes the digits at `*at`, adding them to `significand` while fewer than
/// [`GATHERED`] have been (`digits` counts them all).
#[inline]
fn gather(bytes: &[u8], at: &mut usize, significand: &mut u64, digits: &mut usize) {
    while let Some(&d @ b'0'..=b'9') = bytes.get(*at) {
        if *digits < GATHERED {
            *significand = *significand * 10 + u64::from(d - b'0');
        }
        *digits += 1;
        *at += 1;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::Reader;

    /// A number's value and where the reader stopped after it.
    type Reading = Option<(f64, usize)>;

    /// What [`Reader::number`] and [`Reader::short_fraction`] read of `text`, and where
    /// each left the reader (`short_fraction`: `None` and unmoved, or its reading).
    fn both(text: &str) -> (Reading, Reading) {
        let mut full = Reader::new(text, None, false);
        let number = full.number().map(|n| (n.as_f64(), full.at));
        let mut short = Reader::new(text, None, false);
        let fraction = short.short_fraction();
        if fraction.is_none() {
            assert_eq!(short.at, 0, "{text}: moved without a reading");
        }
        (number, fraction.map(|value| (value, short.at)))
    }

    #[test]
    fn a_short_fraction_reads_as_any_number() {
        for text in ["0.5", "0.25,", "0.00}", "0.12345678901234", "0.1 ", "0.05]"] {
            let (number, fraction) = both(text);
            assert!(fraction.is_some(), "{text}");
            assert_eq!(
                number.map(|(v, at)| (v.to_bits(), at)),
                fraction.map(|(v, at)| (v.to_bits(), at))
            );
        }
        for text in [
            "0.123456789012345",
            "0.5e1",
            "0.5E-1",
            "0.",
            "0",
            "1.0",
            "-0.5",
            "00.5",
            ".5",
            "0,5",
        ] {
            assert_eq!(both(text).1, None, "{text}");
        }
    }

    proptest! {
        #[test]
        fn a_short_fraction_is_the_number_it_spells(
            digits in "[0-9]{1,16}",
            tail in "(|,|}|e1|E-2|\\.5| |[0-9])",
        ) {
            let text = format!("0.{digits}{tail}");
            let (number, fraction) = both(&text);
            if let Some((value, at)) = fraction {
                let (full, full_at) = number.expect("a number");
                prop_assert_eq!(value.to_bits(), full.to_bits());
                prop_assert_eq!(at, full_at);
            }
        }
    }
}
