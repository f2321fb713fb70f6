//! The parser: a raw `x-oss-process` value into an [`ImageProcess`], strictly (see the
//! module above for what is refused and what is dropped).

use std::str::FromStr;

use super::{
    watermark, Action, Axis, Crop, Gravity, ImageProcess, IndexCrop, Output, OutputFormat, Percent,
    ProcessError, Quality, Report, Resize, ResizeMode, Side, Target, MAX_ACTIONS, MAX_PROCESS_LEN, MAX_SIDE,
};

impl FromStr for ImageProcess {
    type Err = ProcessError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

pub(crate) const WHOLE: &str = "x-oss-process";

/// Parses the (already percent-decoded) value of the `x-oss-process` query parameter.
pub fn parse(raw: &str) -> Result<ImageProcess, ProcessError> {
    parse_with(raw, Context::Main)
}

/// Where a chain stands: the request's own, or a watermark image's (which allows `P_` and
/// no watermarks, settings or reports of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Context {
    Main,
    Watermark,
}

pub(crate) fn parse_with(raw: &str, context: Context) -> Result<ImageProcess, ProcessError> {
    if raw.len() > MAX_PROCESS_LEN {
        return Err(ProcessError::new(WHOLE, "is longer than 2048 bytes"));
    }
    let Some(actions) = raw.strip_prefix("image/") else {
        return Err(ProcessError::new(WHOLE, "must start with image/"));
    };
    let mut auto_orient = None;
    let mut chain = Vec::new();
    let mut output = Output::default();
    let (mut quality, mut format, mut interlace) = (false, false, false);
    let mut report = None;
    for action in actions.split('/') {
        let mut parts = action.split(',');
        let name = parts.next().unwrap_or_default();
        if name.is_empty() {
            return Err(ProcessError::new(WHOLE, "has an empty action"));
        }
        if report.is_some() {
            return Err(ProcessError::new(name, "must not follow info or average-hue"));
        }
        let params = parts.collect::<Vec<_>>();
        if params.iter().any(|p| p.is_empty()) {
            return Err(ProcessError::new(name, "has an empty parameter"));
        }
        let main_only = |name: &str| {
            if context == Context::Watermark {
                Err(ProcessError::new(name, "is not allowed in a watermark image's process"))
            } else {
                Ok(())
            }
        };
        let once = |seen: &mut bool, name: &str| {
            if std::mem::replace(seen, true) {
                Err(ProcessError::new(name, "is given more than once"))
            } else {
                Ok(())
            }
        };
        match name {
            "resize" => chain.push(Action::Resize(parse_resize(&params, context)?)),
            "crop" => chain.push(Action::Crop(parse_crop(&params)?)),
            "indexcrop" => chain.push(Action::IndexCrop(parse_indexcrop(&params)?)),
            "circle" => chain.push(Action::Circle(parse_radius(name, &params)?)),
            "rounded-corners" => chain.push(Action::RoundedCorners(parse_radius(name, &params)?)),
            "rotate" => {
                let d = single_value(name, &params, 0, 360, "must be an integer from 0 to 360")?;
                if d % 360 != 0 {
                    chain.push(Action::Rotate(d as u16));
                }
            }
            "blur" => {
                // Each value given is checked before the one missing is reported: `blur,r_0`
                // is about `r`.
                const MESSAGE: &str = "must be an integer from 1 to 50";
                let [r, s] = key_values(&params, ["r", "s"])?;
                let radius = r.map(|r| integer("r", r, 1, 50, MESSAGE)).transpose()?;
                let sigma = s.map(|s| integer("s", s, 1, 50, MESSAGE)).transpose()?;
                let (radius, sigma) = match (radius, sigma) {
                    (Some(r), Some(s)) => (r as u8, s as u8),
                    (None, None) => return Err(ProcessError::new("blur", "needs r and s")),
                    (None, _) => return Err(ProcessError::new("r", "is required: blur needs r and s")),
                    (_, None) => return Err(ProcessError::new("s", "is required: blur needs r and s")),
                };
                chain.push(Action::Blur { radius, sigma });
            }
            "bright" | "contrast" => {
                let v = single_signed(name, &params, 100, "must be an integer from -100 to 100")?;
                if v != 0 {
                    chain.push(if name == "bright" {
                        Action::Bright(v as i8)
                    } else {
                        Action::Contrast(v as i8)
                    });
                }
            }
            "sharpen" => {
                let v = single_value(name, &params, 50, 399, "must be an integer from 50 to 399")?;
                chain.push(Action::Sharpen(v as u16));
            }
            "watermark" => {
                main_only(name)?;
                chain.push(Action::Watermark(Box::new(watermark::parse(&params)?)));
            }
            "auto-orient" => {
                main_only(name)?;
                let v = single_value(name, &params, 0, 1, "must be 0 or 1")?;
                if auto_orient.replace(v == 1).is_some() {
                    return Err(ProcessError::new(name, "is given more than once"));
                }
            }
            "quality" => {
                main_only(name)?;
                once(&mut quality, name)?;
                output.quality = Some(parse_quality(&params)?);
            }
            "format" => {
                main_only(name)?;
                once(&mut format, name)?;
                output.format = Some(parse_format(&params)?);
            }
            "interlace" => {
                main_only(name)?;
                once(&mut interlace, name)?;
                output.interlace = single_value(name, &params, 0, 1, "must be 0 or 1")? == 1;
            }
            "info" | "average-hue" => {
                main_only(name)?;
                if !params.is_empty() {
                    return Err(ProcessError::new(name, "takes no parameters"));
                }
                report = Some(if name == "info" { Report::Info } else { Report::AverageHue });
            }
            _ => return Err(ProcessError::new(name, "is not a supported action")),
        }
        if chain.len() > MAX_ACTIONS {
            return Err(ProcessError::new(WHOLE, "has more than 16 actions"));
        }
    }
    let auto_orient = auto_orient.unwrap_or(false);
    if context == Context::Watermark && chain.is_empty() {
        return Err(ProcessError::new(WHOLE, "has no action"));
    }
    // A chain of no-ops (`rotate,0`, `bright,0`, `auto-orient,0`) still names a valid request:
    // an unchanged re-encode, as OSS serves it.
    Ok(ImageProcess { auto_orient, actions: chain, output, report })
}

