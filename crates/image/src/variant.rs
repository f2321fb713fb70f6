//! Rendering a variant: decode the original, run the chain, encode.
//!
//! Defence against decompression bombs comes first: the byte size is checked, then the
//! header alone is read and the pixel count refused over budget before any pixel buffer is
//! allocated, and the decoder also gets `image::Limits` as a second line. The size after
//! every action is computed from the header too ([`plan`]) and refused over budget before
//! any pixel work, and a deadline ([`Limits::max_render_time`]) is checked between actions
//! and once a row inside the slow ones.
//!
//! Choices the gateway should know about:
//!
//! * Output format: the `format` action, else the original's (JPEG, PNG, WebP, GIF or BMP;
//!   a GIF's first frame). Other originals are [`RenderError::UnsupportedFormat`].
//! * JPEG and WebP take `quality` (default [`DEFAULT_QUALITY`]); `Q_100` WebP is lossless,
//!   every other WebP lossy. `q_` is relative to a JPEG original's quality (estimated from its
//!   quantisation tables, as ImageMagick's `identify` does), absolute otherwise.
//! * Transparency is flattened onto white for JPEG output, and onto the pad colour for `pad`.
//! * The EXIF orientation is applied only with `auto-orient,1` (OSS's default keeps the
//!   stored pixel order). The output carries no metadata at all: neither EXIF (which also
//!   drops GPS positions) nor colour profiles; `info` reports the EXIF basics as JSON.
//!   16-bit originals are reduced to 8 bits per channel.
//! * Every output is re-encoded, even when nothing changes size (`limit_1`), which is also
//!   what strips the metadata.
//!
//! Memory: [`memory_estimate`] bounds what one render holds from the header alone (input
//! bytes, decoded pixels and the decoder's own buffers, the largest step's buffers, the
//! encoder's buffers and output), so the gateway can reserve it from a budget shared by all
//! renders before it reads the original. `info` decodes no pixels at all.

use std::collections::HashMap;
use std::io::Cursor;
use std::time::{Duration, Instant};

use image::metadata::Orientation;
use image::{DynamicImage, GenericImageView, ImageDecoder, ImageFormat, ImageReader};

use crate::process::{Action, ImageProcess, OutputFormat, Quality, Report, Resize, ResizeMode, Target};

mod encode;
mod geometry;
mod mark;
mod pixels;
mod report;

#[cfg(test)]
use pixels::{horizontal_pass_first, resample, FILTER};

pub use report::estimate_jpeg_quality;

/// JPEG and WebP quality when the request has no `quality` action.
pub const DEFAULT_QUALITY: u8 = 85;

/// Budgets for one render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest original accepted, in bytes. Default 20 MiB (OSS's default).
    pub max_input_bytes: usize,
    /// Largest original accepted, in pixels, checked from the header before decoding.
    /// Default 50 000 000: OSS allows 250 M, but decoding that takes 1 GB per copy and more
    /// to resample; 50 M still covers 8K×6K photos.
    pub max_input_pixels: u64,
    /// Longest side of the image after any action. Default 16 384 (OSS's limit).
    pub max_output_side: u32,
    /// Largest image after any action, in pixels. Default 50 000 000: a `pad` or `fixed` of
    /// 16 384 × 16 384 would otherwise allocate a 268 M-pixel canvas for a one-pixel original.
    pub max_output_pixels: u64,
    /// Longest a render may take; checked between actions and once a row in slow loops.
    pub max_render_time: Duration,
    /// Largest watermark image, in bytes and in pixels.
    pub max_watermark_bytes: usize,
    pub max_watermark_pixels: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_input_bytes: 20 * 1024 * 1024,
            max_input_pixels: 50_000_000,
            max_output_side: 16_384,
            max_output_pixels: 50_000_000,
            max_render_time: Duration::from_secs(20),
            max_watermark_bytes: 4 * 1024 * 1024,
            max_watermark_pixels: 4_000_000,
        }
    }
}

/// A rendered variant, or the JSON answer of `info` / `average-hue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub bytes: Vec<u8>,
    /// `image/jpeg`, `image/png`, `image/webp`, `image/gif`, `image/bmp` or `application/json`.
    pub content_type: &'static str,
    /// The image's size (for a report: the size the chain before it produced).
    pub width: u32,
    pub height: u32,
}

