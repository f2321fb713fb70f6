//! Encoders. JPEG: `jpeg-encoder` (baseline or progressive, SIMD); WebP: libwebp through the
//! `webp` crate (lossy, and lossless for `Q_100`), because `image` only writes lossless WebP;
//! PNG, GIF and BMP: `image`'s own.

use image::codecs::bmp::BmpEncoder;
use image::codecs::gif::GifEncoder;
use image::codecs::png::PngEncoder;
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

pub(crate) fn encode(
    image: DynamicImage,
    format: OutputFormat,
    quality: Quality,
    interlace: bool,
) -> Result<Vec<u8>, RenderError> {
    let mut out = Vec::new();
    match format {
        OutputFormat::Jpeg => {
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
        OutputFormat::Png => image.write_with_encoder(PngEncoder::new(&mut out)).map_err(encode_error)?,
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
            image.write_with_encoder(BmpEncoder::new(&mut out)).map_err(encode_error)?;
        }
    }
    Ok(out)
}
