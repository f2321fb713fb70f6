use super::*;
use proptest::prelude::*;

fn side(n: u32) -> Side {
    Side::new(n).unwrap()
}

fn pct(n: u32) -> Percent {
    Percent::new(n).unwrap()
}

fn ops(resize: Option<Resize>, quality: Option<Quality>, format: Option<OutputFormat>) -> ImageProcess {
    let actions = resize.map(Action::Resize).into_iter().collect();
    ImageProcess::new(false, actions, Output { format, quality, interlace: false }, None).unwrap()
}

#[test]
fn parses_the_documented_examples() {
    assert_eq!(
        parse("image/resize,m_lfit,w_260,h_470").unwrap(),
        ops(
            Some(Resize {
                mode: ResizeMode::Lfit,
                target: Target::WidthHeight(side(260), side(470)),
                enlarge: false
            }),
            None,
            None
        )
    );
    assert_eq!(
        parse("image/resize,w_200/format,webp").unwrap(),
        ops(
            Some(Resize { mode: ResizeMode::Lfit, target: Target::Width(side(200)), enlarge: false }),
            None,
            Some(OutputFormat::WebP)
        )
    );
    assert_eq!(
        parse("image/format,jpg/quality,Q_30").unwrap(),
        ops(None, Some(Quality::Absolute(pct(30))), Some(OutputFormat::Jpeg))
    );
    assert_eq!(
        parse("image/resize,l_300,limit_0/quality,q_80").unwrap(),
        ops(
            Some(Resize { mode: ResizeMode::Lfit, target: Target::Longest(side(300)), enlarge: true }),
            Some(Quality::Relative(pct(80))),
            None
        )
    );
    assert_eq!(
        parse("image/resize,m_pad,w_100,h_50,color_FF0080").unwrap().resize().unwrap().mode,
        ResizeMode::Pad { color: [0xff, 0x00, 0x80] }
    );
    assert_eq!(
        parse("image/resize,m_pad,s_10").unwrap().resize().unwrap().mode,
        ResizeMode::Pad { color: [0xff; 3] },
        "the pad colour defaults to white"
    );
    assert_eq!(
        parse("image/resize,s_10,l_20").unwrap().resize().unwrap().target,
        Target::LongestShortest(side(20), side(10))
    );
    assert_eq!(parse("image/resize,w_16384").unwrap().resize().unwrap().target, Target::Width(side(16384)));
    assert_eq!(parse("image/resize,h_1").unwrap().resize().unwrap().target, Target::Height(side(1)));
}

#[test]
fn canonical_strings() {
    let cases = [
        ("image/resize,m_lfit,w_260,h_470", "image/resize,m_lfit,w_260,h_470,limit_1"),
        ("image/resize,w_200/format,webp", "image/resize,m_lfit,w_200,limit_1/format,webp"),
        ("image/format,jpeg/quality,Q_30", "image/quality,Q_30/format,jpg"),
        ("image/resize,l_300,limit_0/quality,q_80", "image/resize,m_lfit,l_300,limit_0/quality,q_80"),
        ("image/resize,m_pad,h_5,w_7", "image/resize,m_pad,w_7,h_5,limit_1,color_ffffff"),
        ("image/resize,color_00AAff,m_pad,w_7", "image/resize,m_pad,w_7,limit_1,color_00aaff"),
        ("image/resize,m_fill,s_9,l_10", "image/resize,m_fill,l_10,s_9,limit_1"),
        ("image/quality,q_10,Q_20", "image/quality,Q_20"),
    ];
    for (raw, canonical) in cases {
        assert_eq!(parse(raw).unwrap().canonical(), canonical, "{raw}");
    }
}