/// Splits `k_v` parameters, refusing repeats and empty values. `known` lists the keys the
/// action accepts; the result has their values in the same order.
pub(crate) fn key_values<'a, const N: usize>(
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

/// A decimal integer in `min..=max`: ASCII digits only, no sign, no leading zero (`0` itself
/// is fine where `min` is 0).
pub(crate) fn integer(
    key: &str,
    value: &str,
    min: u32,
    max: u32,
    message: &'static str,
) -> Result<u32, ProcessError> {
    let canonical_digits = value.len() <= 5
        && value.bytes().all(|b| b.is_ascii_digit())
        && (value == "0" || !value.starts_with('0'));
    match value.parse::<u32>() {
        Ok(n) if canonical_digits && (min..=max).contains(&n) => Ok(n),
        _ => Err(ProcessError::new(key, message)),
    }
}

/// A decimal integer in `-max..=max`: an optional `-`, then as [`integer`] (`-0` refused).
pub(crate) fn signed(key: &str, value: &str, max: u32, message: &'static str) -> Result<i32, ProcessError> {
    match value.strip_prefix('-') {
        Some(digits) => {
            let n = integer(key, digits, 1, max, message)?;
            Ok(-(n as i32))
        }
        None => Ok(integer(key, value, 0, max, message)? as i32),
    }
}

/// The one bare value of `rotate,90`-style actions.
fn single_value(
    name: &str,
    params: &[&str],
    min: u32,
    max: u32,
    message: &'static str,
) -> Result<u32, ProcessError> {
    match params {
        [v] => integer(name, v, min, max, message),
        [] => Err(ProcessError::new(name, "needs a value")),
        _ => Err(ProcessError::new(name, "takes exactly one value")),
    }
}

