//! The strict grammar of `x-oss-process=image/...` and its canonical form.
//!
//! ```text
//! image/<action>[,<param>]*[/<action>[,<param>]*]*
//! resize   m_(lfit|mfit|fill|pad|fixed) w_N h_N l_N s_N limit_(0|1) color_RRGGBB   N in 1..=16384
//! quality  q_N Q_N                                                                    N in 1..=100
//! format   jpg|jpeg|png|webp
//! ```
//!
//! Everything else is refused with a [`ProcessError`] naming the parameter: unknown actions
//! and parameters, repeats, empty values, numbers with signs, leading zeros or out of range.
//! Being strict matters because the canonical string is part of a cache key: a lenient
//! parser would let one variant hide behind endless spellings, or let garbage create cache
//! entries.
//!
//! What OSS ignores is dropped while parsing, so that spellings with the same effect share
//! one value (and one cache entry): `l`/`s` when `w` or `h` is given, `color` unless `m_pad`,
//! `q` when `Q` is given. They are still validated.

use std::fmt::Write as _;
use std::str::FromStr;

/// The longest `x-oss-process` value accepted, in bytes. The longest meaningful one is
/// about 100 bytes; the cap bounds the work and the size of error messages.
pub const MAX_PROCESS_LEN: usize = 512;

/// The largest `w`, `h`, `l` and `s` (OSS's limit).
pub const MAX_SIDE: u32 = 16384;

/// Why an `x-oss-process` value was refused.
///
/// `param` is the parameter name (`w`, `m`, `Q`, `limit`...), the action name for an
/// action-level problem (`resize`, `format`, or an unknown action), or `x-oss-process` for
/// the structure of the whole value. It echoes client input, cut to 32 characters: escape it
/// before putting it into a response body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid x-oss-process parameter {param}: {message}")]
pub struct ProcessError {
    pub param: String,
    pub message: &'static str,
}

impl ProcessError {
    fn new(param: &str, message: &'static str) -> Self {
        // Parameter names come from the client: cap what is echoed back.
        let param = match param.char_indices().nth(32) {
            Some((end, _)) => &param[..end],
            None => param,
        };
        Self { param: param.to_owned(), message }
    }
}

/// A side length in pixels, 1..=16384.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Side(u16);

impl Side {
    pub fn new(px: u32) -> Option<Self> {
        (1..=MAX_SIDE).contains(&px).then_some(Self(px as u16))
    }

    pub fn get(self) -> u32 {
        u32::from(self.0)
    }
}

/// A quality value, 1..=100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Percent(u8);

impl Percent {
    pub fn new(value: u32) -> Option<Self> {
        (1..=100).contains(&value).then_some(Self(value as u8))
    }

    pub fn get(self) -> u8 {
        self.0
    }
}

/// `m_...` of `resize`. The pad colour lives in [`ResizeMode::Pad`] because no other mode
/// uses it; a `color_` given with another mode is validated and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResizeMode {
    /// Largest proportional image inside the box (the default).
    Lfit,
    /// Smallest proportional image covering the box.
    Mfit,
    /// `Mfit`, then cropped to the box around the centre.
    Fill,
    /// `Lfit`, then centred on a box-sized canvas of `color` (RGB).
    Pad { color: [u8; 3] },
    /// Exactly the box, aspect ratio not kept.
    Fixed,
}

/// The sizes given to `resize`. Every variant names at least one side, so "no size" cannot
/// be represented. `l`/`s` only appear when neither `w` nor `h` was given (OSS ignores them
/// then).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    Width(Side),
    Height(Side),
    WidthHeight(Side, Side),
    /// `l`: the longest side.
    Longest(Side),
    /// `s`: the shortest side.
    Shortest(Side),
    /// `l` and `s` together.
    LongestShortest(Side, Side),
}

/// The `resize` action. Any combination of the fields is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resize {
    pub mode: ResizeMode,
    pub target: Target,
    /// `limit_0`: the image may be enlarged. `limit_1` (the default) keeps the original size
    /// whenever the resize would enlarge it.
    pub enlarge: bool,
}

/// The `quality` action (JPEG only; see the renderer for how it is applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quality {
    /// `q_`: relative to the original's quality in OSS.
    Relative(Percent),
    /// `Q_`: absolute. Wins over `q_` when both are given.
    Absolute(Percent),
}

/// The `format` action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputFormat {
    Jpeg,
    Png,
    WebP,
}

impl OutputFormat {
    /// The spelling in the canonical string (`jpg`, as OSS writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            OutputFormat::Jpeg => "jpg",
            OutputFormat::Png => "png",
            OutputFormat::WebP => "webp",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            OutputFormat::Jpeg => "image/jpeg",
            OutputFormat::Png => "image/png",
            OutputFormat::WebP => "image/webp",
        }
    }
}