#[test]
fn canonical_ignores_order_spelling_and_ignored_parameters() {
    let same = [
        // Parameter order, defaults written or not, `m` anywhere.
        [
            "image/resize,h_470,w_260",
            "image/resize,w_260,h_470,m_lfit",
            "image/resize,limit_1,m_lfit,h_470,w_260",
        ],
        // Action order and jpeg/jpg.
        [
            "image/resize,w_9/quality,Q_5/format,jpg",
            "image/format,jpeg/quality,Q_5/resize,w_9",
            "image/quality,Q_5/format,jpg/resize,w_9,m_lfit",
        ],
        // What OSS ignores: l/s next to w/h, color outside pad, q next to Q.
        [
            "image/resize,w_9,l_100/quality,Q_5",
            "image/resize,s_3,w_9,color_000000/quality,q_50,Q_5",
            "image/resize,w_9,l_1,s_2/quality,Q_5",
        ],
        // The pad colour's case.
        [
            "image/resize,m_pad,w_1,color_ABCDEF",
            "image/resize,m_pad,w_1,color_abcdef",
            "image/resize,color_aBcDeF,w_1,m_pad",
        ],
    ];
    for group in same {
        let first = parse(group[0]).unwrap();
        for raw in group {
            let other = parse(raw).unwrap();
            assert_eq!(other, first, "{raw}");
            assert_eq!(other.canonical(), first.canonical(), "{raw}");
        }
    }
    // And different effects stay apart.
    let different = [
        "image/resize,w_9",
        "image/resize,w_9,limit_0",
        "image/resize,w_9,m_mfit",
        "image/resize,h_9",
        "image/resize,l_9",
        "image/resize,s_9",
        "image/resize,w_9,m_pad",
        "image/resize,w_9,m_pad,color_000000",
        "image/quality,q_9",
        "image/quality,Q_9",
        "image/format,png",
    ];
    let canon: std::collections::HashSet<_> =
        different.iter().map(|raw| parse(raw).unwrap().canonical()).collect();
    assert_eq!(canon.len(), different.len());
}

#[test]
fn refuses_bad_input_naming_the_parameter() {
    let long = format!("image/resize,w_1{}", ",limit_1".repeat(260));
    let cases: &[(&str, &str)] = &[
        // Structure.
        ("", "x-oss-process"),
        ("image", "x-oss-process"),
        ("image/", "x-oss-process"),
        ("Image/resize,w_1", "x-oss-process"),
        ("video/snapshot,t_1", "x-oss-process"),
        ("/image/resize,w_1", "x-oss-process"),
        ("image/resize,w_1/", "x-oss-process"),
        ("image//resize,w_1", "x-oss-process"),
        ("image/,w_1", "x-oss-process"),
        (&long, "x-oss-process"),
        // Actions.
        ("image/crop,w_1,w_2", "w"),
        ("image/Resize,w_1", "Resize"),
        ("image/quality,Q_1/quality,Q_2", "quality"),
        ("image/format,png/format,png", "format"),
        ("image/resize", "resize"),
        ("image/resize,limit_0", "resize"),
        ("image/resize,m_pad", "resize"),
        ("image/resize,w_1,", "resize"),
        ("image/resize,,w_1", "resize"),
        ("image/quality", "quality"),
        ("image/quality,lossless", "lossless"),
        ("image/format", "format"),
        ("image/format,tiff", "format"),
        ("image/format,JPG", "format"),
        ("image/format,png,jpg", "format"),
        ("image/format,", "format"),
        // Parameters.
        ("image/resize,p_1001", "p"),
        ("image/resize,W_50", "W"),
        ("image/resize,w50", "w50"),
        ("image/resize,w_1,w_2", "w"),
        ("image/resize,w_1,m_fill,m_fill", "m"),
        ("image/resize,w_", "w"),
        ("image/resize,w_0", "w"),
        ("image/resize,w_16385", "w"),
        ("image/resize,w_99999999999", "w"),
        ("image/resize,w_010", "w"),
        ("image/resize,w_+10", "w"),
        ("image/resize,w_-10", "w"),
        ("image/resize,w_1 ", "w"),
        ("image/resize,w_1.5", "w"),
        ("image/resize,w_١٢", "w"),
        ("image/resize,h_0", "h"),
        ("image/resize,l_x", "l"),
        ("image/resize,s_20000", "s"),
        // Ignored parameters are still validated.
        ("image/resize,w_1,l_0", "l"),
        ("image/resize,w_1,color_fff", "color"),
        ("image/resize,m_pad,w_1,color_gggggg", "color"),
        ("image/resize,m_pad,w_1,color_+fffff", "color"),
        ("image/resize,m_LFIT,w_1", "m"),
        ("image/resize,m_,w_1", "m"),
        ("image/resize,m_crop,w_1", "m"),
        ("image/resize,w_1,limit_2", "limit"),
        ("image/resize,w_1,limit_01", "limit"),
        ("image/resize,w_1,limit_", "limit"),
        ("image/quality,q_0", "q"),
        ("image/quality,q_101", "q"),
        ("image/quality,Q_0", "Q"),
        ("image/quality,Q_100,q_1000", "q"),
        ("image/quality,q_50,q_60", "q"),
        ("image/quality,Q_050", "Q"),
        ("image/quality,x_5", "x"),
    ];
    for (raw, param) in cases {
        match parse(raw) {
            Ok(ok) => panic!("{raw:?} parsed as {ok:?}"),
            Err(e) => assert_eq!(e.param, *param, "{raw:?}: {e}"),
        }
    }
}