fn single_signed(name: &str, params: &[&str], max: u32, message: &'static str) -> Result<i32, ProcessError> {
    match params {
        [v] => signed(name, v, max, message),
        [] => Err(ProcessError::new(name, "needs a value")),
        _ => Err(ProcessError::new(name, "takes exactly one value")),
    }
}

fn side(key: &str, value: Option<&str>) -> Result<Option<Side>, ProcessError> {
    value
        .map(|v| {
            let n = integer(key, v, 1, MAX_SIDE, "must be an integer from 1 to 16384")?;
            Ok(Side::new(n).expect("range checked"))
        })
        .transpose()
}

pub(crate) fn parse_color(key: &str, value: &str) -> Result<[u8; 3], ProcessError> {
    let bad = || ProcessError::new(key, "must be 6 hex digits");
    if value.len() != 6 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let byte = |i: usize| u8::from_str_radix(&value[i..i + 2], 16).map_err(|_| bad());
    Ok([byte(0)?, byte(2)?, byte(4)?])
}

fn parse_resize(params: &[&str], context: Context) -> Result<Resize, ProcessError> {
    let [m, w, h, l, s, p, main_p, limit, color] =
        key_values(params, ["m", "w", "h", "l", "s", "p", "P", "limit", "color"])?;
    let color = color.map(|c| parse_color("color", c)).transpose()?.unwrap_or([0xff, 0xff, 0xff]);
    let mode = match m {
        None | Some("lfit") => ResizeMode::Lfit,
        Some("mfit") => ResizeMode::Mfit,
        Some("fill") => ResizeMode::Fill,
        Some("pad") => ResizeMode::Pad { color },
        Some("fixed") => ResizeMode::Fixed,
        Some(_) => return Err(ProcessError::new("m", "must be lfit, mfit, fill, pad or fixed")),
    };
    let limit = match limit {
        None => None,
        Some("1") => Some(false),
        Some("0") => Some(true),
        Some(_) => return Err(ProcessError::new("limit", "must be 0 or 1")),
    };
    let p = p.map(|v| integer("p", v, 1, 1000, "must be an integer from 1 to 1000")).transpose()?;
    let main_p = match main_p {
        Some(_) if context == Context::Main => {
            return Err(ProcessError::new("P", "is allowed only in a watermark image's process"))
        }
        Some(v) => Some(integer("P", v, 1, 100, "must be an integer from 1 to 100")?),
        None => None,
    };
    let (w, h, l, s) = (side("w", w)?, side("h", h)?, side("l", l)?, side("s", s)?);
    // `p_` with sides multiplies them (OSS: `w_100,h_100,p_200` is `w_200,h_200`).
    let scale = |side: Option<Side>| -> Result<Option<Side>, ProcessError> {
        match (side, p) {
            (Some(s), Some(p)) => {
                let scaled = (u64::from(s.get()) * u64::from(p) + 50) / 100;
                let scaled = u32::try_from(scaled).unwrap_or(u32::MAX).max(1);
                Side::new(scaled)
                    .map(Some)
                    .ok_or_else(|| ProcessError::new("p", "makes a side larger than 16384"))
            }
            (side, _) => Ok(side),
        }
    };
    let target = match (w, h, l, s) {
        (Some(w), Some(h), _, _) => {
            Target::WidthHeight(scale(Some(w))?.expect("given"), scale(Some(h))?.expect("given"))
        }
        (Some(w), None, _, _) => Target::Width(scale(Some(w))?.expect("given")),
        (None, Some(h), _, _) => Target::Height(scale(Some(h))?.expect("given")),
        (None, None, Some(l), Some(s)) => {
            Target::LongestShortest(scale(Some(l))?.expect("given"), scale(Some(s))?.expect("given"))
        }
        (None, None, Some(l), None) => Target::Longest(scale(Some(l))?.expect("given")),
        (None, None, None, Some(s)) => Target::Shortest(scale(Some(s))?.expect("given")),
        (None, None, None, None) => match (p, main_p) {
            (Some(_), Some(_)) => return Err(ProcessError::new("P", "cannot be combined with p")),
            (Some(p), None) => Target::Percent(p as u16),
            (None, Some(pp)) => Target::MainPercent(pp as u8),
            (None, None) => return Err(ProcessError::new("resize", "needs at least one of w, h, l, s, p")),
        },
    };
    if main_p.is_some() && !matches!(target, Target::MainPercent(_)) {
        return Err(ProcessError::new("P", "cannot be combined with w, h, l or s"));
    }
    let enlarge = match (limit, target) {
        (Some(enlarge), _) => enlarge,
        (None, Target::Percent(p)) => p > 100,
        (None, _) => false,
    };
    Ok(Resize { mode, target, enlarge })
}

