//! Decoding a request body: a JSON body's gzip or zstd decoded whole within its limit
//! (a zstd frame that declares its size in one shot, any other through the streaming
//! decoder), a multipart body's decoder handed to its parser, and the decoded size a body
//! declares, taken from the budget at once.

use std::io::Read;

use bytes::{Buf, Bytes};

use super::super::budget::Hold;
use super::super::error::Error;
use super::{Encoding, MIN_STEP};

/// Most bytes a decoder is asked for at once.
const READ_STEP: usize = 64 * 1024;

/// What a multipart body's parser holds beyond its parts' bytes: a piece being parsed, the
/// smallest part buffers.
pub(super) const PARSE_MARGIN: usize = 256 * 1024;

/// The decoded size a body declares: its length as sent, a gzip member's `ISIZE` (its last
/// four bytes: the size modulo 2^32), a zstd frame's content size; 0 when it declares none.
/// Only an estimate to take from the budget at once (a body that declared less takes the
/// rest as it is decoded).
pub(super) fn declared_decoded(wire: &[u8], encoding: Encoding) -> usize {
    match encoding {
        Encoding::Identity => wire.len(),
        Encoding::Gzip => wire
            .last_chunk::<4>()
            .map_or(0, |size| u32::from_le_bytes(*size) as usize),
        Encoding::Zstd => zstd::zstd_safe::get_frame_content_size(wire)
            .ok()
            .flatten()
            .map_or(0, |size| usize::try_from(size).unwrap_or(usize::MAX)),
    }
}

/// A reader of the decoded body.
pub(super) fn decoder(wire: Bytes, encoding: Encoding) -> Result<Box<dyn Read + Send>, Error> {
    Ok(match encoding {
        Encoding::Identity => Box::new(wire.reader()),
        Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(wire.reader())),
        Encoding::Zstd => Box::new(
            zstd::stream::read::Decoder::new(wire.reader())
                .map_err(|_| Error::BadBody("the zstd body could not be decoded".into()))?,
        ),
    })
}

/// A JSON body decoded, at most `limit` bytes, and the bytes of the budget it holds.
pub(super) async fn decode_json(
    wire: &[u8],
    encoding: Encoding,
    limit: usize,
    hold: &Hold<'_>,
) -> Result<(Bytes, usize), Error> {
    match encoding {
        Encoding::Identity => Ok((Bytes::copy_from_slice(wire), 0)),
        Encoding::Gzip => {
            decode(flate2::read::MultiGzDecoder::new(wire), limit, "gzip", hold).await
        }
        Encoding::Zstd => decode_zstd(wire, limit, hold).await,
    }
}

/// The zstd magic number, as it starts a (non-skippable) frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The largest window the streaming decoder accepts (zstd's default `windowLogMax`, 27,
/// plus the one byte it allows over it).
const ZSTD_MAX_WINDOW: u64 = (1 << 27) + 1;

thread_local! {
    /// This thread's one-shot zstd context, made at first use and reused.
    static ZSTD_ONE_SHOT: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// A zstd body. One frame that declares its content size (at most `limit`) and a window
/// the streaming decoder accepts, and nothing after it (what the official SDKs send), is
/// decoded in one call by this thread's reused context, into a buffer of that size (taken
/// from the budget first). Any other body, and any failure there, goes to the streaming
/// decoder, whose answer (bytes, or the error) stands: the one-shot path only ever answers
/// what it would.
async fn decode_zstd(wire: &[u8], limit: usize, hold: &Hold<'_>) -> Result<(Bytes, usize), Error> {
    if let Some(size) = one_sized_frame(wire, limit) {
        hold.grow(size).await?;
        if let Some(out) = decode_zstd_one_shot(wire, size) {
            return Ok((Bytes::from(out), size));
        }
        hold.release(size);
    }
    decode_zstd_streaming(wire, limit, hold).await
}

/// The content size of `wire` if it is exactly one zstd frame that declares a content size
/// of at most `limit` and a window of at most [`ZSTD_MAX_WINDOW`].
fn one_sized_frame(wire: &[u8], limit: usize) -> Option<usize> {
    if wire.get(..4)? != ZSTD_MAGIC {
        return None;
    }
    let size = zstd::zstd_safe::get_frame_content_size(wire).ok()??;
    let size = usize::try_from(size).ok().filter(|&size| size <= limit)?;
    if zstd::zstd_safe::find_frame_compressed_size(wire).ok()? != wire.len() {
        return None;
    }
    // The frame header descriptor, then the window descriptor unless the frame is a
    // single segment (whose window is its content size).
    let descriptor = *wire.get(4)?;
    let window = if descriptor & 0x20 != 0 {
        size as u64
    } else {
        let byte = *wire.get(5)?;
        let base = 1u64 << (10 + u32::from(byte >> 3));
        base + (base / 8) * u64::from(byte & 7)
    };
    (window <= ZSTD_MAX_WINDOW).then_some(size)
}

/// Decodes one frame of content size `size` in one call; `None` on any failure.
fn decode_zstd_one_shot(wire: &[u8], size: usize) -> Option<Vec<u8>> {
    ZSTD_ONE_SHOT.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().ok()?);
        }
        let decompressor = slot.as_mut()?;
        let mut out = Vec::with_capacity(size);
        let written = decompressor.decompress_to_buffer(wire, &mut out).ok()?;
        (written == size && out.len() == size).then_some(out)
    })
}