#[test]
fn error_messages_are_clear_and_bounded() {
    let e = parse("image/resize,w_0").unwrap_err();
    assert_eq!(e, ProcessError { param: "w".into(), message: "must be an integer from 1 to 16384" });
    assert_eq!(e.to_string(), "invalid x-oss-process parameter w: must be an integer from 1 to 16384");
    let e = parse(&format!("image/{}", "x".repeat(300))).unwrap_err();
    assert_eq!(e.param, "x".repeat(32));
    // Cutting respects UTF-8 boundaries.
    let e = parse(&format!("image/{}", "é".repeat(40))).unwrap_err();
    assert_eq!(e.param, "é".repeat(32));
}

#[test]
fn the_length_cap_is_exactly_2048_bytes() {
    // Build a 512-byte value that fails only on grammar, and a 513-byte one that fails on
    // length: the error parameter tells which check fired.
    let at = format!("image/{}", "a".repeat(MAX_PROCESS_LEN - 6));
    assert_eq!(at.len(), MAX_PROCESS_LEN);
    assert_eq!(parse(&at).unwrap_err().param, "a".repeat(32));
    let over = format!("image/{}", "a".repeat(MAX_PROCESS_LEN - 5));
    assert_eq!(parse(&over).unwrap_err().param, "x-oss-process");
}

// --- properties ---

fn arb_side() -> impl Strategy<Value = Side> {
    prop_oneof![1u32..=16384, Just(1u32), Just(16384u32)].prop_map(side)
}

fn arb_resize() -> impl Strategy<Value = Resize> {
    let mode = prop_oneof![
        Just(ResizeMode::Lfit),
        Just(ResizeMode::Mfit),
        Just(ResizeMode::Fill),
        any::<[u8; 3]>().prop_map(|color| ResizeMode::Pad { color }),
        Just(ResizeMode::Fixed),
    ];
    let target = prop_oneof![
        arb_side().prop_map(Target::Width),
        arb_side().prop_map(Target::Height),
        (arb_side(), arb_side()).prop_map(|(w, h)| Target::WidthHeight(w, h)),
        arb_side().prop_map(Target::Longest),
        arb_side().prop_map(Target::Shortest),
        (arb_side(), arb_side()).prop_map(|(l, s)| Target::LongestShortest(l, s)),
    ];
    (mode, target, any::<bool>()).prop_map(|(mode, target, enlarge)| Resize { mode, target, enlarge })
}

fn arb_ops() -> impl Strategy<Value = ImageProcess> {
    let quality = prop_oneof![
        (1u32..=100).prop_map(|q| Quality::Relative(pct(q))),
        (1u32..=100).prop_map(|q| Quality::Absolute(pct(q))),
    ];
    let format = prop_oneof![Just(OutputFormat::Jpeg), Just(OutputFormat::Png), Just(OutputFormat::WebP)];
    (proptest::option::of(arb_resize()), proptest::option::of(quality), proptest::option::of(format))
        .prop_filter_map("at least one action", |(r, q, f)| {
            let actions = r.map(Action::Resize).into_iter().collect();
            ImageProcess::new(false, actions, Output { format: f, quality: q, interlace: false }, None)
        })
}

