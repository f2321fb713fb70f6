//! Encoders. JPEG: `jpeg-encoder` (baseline or progressive, SIMD); WebP: libwebp through the
//! `webp` crate (lossy, and lossless for `Q_100`), because `image` only writes lossless WebP;
//! PNG: `png`'s streaming writer; GIF and BMP: `image`'s own.
//!
//! Memory: [`work_bytes`] is what an encoder holds besides the image it encodes, the output
//! included, for [`super::memory_estimate`]. The output buffer is allocated once at its bound
//! where the format has one (PNG, BMP, JPEG up to 4 bytes a pixel): a `Vec` that doubles as
//! it grows holds up to three times its final size for a moment. PNG is streamed row by row
//! into IDAT chunks: `image`'s own PNG encoder compresses the whole image into a buffer of its
//! own first, then copies it out, and held four times the pixels of a large image.

use image::codecs::bmp::BmpEncoder;
use image::codecs::gif::GifEncoder;
use image::DynamicImage;

use super::pixels::flatten;
use super::RenderError;
use crate::process::OutputFormat;

/// The longest side libwebp encodes.
const MAX_WEBP_SIDE: u32 = 16383;

/// The quality to encode at, 1..=100, and whether it was asked as `Q_` (absolute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quality {
    value: u8,
    absolute: bool,
}

impl Quality {
    pub(crate) fn of(value: u8, absolute: bool) -> Self {
        Self { value: value.clamp(1, 100), absolute }
    }

    /// `Q_100` WebP is lossless: the one way OSS's grammar can ask for it.
    fn lossless_webp(self) -> bool {
        self.absolute && self.value == 100
    }
}

fn encode_error(e: impl std::fmt::Display) -> RenderError {
    RenderError::Encode(e.to_string())
}

/// Bytes libwebp holds per pixel while it encodes, the output included, lossy and lossless
/// (measured on noise, the worst case: 23 lossy, 44 lossy with alpha, about 100 lossless).
const WEBP_LOSSY_BYTES_PER_PIXEL: u64 = 64;
const WEBP_LOSSLESS_BYTES_PER_PIXEL: u64 = 128;

/// The most a PNG of `raw` filtered bytes (rows with their filter byte) can take: zlib's
/// stored blocks (5 bytes per 64 KiB and the stream's 6), IDAT chunks (12 bytes per
/// [`PNG_CHUNK`]) and the header chunks.
fn png_bound(raw: u64) -> u64 {
    raw + raw / 8192 + 1024
}

/// IDAT chunk size of PNG outputs.
const PNG_CHUNK: usize = 256 * 1024;

/// What encoding a `w`×`h` image to `format` holds besides the image itself, the output
/// included, in bytes.
pub(crate) fn work_bytes(
    format: OutputFormat,
    (w, h): (u64, u64),
    interlace: bool,
    lossless_webp: bool,
) -> u64 {
    let px = w * h;
    64 * 1024
        + match format {
            // An RGB copy when the image has alpha or another layout, the output, and the
            // coefficients of every block for a progressive scan (2 bytes a sample).
            OutputFormat::Jpeg => px * 3 + px * 4 + if interlace { px * 6 } else { 0 },
            // The output at its bound (4 bytes a pixel and a filter byte a row), and the
            // writer's rows and chunk buffer.
            OutputFormat::Png => png_bound(px * 4 + h) + 4 * w * 4 + PNG_CHUNK as u64,
            // An RGBA copy (4 bytes a pixel) and libwebp's own buffers.
            OutputFormat::WebP if lossless_webp => px * 4 + px * WEBP_LOSSLESS_BYTES_PER_PIXEL,
            OutputFormat::WebP => px * 4 + px * WEBP_LOSSY_BYTES_PER_PIXEL,
            // An RGBA copy, the quantiser's copy and indices, and the LZW output that grows
            // (at most 1.5 bytes a pixel, twice that while it doubles).
            OutputFormat::Gif => px * 4 + px * 4 + px + px * 3,
            // An RGB(A) copy and the output, allocated at its size.
            OutputFormat::Bmp => px * 4 + px * 4 + h * 4,
        }
}

