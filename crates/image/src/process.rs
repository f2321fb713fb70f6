//! The strict grammar of `x-oss-process=image/...` and its canonical form.
//!
//! ```text
//! image/<action>[,<param>]*[/<action>[,<param>]*]*
//! resize          m_(lfit|mfit|fill|pad|fixed) w_ h_ l_ s_ (1..=16384) p_ (1..=1000) limit_(0|1) color_RRGGBB
//! crop            w_ h_ (0..=16384, 0: to the edge) x_ y_ (0..=16384) g_(nw|north|ne|west|center|east|sw|south|se)
//! indexcrop       x_|y_ (1..=16384) i_ (0..=16384)
//! circle          r_ (1..=4096)
//! rounded-corners r_ (1..=4096)
//! rotate          <0..=360>
//! auto-orient     <0|1>
//! blur            r_ (1..=50) s_ (1..=50)
//! bright          <-100..=100>
//! contrast        <-100..=100>
//! sharpen         <50..=399>
//! watermark       see [`watermark`]
//! format          jpg|jpeg|png|webp|gif|bmp
//! quality         q_ Q_ (1..=100)
//! interlace       <0|1>
//! info | average-hue   (last action only: a JSON answer instead of an image)
//! ```
//!
//! Pixel actions run in the order given and may repeat (`resize` then `crop` is not `crop` then
//! `resize`). `auto-orient`, `format`, `quality` and `interlace` are settings of the whole
//! render (OSS applies them wherever they stand), so each may appear once.
//!
//! Everything else is refused with a [`ProcessError`] naming the parameter: unknown actions
//! and parameters, repeats, empty values, numbers with signs (where none is allowed), leading
//! zeros or out of range. Being strict matters because the canonical string is part of a cache
//! key: a lenient parser would let one variant hide behind endless spellings, or let garbage
//! create cache entries.
//!
//! What OSS ignores is dropped while parsing, so that spellings with the same effect share
//! one value (and one cache entry): `l`/`s` when `w` or `h` is given, `color` unless `m_pad`,
//! `q` when `Q` is given, `auto-orient,0`, `interlace,0`, `rotate,0`. They are still validated.

use std::fmt::Write as _;
use std::str::FromStr;

pub mod watermark;

pub use watermark::{Watermark, WatermarkImage, WatermarkText};

/// The longest `x-oss-process` value accepted, in bytes. Text watermarks carry their text in
/// base64 (64 characters of CJK text are 256 bytes), so the cap leaves room for a few of them;
/// it bounds the work and the size of error messages.
pub const MAX_PROCESS_LEN: usize = 2048;

/// The largest `w`, `h`, `l` and `s` (OSS's limit).
pub const MAX_SIDE: u32 = 16384;

/// At most this many actions in one chain: the longest useful chains have five or six.
pub const MAX_ACTIONS: usize = 16;

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
    pub(crate) fn new(param: &str, message: &'static str) -> Self {
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

/// The sizes given to `resize`. Every variant names a size, so "no size" cannot be
/// represented. `l`/`s` only appear when neither `w` nor `h` was given (OSS ignores them
/// then); a `p_` given with sides is multiplied into them while parsing (OSS: `w_100,h_100,p_200`
/// is `w_200,h_200`).
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
    /// `p_` alone: both sides scaled by this percentage, 1..=1000.
    Percent(u16),
    /// `P_`, only in a watermark image's own process: a percentage (1..=100) of the main
    /// image's sides. The renderer turns it into a `Percent` of the watermark image.
    MainPercent(u8),
}

/// The `resize` action. Any combination of the fields is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resize {
    pub mode: ResizeMode,
    pub target: Target,
    /// `limit_0`: the image may be enlarged. `limit_1` (the default) keeps the original size
    /// whenever the resize would enlarge it. A `p_` above 100 without `limit_` enlarges, as
    /// OSS documents it ("a value greater than 100 scales the image up").
    pub enlarge: bool,
}

/// Where a `crop` or a watermark is anchored: OSS's nine-cell grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gravity {
    NorthWest,
    North,
    NorthEast,
    West,
    Center,
    East,
    SouthWest,
    South,
    SouthEast,
}

impl Gravity {
    pub(crate) const ALL: [(&'static str, Gravity); 9] = [
        ("nw", Gravity::NorthWest),
        ("north", Gravity::North),
        ("ne", Gravity::NorthEast),
        ("west", Gravity::West),
        ("center", Gravity::Center),
        ("east", Gravity::East),
        ("sw", Gravity::SouthWest),
        ("south", Gravity::South),
        ("se", Gravity::SouthEast),
    ];

    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(_, g)| *g == self).map(|(s, _)| *s).expect("every gravity is listed")
    }

    pub(crate) fn parse(key: &str, value: &str) -> Result<Self, ProcessError> {
        Self::ALL.iter().find(|(s, _)| *s == value).map(|(_, g)| *g).ok_or_else(|| {
            ProcessError::new(key, "must be nw, north, ne, west, center, east, sw, south or se")
        })
    }

    /// Column (0 left, 1 centre, 2 right) and row (0 top, 1 middle, 2 bottom).
    pub fn cell(self) -> (u8, u8) {
        match self {
            Gravity::NorthWest => (0, 0),
            Gravity::North => (1, 0),
            Gravity::NorthEast => (2, 0),
            Gravity::West => (0, 1),
            Gravity::Center => (1, 1),
            Gravity::East => (2, 1),
            Gravity::SouthWest => (0, 2),
            Gravity::South => (1, 2),
            Gravity::SouthEast => (2, 2),
        }
    }
}