/// A zstd body through the streaming decoder (any number of frames, sized or not).
async fn decode_zstd_streaming(
    wire: &[u8],
    limit: usize,
    hold: &Hold<'_>,
) -> Result<(Bytes, usize), Error> {
    let decoder = zstd::stream::read::Decoder::new(wire)
        .map_err(|_| Error::BadBody("the zstd body could not be decoded".into()))?;
    decode(decoder, limit, "zstd", hold).await
}

/// Decodes at most `limit` bytes (one more to tell an oversize body), the buffer taking
/// each growth from the budget before it grows; the bytes and the budget they hold.
async fn decode(
    mut reader: impl Read,
    limit: usize,
    name: &str,
    hold: &Hold<'_>,
) -> Result<(Bytes, usize), Error> {
    let cap = limit.saturating_add(1);
    let mut out: Vec<u8> = Vec::new();
    let mut held = 0usize;
    loop {
        let len = out.len();
        if len >= cap {
            break;
        }
        if len + MIN_STEP.min(cap - len) > held {
            let step = (len + MIN_STEP).max(held.saturating_mul(2)).min(cap);
            hold.grow(step - held).await?;
            out.reserve_exact(step - len);
            held = step;
        }
        // Zeroed before each read: at most one step, so a reader of small reads costs no more.
        let room = (held.min(cap) - len).min(READ_STEP);
        out.resize(len + room, 0);
        let read = loop {
            match reader.read(&mut out[len..]) {
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        match read {
            Ok(0) => {
                out.truncate(len);
                break;
            }
            Ok(n) => out.truncate(len + n),
            Err(_) => {
                return Err(Error::BadBody(format!(
                    "the {name} body could not be decoded"
                )));
            }
        }
    }
    if out.len() > limit {
        return Err(Error::TooLarge(limit));
    }
    Ok((Bytes::from(out), held))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::budget::Budget;
    use proptest::prelude::*;

    /// An outcome as a caller sees it: the bytes, or the error's text (the one-shot path
    /// first, or the streaming decoder alone); the budget holds at least the bytes.
    fn seen(wire: &[u8], limit: usize, one_shot: bool) -> Result<Vec<u8>, String> {
        let budget = Budget::unbounded();
        let hold = budget.hold();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let result = runtime.block_on(async {
            if one_shot {
                decode_zstd(wire, limit, &hold).await
            } else {
                decode_zstd_streaming(wire, limit, &hold).await
            }
        });
        if let Ok((bytes, held)) = &result {
            assert!(*held >= bytes.len() && hold.bytes() >= *held);
        }
        result
            .map(|(bytes, _)| bytes.to_vec())
            .map_err(|error| format!("{error:?}"))
    }

    fn zstd(wire: &[u8], limit: usize) -> Result<Vec<u8>, String> {
        seen(wire, limit, true)
    }

    fn streaming(wire: &[u8], limit: usize) -> Result<Vec<u8>, String> {
        seen(wire, limit, false)
    }

    fn same_as_streaming(wire: &[u8], limit: usize) {
        assert_eq!(
            zstd(wire, limit),
            streaming(wire, limit),
            "{} bytes, limit {limit}",
            wire.len()
        );
    }

    /// Bodies of every kind the one-shot path must answer exactly as the streaming
    /// decoder does: one sized frame (taken), and everything it must leave alone.
    fn bodies(data: &[u8], level: i32) -> Vec<Vec<u8>> {
        // One-shot compression (as the SDKs do): one frame with its content size.
        let one = zstd::bulk::compress(data, level).unwrap();
        let streamed = zstd::encode_all(data, level).unwrap();
        let mut checked = zstd::stream::Encoder::new(Vec::new(), level).unwrap();
        checked.include_checksum(true).unwrap();
        checked
            .set_pledged_src_size(Some(data.len() as u64))
            .unwrap();
        std::io::Write::write_all(&mut checked, data).unwrap();
        let checked = checked.finish().unwrap();
        // Streamed without a pledged size: no content size in the header.
        let mut unsized_frame = zstd::stream::Encoder::new(Vec::new(), level).unwrap();
        std::io::Write::write_all(&mut unsized_frame, data).unwrap();
        let unsized_frame = unsized_frame.finish().unwrap();
        let mut bodies = vec![one.clone(), streamed, checked.clone(), unsized_frame];
        bodies.push([one.clone(), one.clone()].concat());
        bodies.push([one.as_slice(), b"trailing"].concat());
        bodies.push(one[..one.len() - 1].to_vec());
        let skippable = [&[0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3][..], &one].concat();
        bodies.push(skippable);
        // A flipped byte in the payload and in the checksum.
        let mut flipped = one.clone();
        let at = flipped.len() / 2 + 3;
        if let Some(byte) = flipped.get_mut(at) {
            *byte ^= 0x5a;
        }
        bodies.push(flipped);
        let mut wrong_sum = checked;
        if let Some(byte) = wrong_sum.last_mut() {
            *byte ^= 1;
        }
        bodies.push(wrong_sum);
        bodies
    }

    /// `data`'s one-shot frame rewritten with a window descriptor (`window_byte`) in place
    /// of the single-segment flag: the same content size field and blocks.
    fn with_window(data: &[u8], window_byte: u8) -> Vec<u8> {
        let mut frame = zstd::bulk::compress(data, 3).unwrap();
        assert_eq!(frame[4] & 0x20, 0x20, "a single-segment frame");
        assert_eq!(frame[4] >> 6, 1, "a two-byte content size");
        frame[4] &= !0x20;
        frame.insert(5, window_byte);
        frame
    }

    #[test]
    fn a_declared_window_is_taken_only_as_far_as_streaming_takes_it() {
        let data: Vec<u8> = (0..600u32).flat_map(|i| (i % 7).to_le_bytes()).collect();
        // A 1 MiB window: a frame streaming decodes, so the one-shot path takes it.
        let fits = with_window(&data, 10 << 3);
        assert_eq!(one_sized_frame(&fits, 1 << 20), Some(data.len()));
        assert_eq!(streaming(&fits, 1 << 20), Ok(data.clone()));
        same_as_streaming(&fits, 1 << 20);
        // A 256 MiB window: the one-shot path leaves the frame to the streaming decoder,
        // which refuses it unless its first buffer holds the whole content (libzstd then
        // decodes into that buffer and allocates no window).
        let beyond = with_window(&data, 18 << 3);
        assert_eq!(one_sized_frame(&beyond, 1 << 20), None);
        same_as_streaming(&beyond, 1 << 20);
        let long: Vec<u8> = (0..40_000u32).flat_map(|i| (i % 7).to_le_bytes()).collect();
        let mut frame = zstd::bulk::compress(&long, 3).unwrap();
        assert_eq!(frame[4] & 0x20, 0x20, "a single-segment frame");
        frame[4] &= !0x20;
        frame.insert(5, 18 << 3);
        assert_eq!(one_sized_frame(&frame, 1 << 20), None);
        assert!(streaming(&frame, 1 << 20).is_err());
        same_as_streaming(&frame, 1 << 20);
    }

    #[test]
    fn what_the_sdk_sends_is_taken_by_the_one_shot_path() {
        let data = br#"{"model":"jev-latest","state":{"note":"parcel late"},"questions":{}}"#;
        // The SDK's one-shot compression: a single-segment frame with its content size.
        let wire = zstd::bulk::compress(&data[..], 3).unwrap();
        assert_eq!(one_sized_frame(&wire, 4096), Some(data.len()));
        assert_eq!(one_sized_frame(&wire, data.len() - 1), None);
        assert_eq!(zstd(&wire, 4096), Ok(data.to_vec()));
        same_as_streaming(&wire, 4096);
        same_as_streaming(&wire, data.len() - 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn the_one_shot_path_answers_as_the_streaming_decoder(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            text in "[a-z \\{\\}\":,0-9]{0,2000}",
            level in 1i32..8,
            limit in 0usize..4000,
        ) {
            for body in bodies(&data, level).into_iter().chain(bodies(text.as_bytes(), level)) {
                same_as_streaming(&body, limit);
                same_as_streaming(&body, 1 << 20);
            }
        }

        #[test]
        fn arbitrary_bytes_are_answered_as_the_streaming_decoder_does(
            tail in proptest::collection::vec(any::<u8>(), 0..200),
            limit in 0usize..500,
        ) {
            same_as_streaming(&tail, limit);
            same_as_streaming(&[&ZSTD_MAGIC[..], &tail].concat(), limit);
        }
    }
}