/// Why a variant could not be rendered. Suggested HTTP statuses: `UnsupportedFormat` 415;
/// `InputTooLarge`, `TooLarge`, `Decode` 422 (the stored original is the problem);
/// `OutputTooLarge`, `BadParameter`, `WatermarkMissing` 400 (the request is); `TimedOut` 503;
/// `Encode` 500.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("the original is {bytes} bytes, more than the limit of {limit}")]
    InputTooLarge { bytes: usize, limit: usize },
    #[error("the original is not a JPEG, PNG, WebP, GIF or BMP image")]
    UnsupportedFormat,
    #[error("the original has {pixels} pixels, more than the limit of {limit}")]
    TooLarge { pixels: u64, limit: u64 },
    #[error("the variant would be {width}x{height} pixels, more than the limits allow")]
    OutputTooLarge { width: u64, height: u64 },
    #[error("invalid x-oss-process parameter {param}: {message}")]
    BadParameter { param: &'static str, message: &'static str },
    #[error("the watermark image {0:?} does not exist or is not an image within the limits")]
    WatermarkMissing(String),
    #[error("the render took longer than its time budget")]
    TimedOut,
    #[error("the original could not be decoded: {0}")]
    Decode(String),
    #[error("the variant could not be encoded: {0}")]
    Encode(String),
}

/// The render's deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline(Instant);

impl Deadline {
    pub(crate) fn check(&self) -> Result<(), RenderError> {
        if Instant::now() > self.0 {
            Err(RenderError::TimedOut)
        } else {
            Ok(())
        }
    }
}

/// What the header of an original says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub format: OutputFormat,
    pub width: u32,
    pub height: u32,
    /// Bytes per pixel of the decoded buffer (8 for 16-bit RGBA).
    pub bytes_per_pixel: u8,
    /// A progressive JPEG: its decoder holds every coefficient until the last scan.
    pub progressive: bool,
}

/// Watermark images by object name, as the gateway read them for one render.
pub type WatermarkImages = HashMap<String, Vec<u8>>;

fn image_format(format: Option<ImageFormat>) -> Result<OutputFormat, RenderError> {
    match format {
        Some(ImageFormat::Jpeg) => Ok(OutputFormat::Jpeg),
        Some(ImageFormat::Png) => Ok(OutputFormat::Png),
        Some(ImageFormat::WebP) => Ok(OutputFormat::WebP),
        Some(ImageFormat::Gif) => Ok(OutputFormat::Gif),
        Some(ImageFormat::Bmp) => Ok(OutputFormat::Bmp),
        _ => Err(RenderError::UnsupportedFormat),
    }
}

/// Reads the header of `bytes` (which may be only the start of the file).
pub fn probe(bytes: &[u8]) -> Result<Header, RenderError> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| RenderError::Decode(e.to_string()))?;
    let format = image_format(reader.format())?;
    let decoder = reader.into_decoder().map_err(|e| RenderError::Decode(e.to_string()))?;
    let (width, height) = decoder.dimensions();
    Ok(Header {
        format,
        width,
        height,
        bytes_per_pixel: decoder.color_type().bytes_per_pixel(),
        progressive: format == OutputFormat::Jpeg && jpeg_is_progressive(bytes),
    })
}

/// Whether the frame header of a JPEG is a progressive one (SOF2, SOF6, SOF10, SOF14), walking
/// the marker segments from the start of the file.
fn jpeg_is_progressive(bytes: &[u8]) -> bool {
    let mut at = 2;
    while at + 4 <= bytes.len() {
        if bytes[at] != 0xFF {
            return false;
        }
        let marker = bytes[at + 1];
        match marker {
            // Fill bytes before a marker.
            0xFF => {
                at += 1;
                continue;
            }
            0xC2 | 0xC6 | 0xCA | 0xCE => return true,
            0xC0 | 0xC1 | 0xC3 | 0xC5 | 0xC7 | 0xC9 | 0xCB | 0xCD | 0xCF | 0xDA | 0xD9 => return false,
            _ => {}
        }
        let len = usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
        at += 2 + len;
    }
    false
}