/// The `crop` action. `w`/`h` of `None` reach the image's edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Crop {
    pub w: Option<Side>,
    pub h: Option<Side>,
    pub x: u16,
    pub y: u16,
    pub gravity: Gravity,
}

/// The `indexcrop` action: cut the image into slices `len` pixels long along `axis` and keep
/// slice `index` (the whole image when there is no such slice, as OSS does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IndexCrop {
    pub axis: Axis,
    pub len: Side,
    pub index: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Axis {
    /// `x_`: slices side by side, each `len` wide.
    X,
    /// `y_`: slices one above the other, each `len` high.
    Y,
}

/// One pixel action of a chain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    Resize(Resize),
    Crop(Crop),
    IndexCrop(IndexCrop),
    /// Radius 1..=4096.
    Circle(u16),
    /// Radius 1..=4096.
    RoundedCorners(u16),
    /// Degrees clockwise, 1..=359 (0 and 360 are dropped while parsing).
    Rotate(u16),
    /// Radius 1..=50 and standard deviation 1..=50.
    Blur {
        radius: u8,
        sigma: u8,
    },
    /// -100..=100, never 0 (dropped while parsing).
    Bright(i8),
    /// -100..=100, never 0.
    Contrast(i8),
    /// 50..=399.
    Sharpen(u16),
    Watermark(Box<Watermark>),
}

/// The `quality` action (JPEG and WebP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quality {
    /// `q_`: relative to the original's quality (a JPEG's, estimated from its quantisation
    /// tables); absolute for other originals, as OSS does.
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
    /// One frame (the first of an animation).
    Gif,
    Bmp,
}

impl OutputFormat {
    /// The spelling in the canonical string (`jpg`, as OSS writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            OutputFormat::Jpeg => "jpg",
            OutputFormat::Png => "png",
            OutputFormat::WebP => "webp",
            OutputFormat::Gif => "gif",
            OutputFormat::Bmp => "bmp",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            OutputFormat::Jpeg => "image/jpeg",
            OutputFormat::Png => "image/png",
            OutputFormat::WebP => "image/webp",
            OutputFormat::Gif => "image/gif",
            OutputFormat::Bmp => "image/bmp",
        }
    }

    /// Whether the format keeps transparency (JPEG and BMP are flattened onto white).
    pub fn has_alpha(self) -> bool {
        matches!(self, OutputFormat::Png | OutputFormat::WebP | OutputFormat::Gif)
    }
}

/// A JSON answer instead of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Report {
    /// `info`: size, format, dimensions and basic EXIF fields.
    Info,
    /// `average-hue`: `{"RGB": "0xRRGGBB"}`.
    AverageHue,
}

/// Settings of the encoder, wherever they stood in the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Output {
    pub format: Option<OutputFormat>,
    pub quality: Option<Quality>,
    /// `interlace,1`: progressive JPEG (other formats ignore it, as OSS does).
    pub interlace: bool,
}

/// A parsed, valid `x-oss-process=image/...` value: at least one action.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageProcess {
    auto_orient: bool,
    actions: Vec<Action>,
    output: Output,
    report: Option<Report>,
}

impl ImageProcess {
    /// The chain from its parts; `None` when it would do nothing at all to name (no action, no
    /// setting, no report) or has more than [`MAX_ACTIONS`] actions.
    pub fn new(
        auto_orient: bool,
        actions: Vec<Action>,
        output: Output,
        report: Option<Report>,
    ) -> Option<Self> {
        let empty = !auto_orient && actions.is_empty() && output == Output::default() && report.is_none();
        (!empty && actions.len() <= MAX_ACTIONS).then_some(Self { auto_orient, actions, output, report })
    }

    /// A chain of one resize (the common thumbnail).
    pub fn resize_only(resize: Resize) -> Self {
        Self {
            auto_orient: false,
            actions: vec![Action::Resize(resize)],
            output: Output::default(),
            report: None,
        }
    }

    pub fn auto_orient(&self) -> bool {
        self.auto_orient
    }

    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    pub fn output(&self) -> Output {
        self.output
    }

    pub fn report(&self) -> Option<Report> {
        self.report
    }

    /// Nothing to do but decode and encode again.
    pub fn is_plain_reencode(&self) -> bool {
        !self.auto_orient
            && self.actions.is_empty()
            && self.output == Output::default()
            && self.report.is_none()
    }

    /// The first resize of the chain, if any.
    pub fn resize(&self) -> Option<&Resize> {
        self.actions.iter().find_map(|a| match a {
            Action::Resize(r) => Some(r),
            _ => None,
        })
    }

