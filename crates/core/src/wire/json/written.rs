//! [`Written`]: a value written once and kept as its bytes, for a value that goes out
//! unchanged many times (a WCPQ codeword's released answer).

use super::{Json, write};

/// A value as the bytes the writer writes for it, and the value those bytes read back as
/// (what [`super::Node`] reads of a [`Json::Written`]). Built from the bytes: `value` is
/// what a reader makes of exactly the bytes that go out.
#[derive(Debug)]
pub struct Written {
    bytes: Box<[u8]>,
    value: Json<'static>,
}

impl Written {
    /// `value` written (as [`write::to_vec`] writes it) and read back from those bytes;
    /// `None` if they do not read back (they always do: the writer writes JSON).
    pub fn new(value: &Json<'_>) -> Option<Written> {
        let bytes = write::to_vec(value).into_boxed_slice();
        let read: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        Some(Written {
            value: Json::from_owned(read),
            bytes,
        })
    }

    /// The bytes written.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The value the bytes read back as.
    pub fn value(&self) -> &Json<'static> {
        &self.value
    }
}

impl PartialEq for Written {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}
