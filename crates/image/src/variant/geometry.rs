//! Sizes of a resize, decided from the source size alone, before any pixel is touched, so
//! the output budget can be checked first.
//!
//! OSS semantics (alibabacloud.com/help/en/doc-detail/44688.html; the box rules as the
//! compatible Volcengine TOS doc spells them out):
//!
//! * the box: `w`×`h` when both are given. With one of them, `lfit`/`mfit`/`fixed` scale
//!   proportionally to it and `fill`/`pad` use a square box. Without `w`/`h`, `l`/`s` work
//!   the same way, the longest side (`l`) and shortest side (`s`) of the box being laid on
//!   the source's own longest and shortest sides (width when the source is square).
//! * `lfit`: largest proportional size inside the box; `mfit`: smallest covering it; `fill`:
//!   `mfit` cut to the box around the centre; `pad`: `lfit` centred on a box-sized canvas;
//!   `fixed`: the box.
//! * `limit_1`: when the scaled image (before a `fill` crop or a `pad` canvas) would be larger
//!   than the source along either axis, the source size is kept and nothing is cropped or
//!   padded, as OSS returns the image at its original resolution.
//!
//! Fractions are rounded half up; no side is ever below 1 px. Arithmetic is in `u64`: an
//! `mfit` of a 1-px-high source can ask for sides far beyond `u32`.

use crate::process::{Resize, ResizeMode, Target};

/// A rectangle in source pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rect {
    pub(crate) x: u64,
    pub(crate) y: u64,
    pub(crate) w: u64,
    pub(crate) h: u64,
}

/// What happens to the (oriented) source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// The source size is kept: no resize, or `limit_1` refused to enlarge.
    Keep,
    /// Resample the whole source to `w`×`h`.
    Scale { w: u64, h: u64 },
    /// Cut `crop` out of the source, then resample it to `w`×`h`. Cropping first (rather than
    /// scaling to the `mfit` size and cropping after, as OSS describes it) gives the same
    /// picture without materialising the possibly huge `mfit` intermediate.
    Fill { crop: Rect, w: u64, h: u64 },
    /// Resample the source to `inner_w`×`inner_h` and centre it on a `w`×`h` canvas.
    Pad { inner_w: u64, inner_h: u64, w: u64, h: u64, color: [u8; 3] },
}

impl Plan {
    /// The output size for a source of `src`.
    pub(crate) fn output_size(&self, src: (u32, u32)) -> (u64, u64) {
        match *self {
            Plan::Keep => (u64::from(src.0), u64::from(src.1)),
            Plan::Scale { w, h } | Plan::Fill { w, h, .. } | Plan::Pad { w, h, .. } => (w, h),
        }
    }
}

/// `a / b` rounded half up, at least 1. `b` is never 0 here: sides are at least 1.
fn div_round(a: u64, b: u64) -> u64 {
    ((a + b / 2) / b).max(1)
}

/// The box to resize into, or the final size when one side alone decides it.
enum Frame {
    Box(u64, u64),
    Proportional(u64, u64),
}

fn frame(src: (u64, u64), mode: ResizeMode, target: Target) -> Frame {
    let (sw, sh) = src;
    let square = matches!(mode, ResizeMode::Fill | ResizeMode::Pad { .. });
    let by_width = |w: u64| {
        if square {
            Frame::Box(w, w)
        } else {
            Frame::Proportional(w, div_round(sh * w, sw))
        }
    };
    let by_height = |h: u64| {
        if square {
            Frame::Box(h, h)
        } else {
            Frame::Proportional(div_round(sw * h, sh), h)
        }
    };
    let landscape = sw >= sh;
    match target {
        Target::WidthHeight(w, h) => Frame::Box(w.get().into(), h.get().into()),
        Target::Width(w) => by_width(w.get().into()),
        Target::Height(h) => by_height(h.get().into()),
        Target::LongestShortest(l, s) if landscape => Frame::Box(l.get().into(), s.get().into()),
        Target::LongestShortest(l, s) => Frame::Box(s.get().into(), l.get().into()),
        Target::Longest(l) if landscape => by_width(l.get().into()),
        Target::Longest(l) => by_height(l.get().into()),
        Target::Shortest(s) if landscape => by_height(s.get().into()),
        Target::Shortest(s) => by_width(s.get().into()),
        // `p_` scales both sides, whatever the mode (OSS: a percentage has no box).
        Target::Percent(p) => {
            let p = u64::from(p);
            Frame::Proportional(div_round(sw * p, 100), div_round(sh * p, 100))
        }
        // Resolved by the renderer against the main image before planning; as given, a no-op.
        Target::MainPercent(_) => Frame::Proportional(sw, sh),
    }
}