/// Another spelling of `ops` with the same meaning: parameters and actions shuffled, defaults
/// omitted or written, `jpeg` for `jpg`, colour case changed, ignored parameters added.
fn respell(ops: &ImageProcess, seed: u64) -> String {
    let mut rng = seed;
    let mut coin = move || {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (rng >> 33) & 1 == 1
    };
    let mut actions = Vec::new();
    if let Some(r) = ops.resize() {
        let mut p = Vec::new();
        match r.mode {
            ResizeMode::Lfit if coin() => {}
            ResizeMode::Lfit => p.push("m_lfit".to_owned()),
            ResizeMode::Mfit => p.push("m_mfit".to_owned()),
            ResizeMode::Fill => p.push("m_fill".to_owned()),
            ResizeMode::Fixed => p.push("m_fixed".to_owned()),
            ResizeMode::Pad { color: [r, g, b] } => {
                p.push("m_pad".to_owned());
                if [r, g, b] != [0xff; 3] || coin() {
                    p.push(format!("color_{r:02X}{g:02x}{b:02X}"));
                }
            }
        }
        if !matches!(r.mode, ResizeMode::Pad { .. }) && coin() {
            p.push("color_123abc".to_owned());
        }
        let wh = match r.target {
            Target::Width(w) => vec![format!("w_{}", w.get())],
            Target::Height(h) => vec![format!("h_{}", h.get())],
            Target::WidthHeight(w, h) => vec![format!("w_{}", w.get()), format!("h_{}", h.get())],
            Target::Longest(l) => vec![format!("l_{}", l.get())],
            Target::Shortest(s) => vec![format!("s_{}", s.get())],
            Target::LongestShortest(l, s) => vec![format!("l_{}", l.get()), format!("s_{}", s.get())],
            Target::Percent(p) => vec![format!("p_{p}")],
            Target::MainPercent(p) => vec![format!("P_{p}")],
        };
        let has_wh = matches!(r.target, Target::Width(_) | Target::Height(_) | Target::WidthHeight(..));
        p.extend(wh);
        if has_wh && coin() {
            p.push("l_77".to_owned());
        }
        if r.enlarge {
            p.push("limit_0".to_owned());
        } else if coin() {
            p.push("limit_1".to_owned());
        }
        if coin() {
            p.reverse();
        }
        if coin() && p.len() > 1 {
            p.rotate_left(1);
        }
        actions.push(format!("resize,{}", p.join(",")));
    }
    match ops.quality() {
        Some(Quality::Relative(q)) => actions.push(format!("quality,q_{}", q.get())),
        Some(Quality::Absolute(q)) if coin() => actions.push(format!("quality,q_9,Q_{}", q.get())),
        Some(Quality::Absolute(q)) => actions.push(format!("quality,Q_{}", q.get())),
        None => {}
    }
    match ops.format() {
        Some(OutputFormat::Jpeg) if coin() => actions.push("format,jpeg".to_owned()),
        Some(f) => actions.push(format!("format,{}", f.as_str())),
        None => {}
    }
    if coin() {
        actions.reverse();
    }
    format!("image/{}", actions.join("/"))
}