fn parse_crop(params: &[&str]) -> Result<Crop, ProcessError> {
    const SIDE: &str = "must be an integer from 0 to 16384";
    let [w, h, x, y, g] = key_values(params, ["w", "h", "x", "y", "g"])?;
    // `w_0`/`h_0` mean "to the edge", as an absent one does.
    let edge = |key: &str, v: Option<&str>| -> Result<Option<Side>, ProcessError> {
        match v {
            None => Ok(None),
            Some(v) => Ok(Side::new(integer(key, v, 0, MAX_SIDE, SIDE)?)),
        }
    };
    let offset = |key: &str, v: Option<&str>| -> Result<u16, ProcessError> {
        v.map_or(Ok(0), |v| integer(key, v, 0, MAX_SIDE, SIDE).map(|n| n as u16))
    };
    Ok(Crop {
        w: edge("w", w)?,
        h: edge("h", h)?,
        x: offset("x", x)?,
        y: offset("y", y)?,
        gravity: g.map_or(Ok(Gravity::NorthWest), |g| Gravity::parse("g", g))?,
    })
}

fn parse_indexcrop(params: &[&str]) -> Result<IndexCrop, ProcessError> {
    let [x, y, i] = key_values(params, ["x", "y", "i"])?;
    // Values first, then how they combine: a bad value is reported under its own name.
    let (x, y) = (side("x", x)?, side("y", y)?);
    let index = i.map_or(Ok(0), |i| integer("i", i, 0, MAX_SIDE, "must be an integer from 0 to 16384"))?;
    let (axis, len) = match (x, y) {
        (Some(x), None) => (Axis::X, x),
        (None, Some(y)) => (Axis::Y, y),
        (Some(_), Some(_)) => return Err(ProcessError::new("indexcrop", "takes x or y, not both")),
        (None, None) => return Err(ProcessError::new("indexcrop", "needs x or y")),
    };
    Ok(IndexCrop { axis, len, index: index as u16 })
}

fn parse_radius(name: &str, params: &[&str]) -> Result<u16, ProcessError> {
    let [r] = key_values(params, ["r"])?;
    let Some(r) = r else {
        return Err(ProcessError::new(name, "needs r"));
    };
    Ok(integer("r", r, 1, 4096, "must be an integer from 1 to 4096")? as u16)
}

fn parse_quality(params: &[&str]) -> Result<Quality, ProcessError> {
    const MESSAGE: &str = "must be an integer from 1 to 100";
    let [relative, absolute] = key_values(params, ["q", "Q"])?;
    let relative = relative.map(|v| integer("q", v, 1, 100, MESSAGE)).transpose()?;
    let absolute = absolute.map(|v| integer("Q", v, 1, 100, MESSAGE)).transpose()?;
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
        ["gif"] => Ok(OutputFormat::Gif),
        ["bmp"] => Ok(OutputFormat::Bmp),
        ["avif" | "heic" | "tiff"] => {
            Err(ProcessError::new("format", "avif, heic and tiff are not encoded here; use webp or jpg"))
        }
        [] => Err(ProcessError::new("format", "needs a format")),
        [_] => Err(ProcessError::new("format", "must be jpg, jpeg, png, webp, gif or bmp")),
        _ => Err(ProcessError::new("format", "takes exactly one format")),
    }
}
