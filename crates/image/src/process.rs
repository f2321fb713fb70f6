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

mod canonical;
mod parse;

pub(crate) use canonical::write_action;
pub use parse::parse;
pub(crate) use parse::{integer, key_values, parse_color, parse_with, signed, Context};

#[cfg(test)]
mod tests;