    pub fn quality(&self) -> Option<Quality> {
        self.output.quality
    }

    pub fn format(&self) -> Option<OutputFormat> {
        self.output.format
    }

    /// The watermark images the chain needs, as object names relative to the bucket.
    pub fn watermark_objects(&self) -> Vec<&str> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::Watermark(w) => w.image.as_ref().map(|i| i.object.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The canonical spelling, for cache keys: `auto-orient,1` first when set, the pixel
    /// actions in their order, then `quality`, `format`, `interlace,1`, then the report.
    /// Within an action the parameters have a fixed order with defaults written where the
    /// grammar says so (`m` and `limit` of `resize`; `g` of `crop`); `jpeg` is written `jpg`,
    /// colours in lowercase hex, base64 without padding.
    ///
    /// Alphabet: `[a-z0-9_,/-]` plus the uppercase `Q` of `Q_` (absolute quality; `q_` and
    /// `Q_` mean different things in OSS) and the URL-safe base64 of watermarks. No character
    /// needs escaping in a URL. `parse(&p.canonical()) == Ok(p)` for every `p`.
    pub fn canonical(&self) -> String {
        let mut out = String::from("image");
        if self.auto_orient {
            out.push_str("/auto-orient,1");
        }
        if self.is_plain_reencode() {
            // Every action was a no-op (`rotate,0`, `bright,0`...): one spelling for them all.
            out.push_str("/auto-orient,0");
        }
        for action in &self.actions {
            out.push('/');
            write_action(&mut out, action);
        }
        match self.output.quality {
            Some(Quality::Relative(q)) => {
                let _ = write!(out, "/quality,q_{}", q.get());
            }
            Some(Quality::Absolute(q)) => {
                let _ = write!(out, "/quality,Q_{}", q.get());
            }
            None => {}
        }
        if let Some(f) = self.output.format {
            let _ = write!(out, "/format,{}", f.as_str());
        }
        if self.output.interlace {
            out.push_str("/interlace,1");
        }
        match self.report {
            Some(Report::Info) => out.push_str("/info"),
            Some(Report::AverageHue) => out.push_str("/average-hue"),
            None => {}
        }
        out
    }
}

pub(crate) fn write_action(out: &mut String, action: &Action) {
    match action {
        Action::Resize(r) => write_resize(out, r),
        Action::Crop(c) => {
            out.push_str("crop");
            if let Some(w) = c.w {
                let _ = write!(out, ",w_{}", w.get());
            }
            if let Some(h) = c.h {
                let _ = write!(out, ",h_{}", h.get());
            }
            let _ = write!(out, ",x_{},y_{},g_{}", c.x, c.y, c.gravity.as_str());
        }
        Action::IndexCrop(c) => {
            let axis = match c.axis {
                Axis::X => "x",
                Axis::Y => "y",
            };
            let _ = write!(out, "indexcrop,{axis}_{},i_{}", c.len.get(), c.index);
        }
        Action::Circle(r) => {
            let _ = write!(out, "circle,r_{r}");
        }
        Action::RoundedCorners(r) => {
            let _ = write!(out, "rounded-corners,r_{r}");
        }
        Action::Rotate(d) => {
            let _ = write!(out, "rotate,{d}");
        }
        Action::Blur { radius, sigma } => {
            let _ = write!(out, "blur,r_{radius},s_{sigma}");
        }
        Action::Bright(v) => {
            let _ = write!(out, "bright,{v}");
        }
        Action::Contrast(v) => {
            let _ = write!(out, "contrast,{v}");
        }
        Action::Sharpen(v) => {
            let _ = write!(out, "sharpen,{v}");
        }
        Action::Watermark(w) => w.write_canonical(out),
    }
}

fn write_resize(out: &mut String, r: &Resize) {
    let (m, color) = match r.mode {
        ResizeMode::Lfit => ("lfit", None),
        ResizeMode::Mfit => ("mfit", None),
        ResizeMode::Fill => ("fill", None),
        ResizeMode::Pad { color } => ("pad", Some(color)),
        ResizeMode::Fixed => ("fixed", None),
    };
    let _ = write!(out, "resize,m_{m}");
    let mut side = |key: &str, value: u32| {
        let _ = write!(out, ",{key}_{value}");
    };
    match r.target {
        Target::Width(w) => side("w", w.get()),
        Target::Height(h) => side("h", h.get()),
        Target::WidthHeight(w, h) => {
            side("w", w.get());
            side("h", h.get());
        }
        Target::Longest(l) => side("l", l.get()),
        Target::Shortest(s) => side("s", s.get()),
        Target::LongestShortest(l, s) => {
            side("l", l.get());
            side("s", s.get());
        }
        Target::Percent(p) => side("p", p.into()),
        Target::MainPercent(p) => side("P", p.into()),
    }
    let _ = write!(out, ",limit_{}", if r.enlarge { 0 } else { 1 });
    if let Some([r, g, b]) = color {
        let _ = write!(out, ",color_{r:02x}{g:02x}{b:02x}");
    }
}

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

#[cfg(test)]
mod tests;