/// Strings over the grammar's own alphabet and tokens, so that the fuzzing reaches deep into
/// the parser rather than failing on the prefix.
fn grammar_soup() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("/"),
        Just(","),
        Just("_"),
        Just("resize"),
        Just("quality"),
        Just("format"),
        Just("m"),
        Just("w"),
        Just("h"),
        Just("l"),
        Just("s"),
        Just("q"),
        Just("Q"),
        Just("limit"),
        Just("color"),
        Just("lfit"),
        Just("pad"),
        Just("jpg"),
        Just("webp"),
        Just("0"),
        Just("1"),
        Just("16384"),
        Just("16385"),
        Just("99999999999999999999"),
        Just("+"),
        Just("-"),
        Just("ff00FF"),
        Just("é"),
        Just("\u{0}"),
        Just("crop"),
        Just("indexcrop"),
        Just("circle"),
        Just("rounded-corners"),
        Just("rotate"),
        Just("auto-orient"),
        Just("blur"),
        Just("bright"),
        Just("contrast"),
        Just("sharpen"),
        Just("watermark"),
        Just("interlace"),
        Just("info"),
        Just("average-hue"),
        Just("style"),
        Just("text"),
        Just("image"),
        Just("SGk"),
        Just("YS5wbmc="),
        Just("g"),
        Just("se"),
        Just("x"),
        Just("y"),
        Just("i"),
        Just("r"),
        Just("p"),
        Just("P"),
        Just("t"),
        Just("voffset"),
        Just("-100"),
        Just("360"),
        Just("gif"),
    ];
    proptest::collection::vec(token, 0..40).prop_map(|tokens| format!("image/{}", tokens.concat()))
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_strings(raw in any::<String>()) {
        let _ = parse(&raw);
        let _ = parse(&format!("image/{raw}"));
    }

    #[test]
    fn never_panics_on_grammar_soup(raw in grammar_soup()) {
        if let Ok(ops) = parse(&raw) {
            // Whatever parses has a canonical form that parses back to it.
            prop_assert_eq!(parse(&ops.canonical()), Ok(ops.clone()));
        }
    }

    #[test]
    fn canonical_round_trips(ops in arb_ops()) {
        let canonical = ops.canonical();
        prop_assert!(canonical.len() <= MAX_PROCESS_LEN);
        prop_assert!(
            canonical.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b',' | b'/' | b'Q')),
            "alphabet: {}", canonical
        );
        let reparsed = parse(&canonical);
        prop_assert_eq!(reparsed.clone(), Ok(ops.clone()));
        prop_assert_eq!(reparsed.unwrap().canonical(), canonical);
    }

    #[test]
    fn every_spelling_has_the_same_canonical(ops in arb_ops(), seed in any::<u64>()) {
        let raw = respell(&ops, seed);
        let parsed = parse(&raw);
        prop_assert_eq!(parsed.clone(), Ok(ops.clone()), "{}", raw);
        prop_assert_eq!(parsed.unwrap().canonical(), ops.canonical());
    }
}

// --- every action and parameter: minimums, maximums, defaults ---

/// `(value, parameter named in the error)` for the first out-of-range value below and above.
fn refused(raw: &str) -> String {
    match parse(raw) {
        Ok(ok) => panic!("{raw:?} parsed as {ok:?}"),
        Err(e) => e.param,
    }
}

#[test]
fn numeric_parameters_accept_their_range_and_refuse_past_it() {
    // (template with {} for the value, parameter, minimum, maximum)
    let cases: &[(&str, &str, i64, i64)] = &[
        ("image/resize,w_{}", "w", 1, 16384),
        ("image/resize,h_{}", "h", 1, 16384),
        ("image/resize,l_{}", "l", 1, 16384),
        ("image/resize,s_{}", "s", 1, 16384),
        ("image/resize,p_{}", "p", 1, 1000),
        ("image/crop,w_{}", "w", 0, 16384),
        ("image/crop,h_{}", "h", 0, 16384),
        ("image/crop,x_{}", "x", 0, 16384),
        ("image/crop,y_{}", "y", 0, 16384),
        ("image/indexcrop,x_{}", "x", 1, 16384),
        ("image/indexcrop,y_{}", "y", 1, 16384),
        ("image/indexcrop,x_10,i_{}", "i", 0, 16384),
        ("image/circle,r_{}", "r", 1, 4096),
        ("image/rounded-corners,r_{}", "r", 1, 4096),
        ("image/rotate,{}", "rotate", 0, 360),
        ("image/blur,r_{},s_1", "r", 1, 50),
        ("image/blur,r_1,s_{}", "s", 1, 50),
        ("image/bright,{}", "bright", -100, 100),
        ("image/contrast,{}", "contrast", -100, 100),
        ("image/sharpen,{}", "sharpen", 50, 399),
        ("image/quality,q_{}", "q", 1, 100),
        ("image/quality,Q_{}", "Q", 1, 100),
        ("image/auto-orient,{}", "auto-orient", 0, 1),
        ("image/interlace,{}", "interlace", 0, 1),
        ("image/watermark,text_SGk,t_{}", "t", 0, 100),
        ("image/watermark,text_SGk,x_{}", "x", 0, 4096),
        ("image/watermark,text_SGk,y_{}", "y", 0, 4096),
        ("image/watermark,text_SGk,voffset_{}", "voffset", -1000, 1000),
        ("image/watermark,text_SGk,padx_{}", "padx", 0, 4096),
        ("image/watermark,text_SGk,pady_{}", "pady", 0, 4096),
        ("image/watermark,text_SGk,size_{}", "size", 1, 1000),
        ("image/watermark,text_SGk,shadow_{}", "shadow", 0, 100),
        ("image/watermark,text_SGk,rotate_{}", "rotate", 0, 360),
        ("image/watermark,text_SGk,fill_{}", "fill", 0, 1),
        ("image/watermark,text_SGk,image_YS5wbmc,interval_{}", "interval", 0, 1000),
        ("image/watermark,text_SGk,image_YS5wbmc,align_{}", "align", 0, 2),
        ("image/watermark,text_SGk,image_YS5wbmc,order_{}", "order", 0, 1),
    ];
    for &(template, param, min, max) in cases {
        let at = |v: i64| template.replace("{}", &v.to_string());
        for v in [min, max, (min + max) / 2] {
            assert!(parse(&at(v)).is_ok(), "{} is accepted", at(v));
        }
        assert_eq!(refused(&at(min - 1)), param, "{}", at(min - 1));
        assert_eq!(refused(&at(max + 1)), param, "{}", at(max + 1));
        assert_eq!(refused(&template.replace("{}", "x")), param, "non-numbers");
        assert_eq!(
            refused(&template.replace("{}", "")),
            if template.contains("_{}") {
                param
            } else {
                template.split('/').nth(1).unwrap().split(',').next().unwrap()
            }
        );
    }
}

