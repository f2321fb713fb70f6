//! Rendering a variant: decode the original, resize, encode.
//!
//! Defence against decompression bombs comes first: the byte size is checked, then the
//! header alone is read and the pixel count refused over budget before any pixel buffer is
//! allocated, and the decoder also gets `image::Limits` as a second line. The output size is
//! computed from the header too and refused over budget before the resize.
//!
//! Choices the gateway should know about:
//!
//! * Output format: the `format` action, else the original's (JPEG, PNG or WebP). Other
//!   originals (GIF, BMP, ...) are [`RenderError::UnsupportedFormat`].
//! * WebP output is **lossless** (the `image` crate only encodes lossless WebP), so it can be
//!   larger than the JPEG it replaces. Quality is ignored for PNG and WebP, as OSS does for PNG.
//! * JPEG quality: `Q_` is used as is. OSS defines `q_` relative to the original's quality,
//!   which is not recoverable from the file, so `q_` is applied as an absolute quality too.
//!   Without a `quality` action the quality is [`DEFAULT_JPEG_QUALITY`].
//! * Transparency is flattened onto white for JPEG output, and onto the pad colour for `pad`.
//! * The EXIF orientation of the original is applied (OSS's `auto-orient,1`), because the
//!   output carries no metadata at all: neither EXIF (which also drops GPS positions) nor
//!   colour profiles. 16-bit originals are reduced to 8 bits per channel.
//! * Every output is re-encoded, even when nothing changes size (`limit_1`), which is also
//!   what strips the metadata.
//!
//! Memory: the decoded original (at most `max_input_pixels` × 4 bytes after 8-bit reduction),
//! the output, and the resampler's `f32` RGBA intermediate of one pass (16 bytes per pixel,
//! at most max(input, output) pixels thanks to choosing the cheaper pass order). With the
//! defaults one render can peak around 1.2 GB: the gateway must bound concurrent renders and
//! run them on blocking threads.

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;
use image::codecs::webp::WebPEncoder;
use image::imageops::FilterType;
use image::metadata::Orientation;
use image::{DynamicImage, GenericImageView, ImageDecoder, ImageFormat, ImageReader, RgbImage};

use crate::process::{ImageProcess, OutputFormat, Quality};

mod geometry;

use geometry::Plan;

/// JPEG quality when the request has no `quality` action.
pub const DEFAULT_JPEG_QUALITY: u8 = 85;

/// Triangle (bilinear, widened when shrinking so every source pixel counts) is the speed and
/// quality middle ground; Lanczos3 is about three times slower for little visible gain at
/// thumbnail sizes.
const FILTER: FilterType = FilterType::Triangle;

/// Budgets for one render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest original accepted, in bytes. Default 20 MiB (OSS's default).
    pub max_input_bytes: usize,
    /// Largest original accepted, in pixels, checked from the header before decoding.
    /// Default 50 000 000: OSS allows 250 M, but decoding that takes 1 GB per copy and more
    /// to resample; 50 M still covers 8K×6K photos.
    pub max_input_pixels: u64,
    /// Longest output side. Default 16 384 (OSS's limit, also the largest lossless WebP).
    pub max_output_side: u32,
    /// Largest output, in pixels. Default 50 000 000: a `pad` or `fixed` of 16 384 × 16 384
    /// would otherwise allocate a 268 M-pixel canvas for a one-pixel original.
    pub max_output_pixels: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_input_bytes: 20 * 1024 * 1024,
            max_input_pixels: 50_000_000,
            max_output_side: 16_384,
            max_output_pixels: 50_000_000,
        }
    }
}

/// A rendered variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub bytes: Vec<u8>,
    /// `image/jpeg`, `image/png` or `image/webp`.
    pub content_type: &'static str,
    pub width: u32,
    pub height: u32,
}

/// Why a variant could not be rendered. Suggested HTTP statuses: `UnsupportedFormat` 415;
/// `InputTooLarge`, `TooLarge`, `Decode` 422 (the stored original is the problem);
/// `OutputTooLarge` 400 (the request is); `Encode` 500.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("the original is {bytes} bytes, more than the limit of {limit}")]
    InputTooLarge { bytes: usize, limit: usize },
    #[error("the original is not a JPEG, PNG or WebP image")]
    UnsupportedFormat,
    #[error("the original has {pixels} pixels, more than the limit of {limit}")]
    TooLarge { pixels: u64, limit: u64 },
    #[error("the variant would be {width}x{height} pixels, more than the limits allow")]
    OutputTooLarge { width: u64, height: u64 },
    #[error("the original could not be decoded: {0}")]
    Decode(String),
    #[error("the variant could not be encoded: {0}")]
    Encode(String),
}