/// A parsed, valid `x-oss-process=image/...` value: at least one action, each at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageProcess {
    resize: Option<Resize>,
    quality: Option<Quality>,
    format: Option<OutputFormat>,
}

impl ImageProcess {
    /// `None` when no action is given: `image/` alone is not a valid value.
    pub fn new(
        resize: Option<Resize>,
        quality: Option<Quality>,
        format: Option<OutputFormat>,
    ) -> Option<Self> {
        (resize.is_some() || quality.is_some() || format.is_some()).then_some(Self {
            resize,
            quality,
            format,
        })
    }

    pub fn resize(&self) -> Option<&Resize> {
        self.resize.as_ref()
    }

    pub fn quality(&self) -> Option<Quality> {
        self.quality
    }

    pub fn format(&self) -> Option<OutputFormat> {
        self.format
    }

    /// The canonical spelling, for cache keys: actions in the order resize, quality, format;
    /// resize parameters in the order `m, w, h, l, s, limit, color` with `m` and `limit`
    /// always written and `color` written exactly for `m_pad`; `jpeg` written `jpg`; colours
    /// in lowercase hex.
    ///
    /// Alphabet: `[a-z0-9_,/]` plus the uppercase `Q` of `Q_` (absolute quality; `q_` and
    /// `Q_` mean different things in OSS, so they stay distinct). No character needs
    /// escaping in a URL or a file name. `parse(&p.canonical()) == Ok(p)` for every `p`.
    pub fn canonical(&self) -> String {
        let mut out = String::from("image");
        if let Some(r) = &self.resize {
            let (m, color) = match r.mode {
                ResizeMode::Lfit => ("lfit", None),
                ResizeMode::Mfit => ("mfit", None),
                ResizeMode::Fill => ("fill", None),
                ResizeMode::Pad { color } => ("pad", Some(color)),
                ResizeMode::Fixed => ("fixed", None),
            };
            let _ = write!(out, "/resize,m_{m}");
            let mut side = |key: &str, side: Side| {
                let _ = write!(out, ",{key}_{}", side.get());
            };
            match r.target {
                Target::Width(w) => side("w", w),
                Target::Height(h) => side("h", h),
                Target::WidthHeight(w, h) => {
                    side("w", w);
                    side("h", h);
                }
                Target::Longest(l) => side("l", l),
                Target::Shortest(s) => side("s", s),
                Target::LongestShortest(l, s) => {
                    side("l", l);
                    side("s", s);
                }
            }
            let _ = write!(out, ",limit_{}", if r.enlarge { 0 } else { 1 });
            if let Some([r, g, b]) = color {
                let _ = write!(out, ",color_{r:02x}{g:02x}{b:02x}");
            }
        }
        match self.quality {
            Some(Quality::Relative(q)) => {
                let _ = write!(out, "/quality,q_{}", q.get());
            }
            Some(Quality::Absolute(q)) => {
                let _ = write!(out, "/quality,Q_{}", q.get());
            }
            None => {}
        }
        if let Some(f) = self.format {
            let _ = write!(out, "/format,{}", f.as_str());
        }
        out
    }
}