#[test]
fn defaults_are_written_in_the_canonical_form() {
    let cases = [
        ("image/crop,w_10", "image/crop,w_10,x_0,y_0,g_nw"),
        ("image/crop,w_0,h_0,g_se", "image/crop,x_0,y_0,g_se"),
        ("image/indexcrop,x_10", "image/indexcrop,x_10,i_0"),
        ("image/resize,p_50", "image/resize,m_lfit,p_50,limit_1"),
        // p above 100 enlarges unless told otherwise; p with sides multiplies them.
        ("image/resize,p_200", "image/resize,m_lfit,p_200,limit_0"),
        ("image/resize,p_200,limit_1", "image/resize,m_lfit,p_200,limit_1"),
        ("image/resize,w_100,h_100,p_200", "image/resize,m_lfit,w_200,h_200,limit_1"),
        ("image/rotate,360", "image/auto-orient,0"),
        ("image/rotate,0/bright,0", "image/auto-orient,0"),
        ("image/auto-orient,0/format,png", "image/format,png"),
        ("image/interlace,0/format,jpg", "image/format,jpg"),
        ("image/format,jpg/interlace,1/auto-orient,1", "image/auto-orient,1/format,jpg/interlace,1"),
        ("image/blur,s_2,r_3", "image/blur,r_3,s_2"),
        ("image/watermark,text_SGk", "image/watermark,text_SGk,type_d3F5LXplbmhlaQ,color_000000,size_40,shadow_0,rotate_0,t_100,g_se,x_10,y_10,voffset_0,fill_0,padx_0,pady_0"),
        ("image/watermark,image_YS5wbmc=", "image/watermark,image_YS5wbmc,t_100,g_se,x_10,y_10,voffset_0,fill_0,padx_0,pady_0"),
        ("image/info", "image/info"),
        ("image/resize,w_10/average-hue", "image/resize,m_lfit,w_10,limit_1/average-hue"),
        ("image/format,gif", "image/format,gif"),
        ("image/format,bmp", "image/format,bmp"),
    ];
    for (raw, canonical) in cases {
        let ops = parse(raw).unwrap();
        assert_eq!(ops.canonical(), canonical, "{raw}");
        assert_eq!(parse(canonical).unwrap(), ops, "{canonical} parses back");
    }
}

#[test]
fn chains_keep_their_order_and_settings_are_position_free() {
    let a = parse("image/crop,w_100/resize,w_50").unwrap();
    let b = parse("image/resize,w_50/crop,w_100").unwrap();
    assert_ne!(a.canonical(), b.canonical(), "pixel actions keep their order");
    assert_eq!(a.actions().len(), 2);
    let c = parse("image/format,webp/resize,w_50/quality,Q_70").unwrap();
    let d = parse("image/resize,w_50/quality,Q_70/format,webp").unwrap();
    assert_eq!(c, d, "settings apply wherever they stand");
    // Pixel actions may repeat; settings may not.
    assert_eq!(parse("image/resize,w_50/resize,w_20").unwrap().actions().len(), 2);
    for (raw, param) in [
        ("image/format,png/format,jpg", "format"),
        ("image/auto-orient,1/auto-orient,0", "auto-orient"),
        ("image/interlace,1/interlace,1", "interlace"),
        ("image/info/resize,w_1", "resize"),
        ("image/info/info", "info"),
        ("image/info,1", "info"),
    ] {
        assert_eq!(refused(raw), param, "{raw}");
    }
    let long = format!("image/{}", "rotate,90/".repeat(16) + "rotate,90");
    assert_eq!(refused(&long), "x-oss-process", "at most 16 actions");
}