/// Renders the variant `ops` of the image `original`.
pub fn render(original: &[u8], ops: &ImageProcess, limits: &Limits) -> Result<Rendered, RenderError> {
    if original.len() > limits.max_input_bytes {
        return Err(RenderError::InputTooLarge { bytes: original.len(), limit: limits.max_input_bytes });
    }
    let (image, source_format) = decode(original, limits)?;

    let src = image.dimensions();
    let plan = ops.resize().map_or(Plan::Keep, |r| geometry::plan(src, r));
    let (out_w, out_h) = plan.output_size(src);
    let side = u64::from(limits.max_output_side);
    if out_w > side || out_h > side || out_w.saturating_mul(out_h) > limits.max_output_pixels {
        return Err(RenderError::OutputTooLarge { width: out_w, height: out_h });
    }
    let image = apply(image, plan);

    let format = ops.format().unwrap_or(source_format);
    let quality = match ops.quality() {
        Some(Quality::Absolute(q) | Quality::Relative(q)) => q.get(),
        None => DEFAULT_JPEG_QUALITY,
    };
    let (width, height) = image.dimensions();
    let bytes = encode(image, format, quality)?;
    Ok(Rendered { bytes, content_type: format.content_type(), width, height })
}

/// Decodes within the budgets: header first, pixels only when the header fits.
fn decode(original: &[u8], limits: &Limits) -> Result<(DynamicImage, OutputFormat), RenderError> {
    let decode_error = |e: image::ImageError| RenderError::Decode(e.to_string());
    let mut reader = ImageReader::new(Cursor::new(original))
        .with_guessed_format()
        .map_err(|e| RenderError::Decode(e.to_string()))?;
    let format = match reader.format() {
        Some(ImageFormat::Jpeg) => OutputFormat::Jpeg,
        Some(ImageFormat::Png) => OutputFormat::Png,
        Some(ImageFormat::WebP) => OutputFormat::WebP,
        _ => return Err(RenderError::UnsupportedFormat),
    };

    // Up to 8 bytes a pixel (16-bit RGBA) for the decoded buffer, plus room for the decoder's
    // own state (zlib window, metadata chunks).
    let mut decoder_limits = image::Limits::default();
    decoder_limits.max_alloc =
        Some(limits.max_input_pixels.saturating_mul(8).saturating_add(16 * 1024 * 1024));
    reader.limits(decoder_limits.clone());
    // Reads the header only.
    let mut decoder = reader.into_decoder().map_err(decode_error)?;
    let (width, height) = decoder.dimensions();
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limits.max_input_pixels {
        return Err(RenderError::TooLarge { pixels, limit: limits.max_input_pixels });
    }
    if width == 0 || height == 0 {
        return Err(RenderError::Decode("the image has no pixels".into()));
    }
    // The second line: the decoder itself refuses anything larger than what we just saw.
    decoder_limits.max_image_width = Some(width);
    decoder_limits.max_image_height = Some(height);
    // `DynamicImage::from_decoder` allocates the whole buffer without consulting `max_alloc`;
    // reserve it here as `ImageReader::decode` would.
    decoder_limits.reserve(decoder.total_bytes()).map_err(decode_error)?;
    decoder.set_limits(decoder_limits).map_err(decode_error)?;
    // A broken EXIF block is not worth failing the render: show the image as stored.
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let mut image = to_8bit(DynamicImage::from_decoder(decoder).map_err(decode_error)?);
    image.apply_orientation(orientation);
    Ok((image, format))
}

/// 8 bits per channel, keeping grey and alpha: every encoder takes these, and they halve the
/// memory of 16-bit originals.
fn to_8bit(image: DynamicImage) -> DynamicImage {
    match image {
        DynamicImage::ImageLuma8(_)
        | DynamicImage::ImageLumaA8(_)
        | DynamicImage::ImageRgb8(_)
        | DynamicImage::ImageRgba8(_) => image,
        other => {
            let color = other.color();
            match (color.has_color(), color.has_alpha()) {
                (true, true) => other.to_rgba8().into(),
                (true, false) => other.to_rgb8().into(),
                (false, true) => other.to_luma_alpha8().into(),
                (false, false) => other.to_luma8().into(),
            }
        }
    }
}

