//! The canonical spelling of an action (part of a variant's cache key).

use std::fmt::Write as _;

use super::{Action, Axis, Resize, ResizeMode, Target};

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