#[test]
fn watermark_parameters_are_checked() {
    for (raw, param) in [
        ("image/watermark", "watermark"),
        ("image/watermark,t_50", "watermark"),
        ("image/watermark,text_!!!", "text"),
        ("image/watermark,text_", "text"),
        // 65 characters.
        (&format!("image/watermark,text_{}", base64_of(&"a".repeat(65))), "text"),
        (&format!("image/watermark,text_{}", base64_of("a\nb")), "text"),
        (&format!("image/watermark,text_SGk,type_{}", base64_of("comic-sans")), "type"),
        ("image/watermark,text_SGk,color_red", "color"),
        ("image/watermark,text_SGk,g_middle", "g"),
        ("image/watermark,image_YS5wbmc,size_10", "size"),
        ("image/watermark,text_SGk,order_1", "order"),
        (
            &format!("image/watermark,image_{}", base64_of("a.png?x-oss-process=image/watermark,text_SGk")),
            "watermark",
        ),
        (&format!("image/watermark,image_{}", base64_of("a.png?x-oss-process=image/format,png")), "format"),
        (&format!("image/watermark,image_{}", base64_of("a.png?x-oss-process=image/resize,P_101")), "P"),
        (&format!("image/watermark,image_{}", base64_of("a.png?other=1")), "image"),
        (&format!("image/watermark,image_{}", base64_of("")), "image"),
        ("image/resize,P_50", "P"),
    ] {
        assert_eq!(refused(raw), param, "{raw}");
    }
    let ops = parse(&format!(
        "image/watermark,image_{}",
        base64_of("/logos/a.png?x-oss-process=image/resize,P_30")
    ))
    .unwrap();
    assert_eq!(ops.watermark_objects(), vec!["logos/a.png"]);
    let Action::Watermark(w) = &ops.actions()[0] else { panic!() };
    let image = w.image.as_ref().unwrap();
    assert_eq!(
        image.process.as_ref().unwrap().actions()[0],
        Action::Resize(Resize { mode: ResizeMode::Lfit, target: Target::MainPercent(30), enlarge: false })
    );
    // Every OSS font name is accepted.
    for font in watermark::FONTS {
        assert!(parse(&format!("image/watermark,text_SGk,type_{}", base64_of(font))).is_ok(), "{font}");
    }
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE.encode(text)
}

#[test]
fn a_bad_value_is_named_before_a_missing_one() {
    // Issue 38: `blur,r_0` named `blur`.
    assert_eq!(refused("image/blur,r_0"), "r");
    assert_eq!(refused("image/blur,s_0"), "s");
    assert_eq!(refused("image/blur,s_51,r_3"), "s");
    // Nothing wrong but a parameter missing: that parameter is named.
    assert_eq!(refused("image/blur,r_3"), "s");
    assert_eq!(refused("image/blur,s_3"), "r");
    assert_eq!(refused("image/blur"), "blur");
    assert_eq!(refused("image/indexcrop,x_0,y_10"), "x");
    assert_eq!(refused("image/indexcrop,x_10,y_10,i_-1"), "i");
    assert_eq!(refused("image/indexcrop,x_10,y_10"), "indexcrop");
    assert_eq!(refused("image/watermark,t_500"), "t");
    assert_eq!(refused("image/watermark,g_up"), "g");
    assert_eq!(refused("image/watermark,size_0"), "size");
    assert_eq!(refused("image/watermark,size_20"), "size");
    assert_eq!(refused("image/watermark,text_SGk,interval_2000"), "interval");
    assert_eq!(refused("image/watermark,text_SGk,interval_20"), "interval");
    assert_eq!(refused("image/watermark"), "watermark");
}