impl FromStr for ImageProcess {
    type Err = ProcessError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

const WHOLE: &str = "x-oss-process";

/// Parses the (already percent-decoded) value of the `x-oss-process` query parameter.
pub fn parse(raw: &str) -> Result<ImageProcess, ProcessError> {
    if raw.len() > MAX_PROCESS_LEN {
        return Err(ProcessError::new(WHOLE, "is longer than 512 bytes"));
    }
    let Some(actions) = raw.strip_prefix("image/") else {
        return Err(ProcessError::new(WHOLE, "must start with image/"));
    };
    let (mut resize, mut quality, mut format) = (None, None, None);
    for action in actions.split('/') {
        let mut parts = action.split(',');
        let name = parts.next().unwrap_or_default();
        if name.is_empty() {
            return Err(ProcessError::new(WHOLE, "has an empty action"));
        }
        let params = parts.collect::<Vec<_>>();
        if params.iter().any(|p| p.is_empty()) {
            return Err(ProcessError::new(name, "has an empty parameter"));
        }
        let slot_taken = match name {
            "resize" => resize.replace(parse_resize(&params)?).is_some(),
            "quality" => quality.replace(parse_quality(&params)?).is_some(),
            "format" => format.replace(parse_format(&params)?).is_some(),
            _ => return Err(ProcessError::new(name, "is not a supported action")),
        };
        if slot_taken {
            return Err(ProcessError::new(name, "is given more than once"));
        }
    }
    // Unreachable in practice (`split` yields at least one item and empty names are refused),
    // but `new` is the one place that states the invariant.
    ImageProcess::new(resize, quality, format).ok_or_else(|| ProcessError::new(WHOLE, "has no action"))
}

/// Splits `k_v` parameters, refusing repeats and empty values. `known` lists the keys the
/// action accepts; the result has their values in the same order.
fn key_values<'a, const N: usize>(
    params: &[&'a str],
    known: [&str; N],
) -> Result<[Option<&'a str>; N], ProcessError> {
    let mut values = [None; N];
    for param in params {
        let Some((key, value)) = param.split_once('_') else {
            return Err(ProcessError::new(param, "must be written key_value"));
        };
        let Some(i) = known.iter().position(|k| *k == key) else {
            return Err(ProcessError::new(key, "is not a supported parameter"));
        };
        if value.is_empty() {
            return Err(ProcessError::new(key, "must not be empty"));
        }
        if values[i].replace(value).is_some() {
            return Err(ProcessError::new(key, "is given more than once"));
        }
    }
    Ok(values)
}

/// A decimal integer in `min..=max`: ASCII digits only, no sign, no leading zero.
fn integer(key: &str, value: &str, max: u32, message: &'static str) -> Result<u32, ProcessError> {
    let canonical_digits =
        value.len() <= 5 && value.bytes().all(|b| b.is_ascii_digit()) && !value.starts_with('0');
    match value.parse::<u32>() {
        Ok(n) if canonical_digits && (1..=max).contains(&n) => Ok(n),
        _ => Err(ProcessError::new(key, message)),
    }
}

fn side(key: &str, value: Option<&str>) -> Result<Option<Side>, ProcessError> {
    value
        .map(|v| {
            let n = integer(key, v, MAX_SIDE, "must be an integer from 1 to 16384")?;
            Ok(Side::new(n).expect("range checked"))
        })
        .transpose()
}

fn parse_resize(params: &[&str]) -> Result<Resize, ProcessError> {
    let [m, w, h, l, s, limit, color] = key_values(params, ["m", "w", "h", "l", "s", "limit", "color"])?;
    let color = color
        .map(|c| parse_color(c).ok_or_else(|| ProcessError::new("color", "must be 6 hex digits")))
        .transpose()?
        .unwrap_or([0xff, 0xff, 0xff]);
    let mode = match m {
        None | Some("lfit") => ResizeMode::Lfit,
        Some("mfit") => ResizeMode::Mfit,
        Some("fill") => ResizeMode::Fill,
        Some("pad") => ResizeMode::Pad { color },
        Some("fixed") => ResizeMode::Fixed,
        Some(_) => return Err(ProcessError::new("m", "must be lfit, mfit, fill, pad or fixed")),
    };
    let enlarge = match limit {
        None | Some("1") => false,
        Some("0") => true,
        Some(_) => return Err(ProcessError::new("limit", "must be 0 or 1")),
    };
    let (w, h, l, s) = (side("w", w)?, side("h", h)?, side("l", l)?, side("s", s)?);
    let target = match (w, h, l, s) {
        (Some(w), Some(h), _, _) => Target::WidthHeight(w, h),
        (Some(w), None, _, _) => Target::Width(w),
        (None, Some(h), _, _) => Target::Height(h),
        (None, None, Some(l), Some(s)) => Target::LongestShortest(l, s),
        (None, None, Some(l), None) => Target::Longest(l),
        (None, None, None, Some(s)) => Target::Shortest(s),
        (None, None, None, None) => {
            return Err(ProcessError::new("resize", "needs at least one of w, h, l, s"))
        }
    };
    Ok(Resize { mode, target, enlarge })
}

fn parse_color(value: &str) -> Option<[u8; 3]> {
    if value.len() != 6 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let byte = |i: usize| u8::from_str_radix(&value[i..i + 2], 16).ok();
    Some([byte(0)?, byte(2)?, byte(4)?])
}

fn parse_quality(params: &[&str]) -> Result<Quality, ProcessError> {
    const MESSAGE: &str = "must be an integer from 1 to 100";
    let [relative, absolute] = key_values(params, ["q", "Q"])?;
    let relative = relative.map(|v| integer("q", v, 100, MESSAGE)).transpose()?;
    let absolute = absolute.map(|v| integer("Q", v, 100, MESSAGE)).transpose()?;
    let percent = |n| Percent::new(n).expect("range checked");
    match (relative, absolute) {
        (_, Some(q)) => Ok(Quality::Absolute(percent(q))),
        (Some(q), None) => Ok(Quality::Relative(percent(q))),
        (None, None) => Err(ProcessError::new("quality", "needs q or Q")),
    }
}

fn parse_format(params: &[&str]) -> Result<OutputFormat, ProcessError> {
    match params {
        ["jpg" | "jpeg"] => Ok(OutputFormat::Jpeg),
        ["png"] => Ok(OutputFormat::Png),
        ["webp"] => Ok(OutputFormat::WebP),
        [] => Err(ProcessError::new("format", "needs a format")),
        [_] => Err(ProcessError::new("format", "must be jpg, jpeg, png or webp")),
        _ => Err(ProcessError::new("format", "takes exactly one format")),
    }
}

#[cfg(test)]
mod tests;
