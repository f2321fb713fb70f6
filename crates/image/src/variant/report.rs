//! The JSON answers (`info`, `average-hue`) and the JPEG quality estimate behind `q_`.

use image::DynamicImage;
use serde_json::{json, Map, Value};

use crate::process::OutputFormat;

/// EXIF fields `info` reports (OSS reports these among others). GPS fields are left out on
/// purpose: the variants strip them, and `info` would otherwise publish where a user's photo
/// was taken to anyone who can read the image.
const EXIF_FIELDS: [exif::Tag; 13] = [
    exif::Tag::Make,
    exif::Tag::Model,
    exif::Tag::Orientation,
    exif::Tag::DateTime,
    exif::Tag::DateTimeOriginal,
    exif::Tag::ExposureTime,
    exif::Tag::FNumber,
    exif::Tag::PhotographicSensitivity,
    exif::Tag::FocalLength,
    exif::Tag::Software,
    exif::Tag::XResolution,
    exif::Tag::YResolution,
    exif::Tag::ResolutionUnit,
];

fn value(v: &impl ToString) -> Value {
    json!({ "value": v.to_string() })
}

/// OSS's `info` document: `{"FileSize": {"value": "21839"}, "Format": {"value": "jpg"},
/// "FrameCount": {"value": "1"}, "ImageHeight": ..., "ImageWidth": ..., <EXIF fields>}`.
pub(crate) fn info(
    file_size: usize,
    format: OutputFormat,
    (w, h): (u64, u64),
    frames: u32,
    exif: Option<&[u8]>,
) -> Vec<u8> {
    let mut doc = Map::new();
    doc.insert("FileSize".into(), value(&file_size));
    doc.insert("Format".into(), value(&format.as_str()));
    doc.insert("FrameCount".into(), value(&frames));
    doc.insert("ImageHeight".into(), value(&h));
    doc.insert("ImageWidth".into(), value(&w));
    if let Some(raw) = exif {
        if let Ok(parsed) = exif::Reader::new().read_raw(raw.to_vec()) {
            for tag in EXIF_FIELDS {
                if let Some(field) = parsed.get_field(tag, exif::In::PRIMARY) {
                    doc.insert(tag.to_string(), value(&field_text(&field.value)));
                }
            }
        }
    }
    serde_json::to_vec(&Value::Object(doc)).expect("JSON of strings")
}

/// The number of frames: of an animated GIF (image descriptors) or animated WebP (`ANMF`
/// chunks), counted by walking the blocks without decoding a pixel; 1 for everything else, and
/// for a file cut short the frames seen so far (at least 1).
pub(crate) fn frame_count(bytes: &[u8], format: OutputFormat) -> u32 {
    let frames = match format {
        OutputFormat::Gif => gif_frames(bytes),
        OutputFormat::WebP => webp_frames(bytes),
        _ => 1,
    };
    frames.max(1)
}

/// Image descriptors of a GIF: header, logical screen (and its colour table), then blocks.
fn gif_frames(bytes: &[u8]) -> u32 {
    // Skips data sub-blocks (a length byte, that many bytes, until a zero length).
    fn sub_blocks(bytes: &[u8], mut at: usize) -> Option<usize> {
        loop {
            let len = usize::from(*bytes.get(at)?);
            at += 1 + len;
            if len == 0 {
                return Some(at);
            }
        }
    }
    let table = |flags: u8| if flags & 0x80 != 0 { 3 << ((flags & 0x07) + 1) } else { 0 };
    let Some(&screen_flags) = bytes.get(10) else { return 0 };
    let mut at = 13 + table(screen_flags);
    let mut frames = 0;
    while let Some(&block) = bytes.get(at) {
        match block {
            // Extension: label, then sub-blocks.
            0x21 => match sub_blocks(bytes, at + 2) {
                Some(next) => at = next,
                None => break,
            },
            // Image descriptor (10 bytes), local colour table, LZW minimum code size, data.
            0x2C => {
                let Some(&flags) = bytes.get(at + 9) else { break };
                frames += 1;
                match sub_blocks(bytes, at + 10 + table(flags) + 1) {
                    Some(next) => at = next,
                    None => break,
                }
            }
            // Trailer, or anything that is not a block.
            _ => break,
        }
    }
    frames
}