/// Largest proportional size inside `bw`×`bh`.
fn fit_inside(src: (u64, u64), bw: u64, bh: u64) -> (u64, u64) {
    let (sw, sh) = src;
    // bw/sw <= bh/sh: the width is what binds.
    if bw * sh <= bh * sw {
        (bw, div_round(sh * bw, sw))
    } else {
        (div_round(sw * bh, sh), bh)
    }
}

/// Smallest proportional size covering `bw`×`bh`.
fn cover(src: (u64, u64), bw: u64, bh: u64) -> (u64, u64) {
    let (sw, sh) = src;
    if bw * sh >= bh * sw {
        (bw, div_round(sh * bw, sw))
    } else {
        (div_round(sw * bh, sh), bh)
    }
}

/// The centred part of the source with the aspect ratio of `bw`×`bh`.
fn centre_crop(src: (u64, u64), bw: u64, bh: u64) -> Rect {
    let (sw, sh) = src;
    if bw * sh >= bh * sw {
        let h = div_round(bh * sw, bw).min(sh);
        Rect { x: 0, y: (sh - h) / 2, w: sw, h }
    } else {
        let w = div_round(bw * sh, bh).min(sw);
        Rect { x: (sw - w) / 2, y: 0, w, h: sh }
    }
}

/// The plan for `resize` on a source of `src` (both sides at least 1).
pub(crate) fn plan(src: (u32, u32), resize: &Resize) -> Plan {
    let src = (u64::from(src.0.max(1)), u64::from(src.1.max(1)));
    let (plan, scaled) = match (frame(src, resize.mode, resize.target), resize.mode) {
        (Frame::Proportional(w, h), _) => (Plan::Scale { w, h }, (w, h)),
        (Frame::Box(bw, bh), ResizeMode::Lfit) => {
            let (w, h) = fit_inside(src, bw, bh);
            (Plan::Scale { w, h }, (w, h))
        }
        (Frame::Box(bw, bh), ResizeMode::Mfit) => {
            let (w, h) = cover(src, bw, bh);
            (Plan::Scale { w, h }, (w, h))
        }
        (Frame::Box(bw, bh), ResizeMode::Fixed) => (Plan::Scale { w: bw, h: bh }, (bw, bh)),
        (Frame::Box(bw, bh), ResizeMode::Fill) => {
            let crop = centre_crop(src, bw, bh);
            (Plan::Fill { crop, w: bw, h: bh }, cover(src, bw, bh))
        }
        (Frame::Box(bw, bh), ResizeMode::Pad { color }) => {
            let (inner_w, inner_h) = fit_inside(src, bw, bh);
            (Plan::Pad { inner_w, inner_h, w: bw, h: bh, color }, (inner_w, inner_h))
        }
    };
    let enlarges = scaled.0 > src.0 || scaled.1 > src.1;
    if enlarges && !resize.enlarge {
        return Plan::Keep;
    }
    match plan {
        Plan::Scale { w, h } if (w, h) == src => Plan::Keep,
        plan => plan,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{parse, Side};
    use proptest::prelude::*;

    fn size(src: (u32, u32), ops: &str) -> (u64, u64) {
        let ops = parse(ops).unwrap();
        plan(src, ops.resize().unwrap()).output_size(src)
    }

    #[test]
    fn the_oss_example() {
        // Source 200×100, w=150, h=80 (alibabacloud.com/help/en/doc-detail/44688.html).
        let src = (200, 100);
        assert_eq!(size(src, "image/resize,m_lfit,w_150,h_80"), (150, 75));
        assert_eq!(size(src, "image/resize,m_mfit,w_150,h_80"), (160, 80));
        assert_eq!(size(src, "image/resize,m_fill,w_150,h_80"), (150, 80));
        assert_eq!(size(src, "image/resize,m_pad,w_150,h_80"), (150, 80));
        assert_eq!(size(src, "image/resize,m_fixed,w_150,h_80"), (150, 80));
        let ops = parse("image/resize,m_pad,w_150,h_80").unwrap();
        assert_eq!(
            plan(src, ops.resize().unwrap()),
            Plan::Pad { inner_w: 150, inner_h: 75, w: 150, h: 80, color: [255; 3] }
        );
        let ops = parse("image/resize,m_fill,w_150,h_80").unwrap();
        assert_eq!(
            plan(src, ops.resize().unwrap()),
            // 160×80 cut to 150 wide = 187.5 → 188 source columns, centred.
            Plan::Fill { crop: Rect { x: 6, y: 0, w: 188, h: 100 }, w: 150, h: 80 }
        );
    }

    #[test]
    fn the_baidu_examples() {
        // Source 600×400 (cloud.baidu.com/doc/BOS/s/3ldh5wqnw, same semantics).
        let src = (600, 400);
        assert_eq!(size(src, "image/resize,w_500,h_300"), (450, 300));
        assert_eq!(size(src, "image/resize,w_900,h_800,limit_0"), (900, 600));
        assert_eq!(size(src, "image/resize,m_mfit,w_500,h_300"), (500, 333));
        assert_eq!(size(src, "image/resize,m_mfit,w_900,h_800,limit_0"), (1200, 800));
    }

    #[test]
    fn one_side_and_long_short_sides() {
        let src = (400, 200);
        assert_eq!(size(src, "image/resize,w_100"), (100, 50));
        assert_eq!(size(src, "image/resize,h_100"), (200, 100));
        assert_eq!(size(src, "image/resize,w_100,m_mfit"), (100, 50));
        assert_eq!(size(src, "image/resize,w_100,m_fixed"), (100, 50));
        assert_eq!(size(src, "image/resize,w_100,m_fill"), (100, 100));
        assert_eq!(size(src, "image/resize,h_100,m_pad"), (100, 100));
        assert_eq!(size(src, "image/resize,l_100"), (100, 50));
        assert_eq!(size(src, "image/resize,s_100"), (200, 100));
        assert_eq!(size((200, 400), "image/resize,l_100"), (50, 100));
        assert_eq!(size((200, 400), "image/resize,s_100"), (100, 200));
        assert_eq!(size(src, "image/resize,l_100,s_100"), (100, 50));
        assert_eq!(size((200, 400), "image/resize,l_100,s_30,m_fixed"), (30, 100));
        assert_eq!(size(src, "image/resize,l_100,m_fill"), (100, 100));
        // l/s are ignored next to w/h.
        assert_eq!(size(src, "image/resize,w_100,l_10"), (100, 50));
        // Rounding: 333 × 100 / 1000 = 33.3 → 33, 335 → 33.5 → 34, never 0.
        assert_eq!(size((1000, 333), "image/resize,w_100"), (100, 33));
        assert_eq!(size((1000, 335), "image/resize,w_100"), (100, 34));
        assert_eq!(size((10000, 1), "image/resize,w_100"), (100, 1));
    }

    #[test]
    fn limit_keeps_the_source_size_instead_of_enlarging() {
        let src = (200, 100);
        for ops in [
            "image/resize,w_400",
            "image/resize,w_300,h_300",
            "image/resize,m_mfit,w_250,h_10",
            "image/resize,m_fixed,w_100,h_101",
            "image/resize,m_fill,w_100,h_120",
            "image/resize,m_pad,w_300,h_300",
        ] {
            let resize = *parse(ops).unwrap().resize().unwrap();
            assert_eq!(plan(src, &resize), Plan::Keep, "{ops}");
            let enlarged = Resize { enlarge: true, ..resize };
            assert_ne!(plan(src, &enlarged), Plan::Keep, "{ops} limit_0");
        }
        assert_eq!(size(src, "image/resize,w_400,limit_0"), (400, 200));
        // Padding onto a taller canvas is not enlarging: the picture itself shrinks.
        assert_eq!(size(src, "image/resize,m_pad,w_150,h_150"), (150, 150));
        // The same size is a no-op.
        assert_eq!(plan(src, parse("image/resize,w_200").unwrap().resize().unwrap()), Plan::Keep);
    }

    #[test]
    fn huge_mfit_does_not_overflow() {
        assert_eq!(
            size((1, u32::MAX), "image/resize,m_mfit,w_16384,h_16384,limit_0"),
            (16384, 16384 * u64::from(u32::MAX))
        );
    }

    fn arb_resize() -> impl Strategy<Value = Resize> {
        let side = (1u32..=16384).prop_map(|n| Side::new(n).unwrap());
        let mode = prop_oneof![
            Just(ResizeMode::Lfit),
            Just(ResizeMode::Mfit),
            Just(ResizeMode::Fill),
            Just(ResizeMode::Pad { color: [0; 3] }),
            Just(ResizeMode::Fixed),
        ];
        let target = prop_oneof![
            side.clone().prop_map(Target::Width),
            side.clone().prop_map(Target::Height),
            (side.clone(), side.clone()).prop_map(|(w, h)| Target::WidthHeight(w, h)),
            side.clone().prop_map(Target::Longest),
            side.clone().prop_map(Target::Shortest),
            (side.clone(), side).prop_map(|(l, s)| Target::LongestShortest(l, s)),
        ];
        (mode, target, any::<bool>()).prop_map(|(mode, target, enlarge)| Resize { mode, target, enlarge })
    }

    proptest! {
        #[test]
        fn plans_are_sane(sw in 1u32..=20000, sh in 1u32..=20000, resize in arb_resize()) {
            let p = plan((sw, sh), &resize);
            let (w, h) = p.output_size((sw, sh));
            prop_assert!(w >= 1 && h >= 1);
            if !resize.enlarge {
                match p {
                    Plan::Keep => {}
                    Plan::Scale { w, h } => prop_assert!(w <= sw.into() && h <= sh.into()),
                    Plan::Fill { crop, .. } => prop_assert!(crop.w >= w && crop.h >= h),
                    Plan::Pad { inner_w, inner_h, .. } => {
                        prop_assert!(inner_w <= sw.into() && inner_h <= sh.into());
                    }
                }
            }
            match p {
                Plan::Fill { crop, .. } => {
                    prop_assert!(crop.w >= 1 && crop.h >= 1);
                    prop_assert!(crop.x + crop.w <= sw.into() && crop.y + crop.h <= sh.into());
                }
                Plan::Pad { inner_w, inner_h, w, h, .. } => {
                    prop_assert!(inner_w >= 1 && inner_h >= 1 && inner_w <= w && inner_h <= h);
                }
                _ => {}
            }
            if let (Target::WidthHeight(bw, bh), Plan::Scale { w, h }) = (resize.target, p) {
                let (bw, bh) = (u64::from(bw.get()), u64::from(bh.get()));
                match resize.mode {
                    ResizeMode::Lfit => prop_assert!(w <= bw && h <= bh && (w == bw || h == bh)),
                    ResizeMode::Mfit => prop_assert!(w >= bw && h >= bh && (w == bw || h == bh)),
                    ResizeMode::Fixed => prop_assert_eq!((w, h), (bw, bh)),
                    _ => prop_assert!(false, "fill and pad never plan a plain scale"),
                }
            }
        }
    }
}