/// The chain's sizes from a source size: the size after each action (the last is the output),
/// each checked against the budgets. `main` is the main image's size, for `P_` of a watermark
/// image's own chain.
pub(crate) fn plan(
    actions: &[Action],
    src: (u64, u64),
    main: Option<(u64, u64)>,
    limits: &Limits,
) -> Result<Vec<(u64, u64)>, RenderError> {
    let mut size = src;
    let mut sizes = Vec::with_capacity(actions.len());
    for action in actions {
        size = match action {
            Action::Resize(r) => {
                let r = resolve_main_percent(r, main);
                let s = (size.0.min(u64::from(u32::MAX)) as u32, size.1.min(u64::from(u32::MAX)) as u32);
                geometry::plan(s, &r).output_size(s)
            }
            Action::Crop(c) => {
                let (_, _, w, h) = pixels::crop_rect(size, c)?;
                (w, h)
            }
            Action::IndexCrop(c) => pixels::index_rect(size, c).map_or(size, |(_, _, w, h)| (w, h)),
            Action::Circle(r) => {
                let side = 2 * pixels::circle_radius(size, *r) + 1;
                (side, side)
            }
            Action::Rotate(d) if d % 90 == 0 => {
                if d % 180 == 0 {
                    size
                } else {
                    (size.1, size.0)
                }
            }
            Action::Rotate(d) => {
                if size.0 > 4096 || size.1 > 4096 {
                    return Err(RenderError::BadParameter {
                        param: "rotate",
                        message: "rotates images of at most 4096 px a side (OSS's limit)",
                    });
                }
                pixels::rotated_size(size, *d)
            }
            Action::RoundedCorners(_)
            | Action::Blur { .. }
            | Action::Bright(_)
            | Action::Contrast(_)
            | Action::Sharpen(_)
            | Action::Watermark(_) => size,
        };
        let side = u64::from(limits.max_output_side);
        if size.0 > side || size.1 > side || size.0.saturating_mul(size.1) > limits.max_output_pixels {
            return Err(RenderError::OutputTooLarge { width: size.0, height: size.1 });
        }
        sizes.push(size);
    }
    Ok(sizes)
}

/// `P_` of a watermark image: fit into that percentage of the main image, enlarging if needed.
fn resolve_main_percent(r: &Resize, main: Option<(u64, u64)>) -> Resize {
    match (r.target, main) {
        (Target::MainPercent(p), Some((mw, mh))) => {
            let side = |v: u64| {
                let v = ((v * u64::from(p) + 50) / 100).clamp(1, 16384);
                crate::process::Side::new(v as u32).expect("clamped")
            };
            Resize { mode: ResizeMode::Lfit, target: Target::WidthHeight(side(mw), side(mh)), enlarge: true }
        }
        _ => *r,
    }
}

/// Bytes one render of `ops` holds at its peak, from the original's header: its bytes, the
/// decoded pixels (and their 8-bit copy) and the decoder's buffers, the largest step's input,
/// output and work buffers, watermark images at their budget, and the encoder's buffers with
/// the encoded output. Refuses, as [`render_with`] would, what is over the pixel budgets.
///
/// Measured against the heap of real renders (`tests/memory.rs` of this crate), every
/// estimate is above the peak; the gateway's budget relies on it.
pub fn memory_estimate(
    ops: &ImageProcess,
    header: &Header,
    input_len: u64,
    limits: &Limits,
) -> Result<u64, RenderError> {
    let (w, h) = (u64::from(header.width), u64::from(header.height));
    let pixels = w * h;
    if pixels > limits.max_input_pixels {
        return Err(RenderError::TooLarge { pixels, limit: limits.max_input_pixels });
    }
    // `image`'s JPEG decoder reads the whole file into a buffer of its own first.
    let copy = if header.format == OutputFormat::Jpeg { input_len } else { 0 };
    if ops.report() == Some(Report::Info) {
        // Header and EXIF only (see `render_with`), but the sizes are still planned.
        plan(ops.actions(), (w, h), None, limits)?;
        return Ok(input_len + copy + DECODER_STATE);
    }
    let decoded = pixels * u64::from(header.bytes_per_pixel.max(1));
    let eight_bit = if header.bytes_per_pixel > 4 { pixels * 4 } else { 0 };
    // The decoders' own buffers besides the pixels (measured): zune-jpeg's component planes,
    // and every coefficient of a progressive JPEG (2 bytes a sample); the GIF decoder's frame
    // and canvas; image-webp's YUV planes. PNG decodes row by row.
    let decoder = DECODER_STATE
        + copy
        + pixels
            * match header.format {
                OutputFormat::Jpeg if header.progressive => 8,
                OutputFormat::Jpeg => 3,
                OutputFormat::Gif | OutputFormat::WebP => 4,
                OutputFormat::Png | OutputFormat::Bmp => 0,
            };
    // Orientation may swap the sides; plan both ways and take the larger.
    let mut peak = 0u64;
    let mut out = (0, 0);
    let orders: &[(u64, u64)] = if ops.auto_orient() { &[(w, h), (h, w)] } else { &[(w, h)] };
    for &src in orders {
        let sizes = plan(ops.actions(), src, None, limits)?;
        let mut before = src;
        for (action, &after) in ops.actions().iter().zip(&sizes) {
            let (i, o) = (before.0 * before.1, after.0 * after.1);
            let work = match action {
                Action::Resize(_) => 16 * (before.0 * after.1).min(before.1 * after.0) + i * 4 + o * 4,
                Action::Blur { .. } | Action::Sharpen(_) => 3 * i * 4,
                Action::Rotate(_) | Action::Circle(_) | Action::RoundedCorners(_) => i * 4 + o * 4,
                Action::Watermark(m) => {
                    let image = if m.image.is_some() { limits.max_watermark_pixels * 16 } else { 0 };
                    let text = m.text.as_ref().map_or(0, |t| {
                        let size = u64::from(t.size);
                        (t.text.chars().count() as u64 * size * size * 2).min(limits.max_output_pixels) * 8
                    });
                    i * 4 + image + text
                }
                _ => i * 4 + o * 4,
            };
            peak = peak.max(i * 4 + work);
            before = after;
        }
        if before.0 * before.1 > out.0 * out.1 {
            out = before;
        }
    }
    let encoded = match ops.report() {
        // An RGBA copy of the result.
        Some(_) => out.0 * out.1 * 4,
        None => {
            let format = ops.format().unwrap_or(header.format);
            let lossless_webp = matches!(ops.quality(), Some(Quality::Absolute(q)) if q.get() == 100);
            encode::work_bytes(format, out, ops.output().interlace, lossless_webp)
        }
    };
    Ok(input_len + decoded + eight_bit + decoder + peak + encoded)
}

