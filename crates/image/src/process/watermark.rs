//! The `watermark` action's grammar (OSS's parameters, all optional but one of `text_` and
//! `image_`):
//!
//! ```text
//! t_ (0..=100, opacity; 100)  g_ (nw..se; se)  x_ y_ (0..=4096; 10)  voffset_ (-1000..=1000; 0)
//! fill_ (0|1: tile; 0)  padx_ pady_ (0..=4096; 0, the gaps between tiles)
//! text_ (URL-safe base64 of at most 64 characters)  type_ (base64 of a font name; wqy-zenhei)
//! color_ (RRGGBB; 000000)  size_ (1..=1000; 40)  shadow_ (0..=100; 0)  rotate_ (0..=360; 0)
//! image_ (URL-safe base64 of an object name of the same bucket, optionally with
//!         `?x-oss-process=image/...` of its own: resize (with `P_`), crop, indexcrop, circle,
//!         rounded-corners, rotate, blur, bright, contrast, sharpen)
//! order_ (0: image first, 1: text first; 0)  align_ (0 top, 1 middle, 2 bottom; 0)
//! interval_ (0..=1000; 0, between image and text)
//! ```

use std::fmt::Write as _;

use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine as _;

use super::{
    integer, key_values, parse_color, parse_with, signed, Context, Gravity, ImageProcess, ProcessError,
};

/// The fonts OSS names. All are drawn with the one bundled font (see the renderer); the name
/// stays part of the canonical form so a later font of its own changes the cache key.
pub const FONTS: [&str; 7] = [
    "wqy-zenhei",
    "wqy-microhei",
    "fangzhengshusong",
    "fangzhengkaiti",
    "fangzhengheiti",
    "fangzhengfangsong",
    "droidsansfallback",
];

/// Longest watermark text, in characters (OSS's limit).
pub const MAX_TEXT_CHARS: usize = 64;

