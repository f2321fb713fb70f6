//! The `watermark` action: a text (drawn with the bundled font), an image from the same bucket
//! (rendered through its own chain first), or both side by side; placed by gravity, margins
//! and `voffset`, at an opacity, once or tiled.

use ab_glyph::{point, Font, FontRef, PxScale, ScaleFont};
use image::{DynamicImage, GenericImageView, Rgba, RgbaImage};

use super::{
    decode, pixels, plan, resolve_main_percent, run, Deadline, Limits, RenderError, WatermarkImages,
};
use crate::process::{Action, Watermark, WatermarkImage, WatermarkText};

/// Droid Sans Fallback (Apache-2.0, see `assets/README.md`): Latin and CJK in one file.
static FONT: &[u8] = include_bytes!("../../assets/DroidSansFallbackFull.ttf");

pub(crate) fn apply(
    image: DynamicImage,
    mark: &Watermark,
    limits: &Limits,
    watermarks: &WatermarkImages,
    deadline: &Deadline,
) -> Result<DynamicImage, RenderError> {
    let (w, h) = image.dimensions();
    let picture =
        mark.image.as_ref().map(|i| picture(i, (w, h), limits, watermarks, deadline)).transpose()?;
    let text = mark.text.as_ref().map(|t| text(t, limits, deadline)).transpose()?;
    let mut tile = match (picture, text) {
        (Some(p), Some(t)) => side_by_side(p, t, mark),
        (Some(p), None) => p,
        (None, Some(t)) => t,
        (None, None) => return Ok(image),
    };
    if mark.opacity < 100 {
        for p in tile.pixels_mut() {
            p[3] = ((u32::from(p[3]) * u32::from(mark.opacity) + 50) / 100) as u8;
        }
    }
    let had_alpha = image.color().has_alpha();
    let mut base = image.into_rgba8();
    let (x, y) = pixels::place((w, h), tile.dimensions(), mark.gravity, mark.x, mark.y, mark.voffset);
    if mark.tile {
        let step_x = i64::from(tile.width()) + i64::from(mark.padx);
        let step_y = i64::from(tile.height()) + i64::from(mark.pady);
        let mut ty = y.rem_euclid(step_y) - step_y;
        while ty < i64::from(h) {
            deadline.check()?;
            let mut tx = x.rem_euclid(step_x) - step_x;
            while tx < i64::from(w) {
                image::imageops::overlay(&mut base, &tile, tx, ty);
                tx += step_x;
            }
            ty += step_y;
        }
    } else {
        image::imageops::overlay(&mut base, &tile, x, y);
    }
    let out = DynamicImage::ImageRgba8(base);
    Ok(if had_alpha { out } else { out.into_rgb8().into() })
}

/// The watermark image, decoded within its own budget and run through its own chain (`P_`
/// relative to the main image).
fn picture(
    spec: &WatermarkImage,
    main: (u32, u32),
    limits: &Limits,
    watermarks: &WatermarkImages,
    deadline: &Deadline,
) -> Result<RgbaImage, RenderError> {
    let missing = || RenderError::WatermarkMissing(spec.object.clone());
    let bytes = watermarks.get(&spec.object).ok_or_else(missing)?;
    if bytes.len() > limits.max_watermark_bytes {
        return Err(missing());
    }
    let own = Limits { max_input_pixels: limits.max_watermark_pixels, ..limits.clone() };
    let decoded = decode(bytes, &own, false).map_err(|_| missing())?;
    let Some(process) = &spec.process else {
        return Ok(decoded.image.into_rgba8());
    };
    let main = (u64::from(main.0), u64::from(main.1));
    let actions: Vec<Action> = process
        .actions()
        .iter()
        .map(|a| match a {
            Action::Resize(r) => Action::Resize(resolve_main_percent(r, Some(main))),
            other => other.clone(),
        })
        .collect();
    let (ww, wh) = decoded.image.dimensions();
    let own = Limits { max_output_pixels: limits.max_watermark_pixels, ..limits.clone() };
    plan(&actions, (ww.into(), wh.into()), Some(main), &own)?;
    Ok(run(decoded.image, &actions, &own, watermarks, deadline)?.into_rgba8())
}