/// What a decoder holds besides the pixels whatever the size: the zlib window, buffered rows
/// and chunks, metadata blocks.
const DECODER_STATE: u64 = 1 << 20;

/// Renders the variant `ops` of the image `original` (no watermark images).
pub fn render(original: &[u8], ops: &ImageProcess, limits: &Limits) -> Result<Rendered, RenderError> {
    render_with(original, ops, limits, &WatermarkImages::new())
}

/// Renders the variant `ops` of the image `original`, with the watermark images it names.
pub fn render_with(
    original: &[u8],
    ops: &ImageProcess,
    limits: &Limits,
    watermarks: &WatermarkImages,
) -> Result<Rendered, RenderError> {
    let deadline = Deadline(Instant::now() + limits.max_render_time);
    if original.len() > limits.max_input_bytes {
        return Err(RenderError::InputTooLarge { bytes: original.len(), limit: limits.max_input_bytes });
    }
    if ops.report() == Some(Report::Info) {
        // Sizes come from the header and the plan: no pixel is decoded to report them.
        let opened = open(original, limits, ops.auto_orient())?;
        let src = opened.oriented_size();
        let sizes = plan(ops.actions(), src, None, limits)?;
        let (w, h) = sizes.last().copied().unwrap_or(src);
        let frames = report::frame_count(original, opened.format);
        let json = report::info(original.len(), opened.format, (w, h), frames, opened.exif.as_deref());
        return Ok(Rendered {
            bytes: json,
            content_type: "application/json",
            width: w as u32,
            height: h as u32,
        });
    }
    let decoded = decode(original, limits, ops.auto_orient())?;
    let src = decoded.image.dimensions();
    plan(ops.actions(), (src.0.into(), src.1.into()), None, limits)?;
    let image = run(decoded.image, ops.actions(), limits, watermarks, &deadline)?;
    let (width, height) = image.dimensions();
    if ops.report() == Some(Report::AverageHue) {
        let json = report::average_hue(&image);
        return Ok(Rendered { bytes: json, content_type: "application/json", width, height });
    }
    let format = ops.format().unwrap_or(decoded.format);
    let relative_to =
        (decoded.format == OutputFormat::Jpeg).then(|| estimate_jpeg_quality(original)).flatten();
    let quality = match ops.quality() {
        Some(Quality::Absolute(q)) => encode::Quality::of(q.get(), true),
        Some(Quality::Relative(q)) => match relative_to {
            Some(source) => {
                encode::Quality::of(((u32::from(q.get()) * u32::from(source) + 50) / 100).max(1) as u8, false)
            }
            None => encode::Quality::of(q.get(), false),
        },
        None => encode::Quality::of(DEFAULT_QUALITY, false),
    };
    deadline.check()?;
    let bytes = encode::encode(image, format, quality, ops.output().interlace)?;
    Ok(Rendered { bytes, content_type: format.content_type(), width, height })
}