/// Longest watermark object name, in bytes (with its own process).
pub const MAX_OBJECT_LEN: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WatermarkText {
    pub text: String,
    /// Index into [`FONTS`].
    pub font: u8,
    pub color: [u8; 3],
    /// Font size in pixels, 1..=1000.
    pub size: u16,
    /// Opacity of a shadow below and right of the text, 0..=100 (0: none).
    pub shadow: u8,
    /// Degrees clockwise, 0..=359.
    pub rotate: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WatermarkImage {
    /// The object name in the same bucket, without a leading `/`.
    pub object: String,
    /// Its own process (`P_` sizes it relative to the main image).
    pub process: Option<ImageProcess>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Watermark {
    /// Opacity percent, 0..=100 (OSS calls it transparency; 100 is opaque).
    pub opacity: u8,
    pub gravity: Gravity,
    pub x: u16,
    pub y: u16,
    pub voffset: i16,
    /// `fill_1`: the watermark is tiled over the whole image.
    pub tile: bool,
    pub padx: u16,
    pub pady: u16,
    pub text: Option<WatermarkText>,
    pub image: Option<WatermarkImage>,
    /// `true`: text before (left of) the image.
    pub text_first: bool,
    /// 0 top, 1 middle, 2 bottom: how the shorter of text and image lines up with the other.
    pub align: u8,
    pub interval: u16,
}

fn decode_b64(key: &str, value: &str) -> Result<String, ProcessError> {
    let bytes = URL_SAFE
        .decode(value)
        .or_else(|_| URL_SAFE_NO_PAD.decode(value))
        .map_err(|_| ProcessError::new(key, "must be URL-safe base64"))?;
    String::from_utf8(bytes).map_err(|_| ProcessError::new(key, "must be base64 of UTF-8 text"))
}

fn encode_b64(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(text.as_bytes())
}

pub(crate) fn parse(params: &[&str]) -> Result<Watermark, ProcessError> {
    const MARGIN: &str = "must be an integer from 0 to 4096";
    let [t, g, x, y, voffset, fill, padx, pady, text, font, color, size, shadow, rotate, image, order, align, interval] =
        key_values(
            params,
            [
                "t", "g", "x", "y", "voffset", "fill", "padx", "pady", "text", "type", "color", "size",
                "shadow", "rotate", "image", "order", "align", "interval",
            ],
        )?;
    let num = |key: &str, v: Option<&str>, min: u32, max: u32, default: u32, message: &'static str| {
        v.map_or(Ok(default), |v| integer(key, v, min, max, message))
    };
    let flag = |key: &str, v: Option<&str>| num(key, v, 0, 1, 0, "must be 0 or 1").map(|n| n == 1);
    // Every value given is checked first, so that a bad one is reported under its own name
    // (`t_500` is about `t`, even without text or image); then how the parameters combine.
    let opacity = num("t", t, 0, 100, 100, "must be an integer from 0 to 100")? as u8;
    let gravity = g.map_or(Ok(Gravity::SouthEast), |g| Gravity::parse("g", g))?;
    let x = num("x", x, 0, 4096, 10, MARGIN)? as u16;
    let y = num("y", y, 0, 4096, 10, MARGIN)? as u16;
    let voffset =
        voffset.map_or(Ok(0), |v| signed("voffset", v, 1000, "must be an integer from -1000 to 1000"))?;
    let tile = flag("fill", fill)?;
    let padx = num("padx", padx, 0, 4096, 0, MARGIN)? as u16;
    let pady = num("pady", pady, 0, 4096, 0, MARGIN)? as u16;
    let text_first = flag("order", order)?;
    let align_value = num("align", align, 0, 2, 0, "must be 0, 1 or 2")? as u8;
    let interval_value = num("interval", interval, 0, 1000, 0, "must be an integer from 0 to 1000")? as u16;
    let font_index = match font {
        None => 0,
        Some(raw) => {
            let name = decode_b64("type", raw)?;
            FONTS.iter().position(|f| *f == name).ok_or_else(|| {
                ProcessError::new("type", "must name an OSS font (wqy-zenhei, droidsansfallback, ...)")
            })? as u8
        }
    };
    let text_color = color.map_or(Ok([0, 0, 0]), |c| parse_color("color", c))?;
    let text_size = num("size", size, 1, 1000, 40, "must be an integer from 1 to 1000")? as u16;
    let text_shadow = num("shadow", shadow, 0, 100, 0, "must be an integer from 0 to 100")? as u8;
    let text_rotate = num("rotate", rotate, 0, 360, 0, "must be an integer from 0 to 360")? % 360;
    let text = match text {
        None => {
            for (key, given) in
                [("type", font), ("color", color), ("size", size), ("shadow", shadow), ("rotate", rotate)]
            {
                if given.is_some() {
                    return Err(ProcessError::new(key, "needs text"));
                }
            }
            None
        }
        Some(raw) => {
            let text = decode_b64("text", raw)?;
            if text.is_empty() || text.chars().count() > MAX_TEXT_CHARS {
                return Err(ProcessError::new("text", "must be 1 to 64 characters"));
            }
            if text.chars().any(char::is_control) {
                return Err(ProcessError::new("text", "must not contain control characters"));
            }
            Some(WatermarkText {
                text,
                font: font_index,
                color: text_color,
                size: text_size,
                shadow: text_shadow,
                rotate: text_rotate as u16,
            })
        }
    };
    let image = match image {
        None => None,
        Some(raw) => {
            let name = decode_b64("image", raw)?;
            if name.len() > MAX_OBJECT_LEN {
                return Err(ProcessError::new("image", "names an object longer than 1024 bytes"));
            }
            let (object, process) = match name.split_once('?') {
                None => (name.as_str(), None),
                Some((object, query)) => {
                    let Some(process) = query.strip_prefix("x-oss-process=") else {
                        return Err(ProcessError::new("image", "may carry only ?x-oss-process=image/..."));
                    };
                    (object, Some(parse_with(process, Context::Watermark)?))
                }
            };
            let object = object.strip_prefix('/').unwrap_or(object);
            if object.is_empty() || object.chars().any(char::is_control) {
                return Err(ProcessError::new("image", "must name an object"));
            }
            Some(WatermarkImage { object: object.to_owned(), process })
        }
    };
    if text.is_none() && image.is_none() {
        return Err(ProcessError::new("watermark", "needs text or image"));
    }
    let both = text.is_some() && image.is_some();
    for (key, given) in [("order", order), ("align", align), ("interval", interval)] {
        if given.is_some() && !both {
            return Err(ProcessError::new(key, "needs both text and image"));
        }
    }
    Ok(Watermark {
        opacity,
        gravity,
        x,
        y,
        voffset: voffset as i16,
        tile,
        padx,
        pady,
        text_first,
        align: align_value,
        interval: interval_value,
        text,
        image,
    })
}

impl Watermark {
    pub(crate) fn write_canonical(&self, out: &mut String) {
        out.push_str("watermark");
        if let Some(image) = &self.image {
            let mut name = image.object.clone();
            if let Some(p) = &image.process {
                name.push_str("?x-oss-process=");
                name.push_str(&p.canonical());
            }
            let _ = write!(out, ",image_{}", encode_b64(&name));
        }
        if let Some(t) = &self.text {
            let [r, g, b] = t.color;
            let _ = write!(
                out,
                ",text_{},type_{},color_{r:02x}{g:02x}{b:02x},size_{},shadow_{},rotate_{}",
                encode_b64(&t.text),
                encode_b64(FONTS[usize::from(t.font)]),
                t.size,
                t.shadow,
                t.rotate
            );
        }
        let _ = write!(
            out,
            ",t_{},g_{},x_{},y_{},voffset_{},fill_{},padx_{},pady_{}",
            self.opacity,
            self.gravity.as_str(),
            self.x,
            self.y,
            self.voffset,
            u8::from(self.tile),
            self.padx,
            self.pady
        );
        if self.text.is_some() && self.image.is_some() {
            let _ = write!(
                out,
                ",order_{},align_{},interval_{}",
                u8::from(self.text_first),
                self.align,
                self.interval
            );
        }
    }
}