/// `ANMF` chunks of a RIFF WebP; a still WebP has none.
fn webp_frames(bytes: &[u8]) -> u32 {
    let mut at = 12;
    let mut frames = 0;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]) as usize;
        if &bytes[at..at + 4] == b"ANMF" {
            frames += 1;
        }
        // Chunks are padded to an even length.
        at = at.saturating_add(8).saturating_add(len).saturating_add(len & 1);
    }
    frames
}

/// OSS's spelling of EXIF values: numbers as numbers, rationals as `n/d`, text trimmed.
fn field_text(v: &exif::Value) -> String {
    match v {
        exif::Value::Ascii(parts) => parts
            .iter()
            .map(|p| String::from_utf8_lossy(p).trim_end_matches('\0').trim().to_owned())
            .collect::<Vec<_>>()
            .join(" "),
        exif::Value::Rational(r) if !r.is_empty() => format!("{}/{}", r[0].num, r[0].denom),
        exif::Value::SRational(r) if !r.is_empty() => format!("{}/{}", r[0].num, r[0].denom),
        other => match other.get_uint(0) {
            Some(n) => n.to_string(),
            None => other.display_as(exif::Tag::Make).to_string(),
        },
    }
}

/// `{"RGB": "0xRRGGBB"}`: the mean colour, each pixel weighted by its opacity.
pub(crate) fn average_hue(image: &DynamicImage) -> Vec<u8> {
    let rgba = image.to_rgba8();
    let (mut sum, mut weight) = ([0u128; 3], 0u128);
    for p in rgba.pixels() {
        let a = u128::from(p[3]);
        for c in 0..3 {
            sum[c] += u128::from(p[c]) * a;
        }
        weight += a;
    }
    let mean = |c: usize| (sum[c] + weight / 2).checked_div(weight).unwrap_or(0) as u8;
    let text = format!("0x{:02x}{:02x}{:02x}", mean(0), mean(1), mean(2));
    serde_json::to_vec(&json!({ "RGB": text })).expect("JSON of a string")
}

/// The IJG luminance table (JPEG Annex K), which libjpeg and most encoders scale by quality.
const STD_LUMINANCE: [u32; 64] = [
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56, 14, 17,
    22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92, 49, 64, 78,
    87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99,
];

/// The quality (1..=100) a JPEG was saved at, estimated from its first (luminance)
/// quantisation table by inverting the IJG scaling; `None` when the file has no table.
pub fn estimate_jpeg_quality(jpeg: &[u8]) -> Option<u8> {
    if jpeg.get(..2) != Some(&[0xff, 0xd8]) {
        return None;
    }
    let mut at = 2;
    // Markers before the first scan; each segment is FF xx, then a big-endian length.
    while at + 4 <= jpeg.len() {
        if jpeg[at] != 0xff {
            return None;
        }
        let marker = jpeg[at + 1];
        if marker == 0xff {
            at += 1;
            continue;
        }
        let len = usize::from(u16::from_be_bytes([jpeg[at + 2], jpeg[at + 3]]));
        let body = jpeg.get(at + 4..at + 2 + len)?;
        match marker {
            0xdb => return table_quality(body),
            0xda | 0xd9 => return None,
            _ => at += 2 + len,
        }
    }
    None
}

fn table_quality(dqt: &[u8]) -> Option<u8> {
    let (&pq_tq, rest) = dqt.split_first()?;
    let wide = pq_tq >> 4 == 1;
    let values: Vec<u32> = if wide {
        rest.chunks_exact(2).take(64).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).collect()
    } else {
        rest.iter().take(64).map(|&v| u32::from(v)).collect()
    };
    if values.len() < 64 {
        return None;
    }
    let scale = f64::from(values.iter().sum::<u32>()) * 100.0 / f64::from(STD_LUMINANCE.iter().sum::<u32>());
    let quality = if scale <= 100.0 { (200.0 - scale) / 2.0 } else { 5000.0 / scale };
    Some(quality.round().clamp(1.0, 100.0) as u8)
}