/// The text drawn on a transparent canvas its own size (plus the shadow), then rotated.
fn text(spec: &WatermarkText, limits: &Limits, deadline: &Deadline) -> Result<RgbaImage, RenderError> {
    let font =
        FontRef::try_from_slice(FONT).map_err(|e| RenderError::Encode(format!("bundled font: {e}")))?;
    let scale = PxScale::from(f32::from(spec.size));
    let scaled = font.as_scaled(scale);
    let mut glyphs = Vec::new();
    let mut caret = 0.0f32;
    let mut previous = None;
    for ch in spec.text.chars() {
        let id = scaled.glyph_id(ch);
        if let Some(prev) = previous {
            caret += scaled.kern(prev, id);
        }
        glyphs.push(id.with_scale_and_position(scale, point(caret, scaled.ascent())));
        caret += scaled.h_advance(id);
        previous = Some(id);
    }
    let offset = if spec.shadow > 0 { (u32::from(spec.size) / 20).max(1) } else { 0 };
    let width = (caret.ceil() as u32).max(1) + offset;
    let height = ((scaled.ascent() - scaled.descent()).ceil() as u32).max(1) + offset;
    if u64::from(width) * u64::from(height) > limits.max_output_pixels {
        return Err(RenderError::OutputTooLarge { width: width.into(), height: height.into() });
    }
    let mut canvas = RgbaImage::new(width, height);
    let layers: &[(u32, [u8; 3], u8)] = if spec.shadow > 0 {
        &[(offset, [0, 0, 0], spec.shadow), (0, spec.color, 100)]
    } else {
        &[(0, spec.color, 100)]
    };
    for &(shift, color, opacity) in layers {
        for glyph in &glyphs {
            let Some(outlined) = font.outline_glyph(glyph.clone()) else { continue };
            let bounds = outlined.px_bounds();
            outlined.draw(|gx, gy, coverage| {
                let x = bounds.min.x as i64 + i64::from(gx) + i64::from(shift);
                let y = bounds.min.y as i64 + i64::from(gy) + i64::from(shift);
                if x < 0 || y < 0 || x >= i64::from(width) || y >= i64::from(height) {
                    return;
                }
                let alpha = (coverage.clamp(0.0, 1.0) * f32::from(opacity) / 100.0 * 255.0).round() as u8;
                let below = *canvas.get_pixel(x as u32, y as u32);
                canvas.put_pixel(
                    x as u32,
                    y as u32,
                    over(Rgba([color[0], color[1], color[2], alpha]), below),
                );
            });
        }
    }
    deadline.check()?;
    if spec.rotate == 0 {
        return Ok(canvas);
    }
    let (rw, rh) = pixels::rotated_size((width.into(), height.into()), spec.rotate);
    if rw.saturating_mul(rh) > limits.max_output_pixels {
        return Err(RenderError::OutputTooLarge { width: rw, height: rh });
    }
    Ok(pixels::rotate(DynamicImage::ImageRgba8(canvas), spec.rotate, deadline)?.into_rgba8())
}

/// Porter-Duff "over" of straight-alpha pixels.
fn over(top: Rgba<u8>, below: Rgba<u8>) -> Rgba<u8> {
    let (ta, ba) = (f32::from(top[3]) / 255.0, f32::from(below[3]) / 255.0);
    let a = ta + ba * (1.0 - ta);
    if a <= 0.0 {
        return Rgba([0, 0, 0, 0]);
    }
    let mut out = [0u8; 4];
    for c in 0..3 {
        let v = (f32::from(top[c]) * ta + f32::from(below[c]) * ba * (1.0 - ta)) / a;
        out[c] = v.round().clamp(0.0, 255.0) as u8;
    }
    out[3] = (a * 255.0).round() as u8;
    Rgba(out)
}

/// Image and text on one canvas, in `order`, `interval` apart, lined up by `align`.
fn side_by_side(picture: RgbaImage, text: RgbaImage, mark: &Watermark) -> RgbaImage {
    let (first, second) = if mark.text_first { (text, picture) } else { (picture, text) };
    let gap = u32::from(mark.interval);
    let width = first.width() + gap + second.width();
    let height = first.height().max(second.height());
    let mut canvas = RgbaImage::new(width, height);
    let top = |h: u32| -> i64 {
        match mark.align {
            0 => 0,
            1 => i64::from((height - h) / 2),
            _ => i64::from(height - h),
        }
    };
    image::imageops::overlay(&mut canvas, &first, 0, top(first.height()));
    image::imageops::overlay(&mut canvas, &second, i64::from(first.width() + gap), top(second.height()));
    canvas
}
