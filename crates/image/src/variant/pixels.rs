//! The pixel actions, each on an image whose output size was already checked against the
//! budgets (see [`super::plan`]). Long loops check the render's deadline once a row.
//!
//! Choices where OSS documents no formula (each one testable against ImageMagick):
//!
//! * `bright` and `contrast` are ImageMagick's `-brightness-contrast BxC` with the other
//!   value 0: `out = slope × in + intercept` per colour channel, slope `tan(π(C/100 + 1)/4)`,
//!   intercept `B/100 + (1 − slope)/2` (in 0..1 units).
//! * `blur` is a separable Gaussian of standard deviation `s`, cut at radius `r`.
//! * `sharpen` is an unsharp mask: `out = in + (v/100) × (in − gauss₁(in))`, σ = 1, radius 2.
//! * `rotate` by other than a multiple of 90° samples bilinearly into the bounding box, the
//!   uncovered area transparent (white in JPEG output).
//! * `circle` and `rounded-corners` have a one-pixel antialiased edge.

use image::imageops::FilterType;
use image::{DynamicImage, GenericImageView, Rgba, RgbaImage};

use super::geometry::Plan;
use super::{Deadline, RenderError};
use crate::process::{Axis, Crop, Gravity, IndexCrop};

/// Triangle (bilinear, widened when shrinking so every source pixel counts) is the speed and
/// quality middle ground; Lanczos3 is about three times slower for little visible gain at
/// thumbnail sizes.
pub(crate) const FILTER: FilterType = FilterType::Triangle;

/// The size of an image's bounding box after rotating it by `degrees` (not a multiple of 90).
pub(crate) fn rotated_size(src: (u64, u64), degrees: u16) -> (u64, u64) {
    let (sin, cos) = f64::from(degrees).to_radians().sin_cos();
    let (w, h) = (src.0 as f64, src.1 as f64);
    // Rounding away float noise before the ceiling: 90.0000001 would otherwise become 91.
    let side = |v: f64| ((v - 1e-6).ceil().max(1.0)) as u64;
    (side(w * cos.abs() + h * sin.abs()), side(w * sin.abs() + h * cos.abs()))
}

/// The rectangle `crop` keeps, or why there is none: OSS's origins per gravity, plus the
/// offsets, cut at the image's edges; an origin outside the image is a bad request.
pub(crate) fn crop_rect(src: (u64, u64), crop: &Crop) -> Result<(u64, u64, u64, u64), RenderError> {
    let (sw, sh) = (src.0 as i64, src.1 as i64);
    let w = crop.w.map_or(sw, |w| i64::from(w.get()));
    let h = crop.h.map_or(sh, |h| i64::from(h.get()));
    let (col, row) = crop.gravity.cell();
    let ox = match col {
        0 => 0,
        1 => sw / 2 - w / 2,
        _ => sw - w,
    }
    .max(0)
        + i64::from(crop.x);
    let oy = match row {
        0 => 0,
        1 => sh / 2 - h / 2,
        _ => sh - h,
    }
    .max(0)
        + i64::from(crop.y);
    if ox >= sw {
        return Err(RenderError::BadParameter { param: "x", message: "the crop starts outside the image" });
    }
    if oy >= sh {
        return Err(RenderError::BadParameter { param: "y", message: "the crop starts outside the image" });
    }
    let w = w.min(sw - ox).max(1);
    let h = h.min(sh - oy).max(1);
    Ok((ox as u64, oy as u64, w as u64, h as u64))
}

/// The rectangle `indexcrop` keeps; `None`: no such slice, the image is kept whole.
pub(crate) fn index_rect(src: (u64, u64), c: &IndexCrop) -> Option<(u64, u64, u64, u64)> {
    let len = u64::from(c.len.get());
    let index = u64::from(c.index);
    match c.axis {
        Axis::X => {
            let x = index * len;
            (x < src.0).then(|| (x, 0, len.min(src.0 - x), src.1))
        }
        Axis::Y => {
            let y = index * len;
            (y < src.1).then(|| (0, y, src.0, len.min(src.1 - y)))
        }
    }
}

/// The radius `circle` uses: OSS clamps it to (shortest side − 1) / 2; the output is
/// 2r + 1 a side.
pub(crate) fn circle_radius(src: (u64, u64), r: u16) -> u64 {
    u64::from(r).min((src.0.min(src.1).max(1) - 1) / 2)
}