fn apply(image: DynamicImage, plan: Plan) -> DynamicImage {
    // The plan was checked against the output budget, so every size fits in u32.
    let px = |n: u64| u32::try_from(n).expect("sizes are checked against the output budget");
    match plan {
        Plan::Keep => image,
        Plan::Scale { w, h } => resample(image, px(w), px(h)),
        Plan::Fill { crop, w, h } => {
            let cropped = if (crop.w, crop.h) == (u64::from(image.width()), u64::from(image.height())) {
                image
            } else {
                image.crop_imm(px(crop.x), px(crop.y), px(crop.w), px(crop.h))
            };
            resample(cropped, px(w), px(h))
        }
        Plan::Pad { inner_w, inner_h, w, h, color } => {
            let inner = flatten(resample(image, px(inner_w), px(inner_h)), color);
            let mut canvas = RgbImage::from_pixel(px(w), px(h), image::Rgb(color));
            let x = (w - inner_w) / 2;
            let y = (h - inner_h) / 2;
            image::imageops::replace(&mut canvas, &inner, x as i64, y as i64);
            canvas.into()
        }
    }
}

/// Resizes to exactly `w`×`h`.
///
/// `image`'s resize runs a vertical pass first into an `f32` RGBA buffer of (source width) ×
/// (new height), 16 bytes a pixel. For a wide source made tall (a 50 000-px-wide strip to
/// 1×16 384) that would be terabytes, and a failed allocation aborts the process. Rotating
/// the image makes the horizontal pass go first when that needs less; the smaller of the two
/// intermediates is at most √(input × output) pixels, within the budgets.
fn resample(image: DynamicImage, w: u32, h: u32) -> DynamicImage {
    let (sw, sh) = image.dimensions();
    if (sw, sh) == (w, h) {
        return image;
    }
    if horizontal_pass_first((sw, sh), (w, h)) {
        image.rotate90().resize_exact(h, w, FILTER).rotate270()
    } else {
        image.resize_exact(w, h, FILTER)
    }
}

/// Whether resizing `src` to `dst` needs a smaller intermediate when the horizontal pass goes
/// first: (source height × new width) rather than (source width × new height).
fn horizontal_pass_first(src: (u32, u32), dst: (u32, u32)) -> bool {
    let vertical_first = u64::from(src.0) * u64::from(dst.1);
    let horizontal_first = u64::from(src.1) * u64::from(dst.0);
    horizontal_first < vertical_first
}

/// Composes an image with alpha onto an opaque `background`; images without alpha pass.
fn flatten(image: DynamicImage, background: [u8; 3]) -> RgbImage {
    if !image.color().has_alpha() {
        return image.into_rgb8();
    }
    let rgba = image.into_rgba8();
    let mut out = RgbImage::new(rgba.width(), rgba.height());
    for (dst, src) in out.pixels_mut().zip(rgba.pixels()) {
        let alpha = u32::from(src[3]);
        for c in 0..3 {
            let blended = (u32::from(src[c]) * alpha + u32::from(background[c]) * (255 - alpha) + 127) / 255;
            dst[c] = blended as u8;
        }
    }
    out
}

fn encode(image: DynamicImage, format: OutputFormat, quality: u8) -> Result<Vec<u8>, RenderError> {
    let mut out = Vec::new();
    let result = match format {
        OutputFormat::Jpeg => {
            let image = match image {
                DynamicImage::ImageLuma8(_) | DynamicImage::ImageRgb8(_) => image,
                other => DynamicImage::ImageRgb8(flatten(other, [255; 3])),
            };
            image.write_with_encoder(JpegEncoder::new_with_quality(&mut out, quality))
        }
        OutputFormat::Png => image.write_with_encoder(PngEncoder::new(&mut out)),
        OutputFormat::WebP => image.write_with_encoder(WebPEncoder::new_lossless(&mut out)),
    };
    result.map_err(|e| RenderError::Encode(e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests;