pub(crate) fn encode(
    image: DynamicImage,
    format: OutputFormat,
    quality: Quality,
    interlace: bool,
) -> Result<Vec<u8>, RenderError> {
    let px = u64::from(image.width()) * u64::from(image.height());
    let mut out = Vec::new();
    match format {
        OutputFormat::Jpeg => {
            out.reserve_exact(usize::try_from(px * 4 + 64 * 1024).map_err(encode_error)?);
            let (w, h) = (image.width(), image.height());
            let (w16, h16) =
                (u16::try_from(w).map_err(encode_error)?, u16::try_from(h).map_err(encode_error)?);
            let mut encoder = jpeg_encoder::Encoder::new(&mut out, quality.value);
            encoder.set_progressive(interlace);
            match image {
                DynamicImage::ImageLuma8(buf) => {
                    encoder.encode(buf.as_raw(), w16, h16, jpeg_encoder::ColorType::Luma)
                }
                DynamicImage::ImageRgb8(buf) => {
                    encoder.encode(buf.as_raw(), w16, h16, jpeg_encoder::ColorType::Rgb)
                }
                other => {
                    let rgb = flatten(other, [255; 3]);
                    encoder.encode(rgb.as_raw(), w16, h16, jpeg_encoder::ColorType::Rgb)
                }
            }
            .map_err(encode_error)?;
        }
        OutputFormat::WebP => {
            let (w, h) = (image.width(), image.height());
            // libwebp's limit (WEBP_MAX_DIMENSION), one pixel below the other formats'.
            if w > MAX_WEBP_SIDE || h > MAX_WEBP_SIDE {
                return Err(RenderError::BadParameter {
                    param: "format",
                    message: "WebP images are at most 16383 px a side",
                });
            }
            let lossless = quality.lossless_webp();
            let q = f32::from(quality.value);
            // `encode_simple`, not `encode`: the latter unwraps libwebp's errors.
            let memory = if image.color().has_alpha() {
                let rgba = image.into_rgba8();
                webp::Encoder::from_rgba(rgba.as_raw(), w, h).encode_simple(lossless, q)
            } else {
                let rgb = image.into_rgb8();
                webp::Encoder::from_rgb(rgb.as_raw(), w, h).encode_simple(lossless, q)
            }
            .map_err(|e| RenderError::Encode(format!("libwebp: {e:?}")))?;
            if memory.is_empty() {
                return Err(RenderError::Encode("libwebp refused the image".into()));
            }
            out.extend_from_slice(&memory);
        }
        OutputFormat::Png => {
            out = png(&image)?;
        }
        OutputFormat::Gif => {
            let rgba = image.into_rgba8();
            let frame = image::Frame::new(rgba);
            let mut encoder = GifEncoder::new(&mut out);
            encoder.encode_frame(frame).map_err(encode_error)?;
            drop(encoder);
        }
        OutputFormat::Bmp => {
            let image = match image {
                DynamicImage::ImageRgb8(_) | DynamicImage::ImageRgba8(_) => image,
                other if other.color().has_alpha() => other.into_rgba8().into(),
                other => other.into_rgb8().into(),
            };
            out.reserve_exact(
                usize::try_from(px * 4 + u64::from(image.height()) * 4 + 1024).map_err(encode_error)?,
            );
            image.write_with_encoder(BmpEncoder::new(&mut out)).map_err(encode_error)?;
        }
    }
    Ok(out)
}

/// A PNG of an 8-bit image, streamed row by row into an output allocated at its bound.
fn png(image: &DynamicImage) -> Result<Vec<u8>, RenderError> {
    let (color, bytes): (png::ColorType, &[u8]) = match image {
        DynamicImage::ImageLuma8(b) => (png::ColorType::Grayscale, b.as_raw()),
        DynamicImage::ImageLumaA8(b) => (png::ColorType::GrayscaleAlpha, b.as_raw()),
        DynamicImage::ImageRgb8(b) => (png::ColorType::Rgb, b.as_raw()),
        DynamicImage::ImageRgba8(b) => (png::ColorType::Rgba, b.as_raw()),
        // Every action keeps 8 bits a channel; anything else is converted first.
        other => return png(&DynamicImage::ImageRgba8(other.to_rgba8())),
    };
    let (w, h) = (image.width(), image.height());
    let raw = bytes.len() as u64 + u64::from(h);
    let mut out = Vec::with_capacity(usize::try_from(png_bound(raw)).map_err(encode_error)?);
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(color);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Balanced);
    encoder.set_filter(png::Filter::Adaptive);
    let mut writer = encoder.write_header().map_err(encode_error)?;
    let mut stream = writer.stream_writer_with_size(PNG_CHUNK).map_err(encode_error)?;
    std::io::Write::write_all(&mut stream, bytes).map_err(encode_error)?;
    stream.finish().map_err(encode_error)?;
    writer.finish().map_err(encode_error)?;
    Ok(out)
}