pub(crate) fn crop(image: DynamicImage, (x, y, w, h): (u64, u64, u64, u64)) -> DynamicImage {
    if (x, y, w, h) == (0, 0, u64::from(image.width()), u64::from(image.height())) {
        return image;
    }
    image.crop_imm(x as u32, y as u32, w as u32, h as u32)
}

pub(crate) fn apply_resize(image: DynamicImage, plan: Plan) -> DynamicImage {
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
            let mut canvas = image::RgbImage::from_pixel(px(w), px(h), image::Rgb(color));
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
pub(crate) fn resample(image: DynamicImage, w: u32, h: u32) -> DynamicImage {
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
pub(crate) fn horizontal_pass_first(src: (u32, u32), dst: (u32, u32)) -> bool {
    let vertical_first = u64::from(src.0) * u64::from(dst.1);
    let horizontal_first = u64::from(src.1) * u64::from(dst.0);
    horizontal_first < vertical_first
}

/// Composes an image with alpha onto an opaque `background`; images without alpha pass.
pub(crate) fn flatten(image: DynamicImage, background: [u8; 3]) -> image::RgbImage {
    if !image.color().has_alpha() {
        return image.into_rgb8();
    }
    let rgba = image.into_rgba8();
    let mut out = image::RgbImage::new(rgba.width(), rgba.height());
    for (dst, src) in out.pixels_mut().zip(rgba.pixels()) {
        let alpha = u32::from(src[3]);
        for c in 0..3 {
            let blended = (u32::from(src[c]) * alpha + u32::from(background[c]) * (255 - alpha) + 127) / 255;
            dst[c] = blended as u8;
        }
    }
    out
}

/// Keeps the pixels within `inside(x, y) -> coverage 0..=1` of an RGBA copy.
fn mask(image: DynamicImage, inside: impl Fn(f64, f64) -> f64) -> DynamicImage {
    let mut rgba = image.into_rgba8();
    for (x, y, p) in rgba.enumerate_pixels_mut() {
        let coverage = inside(f64::from(x) + 0.5, f64::from(y) + 0.5).clamp(0.0, 1.0);
        if coverage < 1.0 {
            p[3] = (f64::from(p[3]) * coverage).round() as u8;
        }
    }
    rgba.into()
}

pub(crate) fn circle(image: &DynamicImage, r: u16) -> DynamicImage {
    let (w, h) = image.dimensions();
    let r = circle_radius((w.into(), h.into()), r) as u32;
    let side = 2 * r + 1;
    let (x, y) = (w / 2 - r.min(w / 2), h / 2 - r.min(h / 2));
    let square = image.crop_imm(x, y, side, side);
    let c = f64::from(side) / 2.0;
    let radius = f64::from(side) / 2.0;
    mask(square, |px, py| radius - ((px - c).powi(2) + (py - c).powi(2)).sqrt() + 0.5)
}

pub(crate) fn rounded_corners(image: DynamicImage, r: u16) -> DynamicImage {
    let (w, h) = image.dimensions();
    let r = f64::from(u32::from(r).min(w.min(h) / 2));
    if r < 1.0 {
        return image;
    }
    let (fw, fh) = (f64::from(w), f64::from(h));
    mask(image, |px, py| {
        // The nearest corner centre, when the pixel is inside a corner square.
        let cx = if px < r {
            r
        } else if px > fw - r {
            fw - r
        } else {
            return 1.0;
        };
        let cy = if py < r {
            r
        } else if py > fh - r {
            fh - r
        } else {
            return 1.0;
        };
        r - ((px - cx).powi(2) + (py - cy).powi(2)).sqrt() + 0.5
    })
}

pub(crate) fn rotate(
    image: DynamicImage,
    degrees: u16,
    deadline: &Deadline,
) -> Result<DynamicImage, RenderError> {
    Ok(match degrees {
        90 => image.rotate90(),
        180 => image.rotate180(),
        270 => image.rotate270(),
        d => rotate_any(&image.into_rgba8(), d, deadline)?.into(),
    })
}

/// Clockwise rotation into the bounding box by inverse mapping with bilinear sampling.
fn rotate_any(src: &RgbaImage, degrees: u16, deadline: &Deadline) -> Result<RgbaImage, RenderError> {
    let (sw, sh) = src.dimensions();
    let (ow, oh) = rotated_size((sw.into(), sh.into()), degrees);
    let (ow, oh) = (ow as u32, oh as u32);
    let (sin, cos) = f64::from(degrees).to_radians().sin_cos();
    let (scx, scy) = (f64::from(sw) / 2.0, f64::from(sh) / 2.0);
    let (ocx, ocy) = (f64::from(ow) / 2.0, f64::from(oh) / 2.0);
    let mut out = RgbaImage::new(ow, oh);
    let fetch = |x: i64, y: i64| -> [f64; 4] {
        if x < 0 || y < 0 || x >= i64::from(sw) || y >= i64::from(sh) {
            return [0.0; 4];
        }
        let p = src.get_pixel(x as u32, y as u32);
        // Premultiplied, so transparent neighbours do not bleed their colour in.
        let a = f64::from(p[3]) / 255.0;
        [f64::from(p[0]) * a, f64::from(p[1]) * a, f64::from(p[2]) * a, f64::from(p[3])]
    };
    for oy in 0..oh {
        deadline.check()?;
        for ox in 0..ow {
            let (dx, dy) = (f64::from(ox) + 0.5 - ocx, f64::from(oy) + 0.5 - ocy);
            // Inverse of a clockwise rotation (y grows downwards).
            let sx = dx * cos + dy * sin + scx - 0.5;
            let sy = -dx * sin + dy * cos + scy - 0.5;
            let (x0, y0) = (sx.floor(), sy.floor());
            let (fx, fy) = (sx - x0, sy - y0);
            let (x0, y0) = (x0 as i64, y0 as i64);
            let (a, b, c, d) = (fetch(x0, y0), fetch(x0 + 1, y0), fetch(x0, y0 + 1), fetch(x0 + 1, y0 + 1));
            let mut v = [0.0; 4];
            for i in 0..4 {
                v[i] = (a[i] * (1.0 - fx) + b[i] * fx) * (1.0 - fy) + (c[i] * (1.0 - fx) + d[i] * fx) * fy;
            }
            let alpha = v[3];
            if alpha <= 0.0 {
                continue;
            }
            let un = |c: f64| (c * 255.0 / alpha).round().clamp(0.0, 255.0) as u8;
            out.put_pixel(
                ox,
                oy,
                Rgba([un(v[0]), un(v[1]), un(v[2]), alpha.round().clamp(0.0, 255.0) as u8]),
            );
        }
    }
    Ok(out)
}

/// The Gaussian weights of radius `r` and deviation `sigma`, in 1/65536ths, summing to 65536.
fn kernel(r: usize, sigma: f64) -> Vec<u32> {
    let raw: Vec<f64> = (0..=2 * r)
        .map(|i| {
            let d = i as f64 - r as f64;
            (-(d * d) / (2.0 * sigma * sigma)).exp()
        })
        .collect();
    let sum: f64 = raw.iter().sum();
    let mut weights: Vec<u32> = raw.iter().map(|w| (w / sum * 65536.0).round() as u32).collect();
    let total: u32 = weights.iter().sum();
    weights[r] = (i64::from(weights[r]) + 65536 - i64::from(total)).max(0) as u32;
    weights
}

/// One pass of a separable convolution along rows (`horizontal`) or columns, edges clamped.
fn convolve(
    src: &RgbaImage,
    weights: &[u32],
    horizontal: bool,
    deadline: &Deadline,
) -> Result<RgbaImage, RenderError> {
    let (w, h) = src.dimensions();
    let r = (weights.len() / 2) as i64;
    let mut out = RgbaImage::new(w, h);
    let raw = src.as_raw();
    let (w_i, h_i) = (i64::from(w), i64::from(h));
    for y in 0..h {
        deadline.check()?;
        for x in 0..w {
            let mut acc = [0u64; 4];
            for (k, weight) in weights.iter().enumerate() {
                let off = k as i64 - r;
                let (sx, sy) = if horizontal {
                    ((i64::from(x) + off).clamp(0, w_i - 1), i64::from(y))
                } else {
                    (i64::from(x), (i64::from(y) + off).clamp(0, h_i - 1))
                };
                let i = ((sy * w_i + sx) * 4) as usize;
                for c in 0..4 {
                    acc[c] += u64::from(raw[i + c]) * u64::from(*weight);
                }
            }
            let o = ((i64::from(y) * w_i + i64::from(x)) * 4) as usize;
            let dst = &mut out.as_mut()[o..o + 4];
            for c in 0..4 {
                dst[c] = ((acc[c] + 32768) >> 16).min(255) as u8;
            }
        }
    }
    Ok(out)
}

fn gaussian(
    src: &RgbaImage,
    radius: usize,
    sigma: f64,
    deadline: &Deadline,
) -> Result<RgbaImage, RenderError> {
    let weights = kernel(radius, sigma);
    let pass = convolve(src, &weights, true, deadline)?;
    convolve(&pass, &weights, false, deadline)
}

pub(crate) fn blur(
    image: DynamicImage,
    radius: u8,
    sigma: u8,
    deadline: &Deadline,
) -> Result<DynamicImage, RenderError> {
    let had_alpha = image.color().has_alpha();
    let out = gaussian(&image.into_rgba8(), radius.into(), sigma.into(), deadline)?;
    Ok(restore_alpha(out, had_alpha))
}

pub(crate) fn sharpen(
    image: DynamicImage,
    value: u16,
    deadline: &Deadline,
) -> Result<DynamicImage, RenderError> {
    let had_alpha = image.color().has_alpha();
    let src = image.into_rgba8();
    let blurred = gaussian(&src, 2, 1.0, deadline)?;
    let amount = f64::from(value) / 100.0;
    let mut out = src;
    for (p, b) in out.pixels_mut().zip(blurred.pixels()) {
        for c in 0..3 {
            let v = f64::from(p[c]) + amount * (f64::from(p[c]) - f64::from(b[c]));
            p[c] = v.round().clamp(0.0, 255.0) as u8;
        }
    }
    Ok(restore_alpha(out, had_alpha))
}

/// RGBA work buffers go back to RGB when the input had no alpha (encoders then skip it).
fn restore_alpha(image: RgbaImage, had_alpha: bool) -> DynamicImage {
    let image = DynamicImage::ImageRgba8(image);
    if had_alpha {
        image
    } else {
        image.into_rgb8().into()
    }
}

/// ImageMagick's `-brightness-contrast`: a straight line per colour channel, as a table.
pub(crate) fn brightness_contrast(image: DynamicImage, brightness: i8, contrast: i8) -> DynamicImage {
    let slope = (std::f64::consts::PI * (f64::from(contrast) / 100.0 + 1.0) / 4.0).tan().max(0.0);
    let intercept = f64::from(brightness) / 100.0 + (1.0 - slope) / 2.0;
    let lut: Vec<u8> = (0..=255u32)
        .map(|v| ((slope * f64::from(v) / 255.0 + intercept) * 255.0).round().clamp(0.0, 255.0) as u8)
        .collect();
    let mut image = match image {
        DynamicImage::ImageRgb8(_) | DynamicImage::ImageRgba8(_) => image,
        other if other.color().has_alpha() => other.into_rgba8().into(),
        other => other.into_rgb8().into(),
    };
    match &mut image {
        DynamicImage::ImageRgb8(buf) => {
            buf.pixels_mut().for_each(|p| p.0.iter_mut().for_each(|c| *c = lut[usize::from(*c)]));
        }
        DynamicImage::ImageRgba8(buf) => {
            buf.pixels_mut().for_each(|p| p.0[..3].iter_mut().for_each(|c| *c = lut[usize::from(*c)]));
        }
        _ => unreachable!("converted above"),
    }
    image
}

/// The top-left corner of a `size` box placed by gravity on a `canvas`, OSS's watermark
/// rules: `x` is the margin from the left or right edge (ignored in the middle column), `y`
/// from the top or bottom (ignored in the middle row), `voffset` moves middle-row boxes up.
pub(crate) fn place(
    canvas: (u32, u32),
    size: (u32, u32),
    gravity: Gravity,
    x: u16,
    y: u16,
    voffset: i16,
) -> (i64, i64) {
    let (cw, ch) = (i64::from(canvas.0), i64::from(canvas.1));
    let (w, h) = (i64::from(size.0), i64::from(size.1));
    let (col, row) = gravity.cell();
    let left = match col {
        0 => i64::from(x),
        1 => (cw - w) / 2,
        _ => cw - w - i64::from(x),
    };
    let top = match row {
        0 => i64::from(y),
        1 => (ch - h) / 2 - i64::from(voffset),
        _ => ch - h - i64::from(y),
    };
    (left, top)
}