/// Runs pixel actions in order. Sizes were planned and checked already.
pub(crate) fn run(
    mut image: DynamicImage,
    actions: &[Action],
    limits: &Limits,
    watermarks: &WatermarkImages,
    deadline: &Deadline,
) -> Result<DynamicImage, RenderError> {
    for action in actions {
        deadline.check()?;
        let (w, h) = image.dimensions();
        let size = (u64::from(w), u64::from(h));
        image = match action {
            Action::Resize(r) => {
                let plan = geometry::plan((w, h), r);
                pixels::apply_resize(image, plan)
            }
            Action::Crop(c) => pixels::crop(image, pixels::crop_rect(size, c)?),
            Action::IndexCrop(c) => match pixels::index_rect(size, c) {
                Some(rect) => pixels::crop(image, rect),
                None => image,
            },
            Action::Circle(r) => pixels::circle(&image, *r),
            Action::RoundedCorners(r) => pixels::rounded_corners(image, *r),
            Action::Rotate(d) => pixels::rotate(image, *d, deadline)?,
            Action::Blur { radius, sigma } => pixels::blur(image, *radius, *sigma, deadline)?,
            Action::Bright(v) => pixels::brightness_contrast(image, *v, 0),
            Action::Contrast(v) => pixels::brightness_contrast(image, 0, *v),
            Action::Sharpen(v) => pixels::sharpen(image, *v, deadline)?,
            Action::Watermark(m) => mark::apply(image, m, limits, watermarks, deadline)?,
        };
    }
    Ok(image)
}

/// A decoded original.
pub(crate) struct Decoded {
    pub(crate) image: DynamicImage,
    pub(crate) format: OutputFormat,
}

/// An original whose header was read and checked against the budgets, pixels not decoded.
pub(crate) struct Opened<D> {
    decoder: D,
    pub(crate) format: OutputFormat,
    pub(crate) exif: Option<Vec<u8>>,
    orientation: Orientation,
}

impl<D: ImageDecoder> Opened<D> {
    /// The size after the orientation is applied.
    pub(crate) fn oriented_size(&self) -> (u64, u64) {
        let (w, h) = self.decoder.dimensions();
        let (w, h) = (u64::from(w), u64::from(h));
        match self.orientation {
            Orientation::Rotate90
            | Orientation::Rotate270
            | Orientation::Rotate90FlipH
            | Orientation::Rotate270FlipH => (h, w),
            _ => (w, h),
        }
    }
}

/// Reads the header within the budgets: the pixel count is refused over budget before any
/// pixel buffer exists.
pub(crate) fn open<'a>(
    original: &'a [u8],
    limits: &Limits,
    auto_orient: bool,
) -> Result<Opened<impl ImageDecoder + 'a>, RenderError> {
    let decode_error = |e: image::ImageError| RenderError::Decode(e.to_string());
    let mut reader = ImageReader::new(Cursor::new(original))
        .with_guessed_format()
        .map_err(|e| RenderError::Decode(e.to_string()))?;
    let format = image_format(reader.format())?;

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
    let exif = decoder.exif_metadata().ok().flatten();
    let orientation = if auto_orient {
        decoder.orientation().unwrap_or(Orientation::NoTransforms)
    } else {
        Orientation::NoTransforms
    };
    Ok(Opened { decoder, format, exif, orientation })
}

/// Decodes within the budgets: header first, pixels only when the header fits.
pub(crate) fn decode(original: &[u8], limits: &Limits, auto_orient: bool) -> Result<Decoded, RenderError> {
    let Opened { decoder, format, orientation, .. } = open(original, limits, auto_orient)?;
    let decoded = DynamicImage::from_decoder(decoder).map_err(|e| RenderError::Decode(e.to_string()))?;
    let mut image = to_8bit(decoded);
    image.apply_orientation(orientation);
    Ok(Decoded { image, format })
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

#[cfg(test)]
mod reference_tests;
#[cfg(test)]
mod tests;
