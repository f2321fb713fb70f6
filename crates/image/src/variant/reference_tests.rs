//! Each action against an independent renderer: ImageMagick's `convert` (IM6 at
//! `/usr/bin/convert`, or `HTTPDNS_TEST_CONVERT`), within stated tolerances. The tolerance is
//! the mean absolute difference per channel (0..=255) over the whole image: resampling
//! filters, rounding and antialiasing differ in detail between implementations, never in
//! what the picture is.

use std::path::PathBuf;
use std::process::Command;

use image::{DynamicImage, GenericImageView, ImageFormat, Rgb, RgbImage, Rgba};

use super::*;
use crate::process::parse;

fn convert_binary() -> Option<PathBuf> {
    let path = std::env::var_os("HTTPDNS_TEST_CONVERT")
        .map_or_else(|| PathBuf::from("/usr/bin/convert"), PathBuf::from);
    if path.is_file() {
        return Some(path);
    }
    // With CI=true a suite that would be skipped fails instead.
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "ImageMagick's convert is required in CI: {path:?}"
    );
    eprintln!("*** SKIPPED: ImageMagick reference renders: no {path:?} (set HTTPDNS_TEST_CONVERT) ***");
    None
}

/// `convert input.png <args> output.png`, or `None` without ImageMagick.
fn magick(input: &DynamicImage, args: &[&str]) -> Option<DynamicImage> {
    let bin = convert_binary()?;
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in.png"), dir.path().join("out.png"));
    input.save_with_format(&src, ImageFormat::Png).unwrap();
    let out =
        Command::new(bin).arg(&src).args(args).arg(format!("png32:{}", dst.display())).output().unwrap();
    assert!(out.status.success(), "convert {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Some(image::open(&dst).unwrap())
}

/// `convert input <args> info:` with a format string, e.g. `%Q`.
fn magick_info(input: &[u8], args: &[&str]) -> Option<String> {
    let bin = convert_binary()?;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in");
    std::fs::write(&src, input).unwrap();
    let out = Command::new(bin).arg(&src).args(args).arg("info:").output().unwrap();
    assert!(out.status.success(), "convert {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

fn png_of(image: &DynamicImage) -> Vec<u8> {
    let mut out = Vec::new();
    image.write_to(&mut Cursor::new(&mut out), ImageFormat::Png).unwrap();
    out
}

/// A photo-like test picture: smooth gradients, a hard-edged block and fine stripes.
fn picture(w: u32, h: u32) -> DynamicImage {
    RgbImage::from_fn(w, h, |x, y| {
        if (w / 3..w / 2).contains(&x) && (h / 3..h / 2).contains(&y) {
            Rgb([250, 20, 20])
        } else if x % 8 < 2 {
            Rgb([20, 20, 20])
        } else {
            Rgb([(x * 255 / w) as u8, (y * 255 / h) as u8, ((x + y) * 127 / (w + h)) as u8 + 64])
        }
    })
    .into()
}

fn ours(input: &DynamicImage, ops: &str) -> DynamicImage {
    let out =
        render(&png_of(input), &parse(&format!("{ops}/format,png")).unwrap(), &Limits::default()).unwrap();
    image::load_from_memory(&out.bytes).unwrap()
}

/// Mean absolute difference per channel of two images of one size, RGBA composited on white.
fn mean_diff(a: &DynamicImage, b: &DynamicImage) -> f64 {
    assert_eq!(a.dimensions(), b.dimensions(), "sizes differ");
    let flat = |i: &DynamicImage| pixels::flatten(i.clone(), [255; 3]);
    let (a, b) = (flat(a), flat(b));
    let total: u64 = a.as_raw().iter().zip(b.as_raw()).map(|(x, y)| u64::from(x.abs_diff(*y))).sum();
    total as f64 / a.as_raw().len() as f64
}

fn close(ops: &str, args: &[&str], tolerance: f64) {
    let input = picture(200, 120);
    let Some(reference) = magick(&input, args) else { return };
    let got = ours(&input, ops);
    let diff = mean_diff(&got, &reference);
    assert!(diff <= tolerance, "{ops} vs convert {args:?}: mean difference {diff:.2} > {tolerance}");
}

#[test]
fn resize_matches_imagemagick() {
    // ImageMagick's geometry `WxH` is lfit, `WxH^` mfit, `WxH!` fixed; Triangle is our filter.
    close("image/resize,m_lfit,w_150,h_80", &["-filter", "Triangle", "-resize", "150x80"], 2.0);
    close("image/resize,m_fixed,w_90,h_90", &["-filter", "Triangle", "-resize", "90x90!"], 2.0);
    close("image/resize,m_mfit,w_50,h_50", &["-filter", "Triangle", "-resize", "50x50^"], 2.0);
    close("image/resize,p_50", &["-filter", "Triangle", "-resize", "50%"], 2.0);
    close(
        "image/resize,m_fill,w_60,h_60",
        &["-filter", "Triangle", "-resize", "60x60^", "-gravity", "center", "-extent", "60x60"],
        3.0,
    );
    close(
        "image/resize,m_pad,w_100,h_100,color_00ff00",
        &[
            "-filter",
            "Triangle",
            "-resize",
            "100x100",
            "-background",
            "#00ff00",
            "-gravity",
            "center",
            "-extent",
            "100x100",
        ],
        3.0,
    );
}

#[test]
fn crop_and_indexcrop_match_imagemagick_exactly() {
    close("image/crop,x_10,y_20,w_50,h_40", &["-crop", "50x40+10+20", "+repage"], 0.0);
    // OSS's example: g_se is the origin (srcW - w, srcH - h), then x/y move it; the rest is cut.
    close("image/crop,x_10,y_10,w_100,h_50,g_se", &["-crop", "90x40+110+80", "+repage"], 0.0);
    close("image/crop,w_100,h_50,g_center", &["-crop", "100x50+50+35", "+repage"], 0.0);
    close("image/indexcrop,x_60,i_1", &["-crop", "60x120+60+0", "+repage"], 0.0);
    close("image/indexcrop,y_50,i_2", &["-crop", "200x20+0+100", "+repage"], 0.0);
}

#[test]
fn rotate_matches_imagemagick() {
    close("image/rotate,90", &["-rotate", "90"], 0.0);
    close("image/rotate,180", &["-rotate", "180"], 0.0);
    close("image/rotate,270", &["-rotate", "270"], 0.0);
    // Any other angle: the same bounding box, transparent corners, bilinear sampling (IM
    // rotates by shearing, hence the tolerance).
    let input = picture(200, 120);
    let Some(reference) = magick(&input, &["-background", "none", "-rotate", "30"]) else { return };
    let got = ours(&input, "image/rotate,30");
    let (gw, gh) = got.dimensions();
    let (rw, rh) = reference.dimensions();
    assert!(gw.abs_diff(rw) <= 2 && gh.abs_diff(rh) <= 2, "{gw}x{gh} vs {rw}x{rh}");
    let (w, h) = (gw.min(rw), gh.min(rh));
    let centre = |i: &DynamicImage| i.crop_imm((i.width() - w) / 2, (i.height() - h) / 2, w, h);
    let diff = mean_diff(&centre(&got), &centre(&reference));
    assert!(diff <= 12.0, "rotate 30: mean difference {diff:.2}");
}

#[test]
fn bright_and_contrast_are_imagemagicks_brightness_contrast() {
    for v in ["50", "-50", "100", "-100", "1"] {
        close(&format!("image/bright,{v}"), &["-brightness-contrast", &format!("{v}x0")], 1.0);
    }
    for v in ["50", "-50", "99", "-100", "10"] {
        close(&format!("image/contrast,{v}"), &["-brightness-contrast", &format!("0x{v}")], 1.5);
    }
}

#[test]
fn blur_and_sharpen_match_imagemagick() {
    close("image/blur,r_3,s_2", &["-gaussian-blur", "3x2"], 1.5);
    close("image/blur,r_10,s_5", &["-gaussian-blur", "10x5"], 1.5);
    // sharpen,v is an unsharp mask of amount v/100 over a σ = 1 Gaussian of radius 2.
    close("image/sharpen,100", &["-unsharp", "2x1+1+0"], 2.0);
    close("image/sharpen,300", &["-unsharp", "2x1+3+0"], 3.0);
}

#[test]
fn average_hue_matches_imagemagicks_one_pixel_scale() {
    let input = picture(200, 120);
    let Some(hex) = magick_info(&png_of(&input), &["-scale", "1x1!", "-format", "%[hex:p{0,0}]"]) else {
        return;
    };
    let out = render(&png_of(&input), &parse("image/average-hue").unwrap(), &Limits::default()).unwrap();
    assert_eq!(out.content_type, "application/json");
    let v: serde_json::Value = serde_json::from_slice(&out.bytes).unwrap();
    let ours = v["RGB"].as_str().unwrap();
    let channel = |s: &str, i: usize| u8::from_str_radix(&s[i..i + 2], 16).unwrap();
    for i in 0..3 {
        let (a, b) = (channel(&ours[2..], i * 2), channel(&hex, i * 2));
        assert!(a.abs_diff(b) <= 1, "{ours} vs 0x{hex}");
    }
}

#[test]
fn jpeg_quality_estimate_matches_imagemagicks_identify() {
    let input = picture(64, 48);
    let Some(bin) = convert_binary() else { return };
    for q in [20, 50, 75, 92, 100] {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("in.png"), dir.path().join("out.jpg"));
        input.save_with_format(&src, ImageFormat::Png).unwrap();
        let ok = Command::new(&bin).arg(&src).args(["-quality", &q.to_string()]).arg(&dst).status().unwrap();
        assert!(ok.success());
        let jpeg = std::fs::read(&dst).unwrap();
        let theirs: u8 = magick_info(&jpeg, &["-format", "%Q"]).unwrap().parse().unwrap();
        let estimate = estimate_jpeg_quality(&jpeg).unwrap();
        assert!(estimate.abs_diff(theirs) <= 1, "quality {q}: ours {estimate}, identify {theirs}");
    }
}

#[test]
fn every_output_format_is_read_by_imagemagick() {
    let original = png_of(&picture(60, 40));
    for (ops, format, interlace) in [
        ("image/format,jpg", "JPEG", "None"),
        ("image/format,jpg/interlace,1", "JPEG", "JPEG"),
        ("image/format,png", "PNG", ""),
        ("image/format,webp", "WEBP", ""),
        ("image/format,webp/quality,Q_100", "WEBP", ""),
        ("image/format,gif", "GIF", ""),
        // A BMP with a version 3 header, as ImageMagick names it.
        ("image/format,bmp", "BMP3", ""),
    ] {
        let out = render(&original, &parse(ops).unwrap(), &Limits::default()).unwrap();
        let Some(info) = magick_info(&out.bytes, &["-format", "%m %w %h %[interlace]"]) else { return };
        let mut parts = info.split(' ');
        assert_eq!(parts.next(), Some(format), "{ops}: {info}");
        assert_eq!(parts.next(), Some("60"), "{ops}: {info}");
        assert_eq!(parts.next(), Some("40"), "{ops}: {info}");
        if !interlace.is_empty() {
            assert_eq!(parts.next(), Some(interlace), "{ops}: {info}");
        }
    }
}

#[test]
fn circle_and_rounded_corners_match_imagemagick_masks() {
    // The reference: a circle of radius r around the centre pixel, drawn by ImageMagick as the
    // alpha mask of the centred (2r+1)² square.
    let input = picture(200, 120);
    let r = 40;
    let side = 2 * r + 1;
    let (x, y) = (100 - r, 60 - r);
    let circle = format!("circle {r}.5,{r}.5 {r}.5,0.5");
    let Some(reference) = magick(
        &input,
        &[
            "-crop",
            &format!("{side}x{side}+{x}+{y}"),
            "+repage",
            "(",
            "+clone",
            "-alpha",
            "transparent",
            "-fill",
            "white",
            "-draw",
            &circle,
            ")",
            "-compose",
            "DstIn",
            "-composite",
        ],
    ) else {
        return;
    };
    let got = ours(&input, &format!("image/circle,r_{r}"));
    assert_eq!(got.dimensions(), (side, side));
    let diff = mean_diff(&got, &reference);
    assert!(diff <= 3.0, "circle: mean difference {diff:.2}");
    // rounded-corners: the corners go, the middle stays exactly.
    let rounded = ours(&input, "image/rounded-corners,r_30").to_rgba8();
    assert_eq!(rounded.dimensions(), (200, 120));
    assert_eq!(rounded.get_pixel(0, 0)[3], 0);
    assert_eq!(rounded.get_pixel(199, 119)[3], 0);
    assert_eq!(rounded.get_pixel(100, 0)[3], 255, "edges between the corners stay");
    assert_eq!(rounded.get_pixel(100, 60), &Rgba(input.get_pixel(100, 60).0));
    let Some(reference) = magick(
        &input,
        &[
            "(",
            "+clone",
            "-alpha",
            "transparent",
            "-fill",
            "white",
            "-draw",
            "roundrectangle 0,0 199,119 30,30",
            ")",
            "-compose",
            "DstIn",
            "-composite",
        ],
    ) else {
        return;
    };
    let diff = mean_diff(&DynamicImage::ImageRgba8(rounded), &reference);
    assert!(diff <= 2.0, "rounded-corners: mean difference {diff:.2}");
}

#[test]
fn chains_match_imagemagick_in_order() {
    close(
        "image/crop,w_100,h_100/resize,w_50/rotate,90",
        &["-crop", "100x100+0+0", "+repage", "-filter", "Triangle", "-resize", "50x", "-rotate", "90"],
        2.0,
    );
    close(
        "image/resize,w_100/crop,w_50,h_50,g_center/bright,20",
        &[
            "-filter",
            "Triangle",
            "-resize",
            "100x",
            "-gravity",
            "center",
            "-crop",
            "50x50+0+0",
            "+repage",
            "-brightness-contrast",
            "20x0",
        ],
        2.5,
    );
}

#[test]
fn watermark_text_is_drawn_where_asked() {
    let white = DynamicImage::ImageRgb8(RgbImage::from_pixel(300, 200, Rgb([255, 255, 255])));
    let text = base64_url("Hi 你好");
    let out =
        ours(&white, &format!("image/watermark,text_{text},size_40,color_FF0000,g_se,x_10,y_10")).to_rgb8();
    // Only the bottom-right box holds red; its ink is red (not black), nothing leaks elsewhere.
    let mut inked = 0;
    for (x, y, p) in out.enumerate_pixels() {
        if *p != Rgb([255, 255, 255]) {
            assert!(x >= 150 && y >= 130 && x < 290 && y < 190, "ink at {x},{y}");
            assert!(p[0] >= p[1] && p[0] >= p[2], "red ink: {p:?}");
            inked += 1;
        }
    }
    assert!(inked > 200, "the text was drawn: {inked} pixels");
    // t_0 is invisible; a shadow adds dark pixels.
    let clear = ours(&white, &format!("image/watermark,text_{text},t_0"));
    assert_eq!(clear.to_rgb8(), white.to_rgb8());
    let shadowed = ours(&white, &format!("image/watermark,text_{text},color_FFFFFF,shadow_100")).to_rgb8();
    assert!(shadowed.pixels().any(|p| p[0] < 100), "the shadow is drawn");
}

#[test]
fn watermark_images_are_placed_by_gravity_tiled_and_scaled() {
    let base = DynamicImage::ImageRgb8(RgbImage::from_pixel(200, 100, Rgb([255, 255, 255])));
    let mark = DynamicImage::ImageRgb8(RgbImage::from_pixel(10, 10, Rgb([0, 0, 255])));
    let mut marks = WatermarkImages::new();
    marks.insert("logo.png".to_owned(), png_of(&mark));
    let run = |ops: &str| {
        let out = render_with(&png_of(&base), &parse(ops).unwrap(), &Limits::default(), &marks).unwrap();
        image::load_from_memory(&out.bytes).unwrap().to_rgb8()
    };
    let blue = Rgb([0, 0, 255]);
    let logo = base64_url("logo.png");
    // Default: south-east, 10 px from the edges.
    let out = run(&format!("image/watermark,image_{logo}/format,png"));
    assert_eq!(out.get_pixel(180, 80), &blue);
    assert_eq!(out.get_pixel(189, 89), &blue);
    assert_eq!(out.get_pixel(190, 90), &Rgb([255, 255, 255]));
    assert_eq!(out.get_pixel(179, 79), &Rgb([255, 255, 255]));
    // North-west at 0,0; centre with voffset moving it up.
    let out = run(&format!("image/watermark,image_{logo},g_nw,x_0,y_0/format,png"));
    assert_eq!(out.get_pixel(0, 0), &blue);
    let out = run(&format!("image/watermark,image_{logo},g_center,voffset_20/format,png"));
    assert_eq!(out.get_pixel(95, 25), &blue);
    assert_eq!(out.get_pixel(95, 45), &Rgb([255, 255, 255]));
    // Half transparent.
    let out = run(&format!("image/watermark,image_{logo},t_50/format,png"));
    let p = out.get_pixel(185, 85);
    assert!((120..=135).contains(&p[0]) && p[2] == 255, "{p:?}");
    // Tiled with 10 px gaps: every other 10-px cell is blue.
    let out = run(&format!("image/watermark,image_{logo},fill_1,padx_10,pady_10,g_nw,x_0,y_0/format,png"));
    assert_eq!(out.get_pixel(5, 5), &blue);
    assert_eq!(out.get_pixel(25, 25), &blue);
    assert_eq!(out.get_pixel(15, 5), &Rgb([255, 255, 255]));
    assert_eq!(out.get_pixel(185, 85), &blue);
    // The watermark's own process: P_50 fits it in half the main image (100×50), enlarging.
    let scaled = base64_url("logo.png?x-oss-process=image/resize,P_50");
    let out = run(&format!("image/watermark,image_{scaled},g_nw,x_0,y_0/format,png"));
    assert_eq!(out.get_pixel(49, 49), &blue);
    assert_eq!(out.get_pixel(51, 51), &Rgb([255, 255, 255]));
    // Text and image together, text first.
    let text = base64_url("A");
    let out =
        run(&format!("image/watermark,image_{logo},text_{text},order_1,g_nw,x_0,y_0,interval_5/format,png"));
    assert_ne!(out.get_pixel(0, 0), &blue, "the text comes first");
    assert!(out.pixels().any(|p| *p == blue));
    // A watermark object that is not there.
    let missing = base64_url("nope.png");
    let err = render_with(
        &png_of(&base),
        &parse(&format!("image/watermark,image_{missing}")).unwrap(),
        &Limits::default(),
        &marks,
    );
    assert_eq!(err, Err(RenderError::WatermarkMissing("nope.png".into())));
}

fn base64_url(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

#[test]
fn info_reports_size_format_dimensions_and_exif() {
    let mut jpeg = Vec::new();
    let mut exif = b"II\x2a\x00\x08\x00\x00\x00\x02\x00".to_vec();
    // Orientation = 6, Make = "Cam" (ASCII, 4 bytes incl. NUL, inline).
    exif.extend_from_slice(&[0x0f, 0x01, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00]);
    exif.extend_from_slice(b"Cam\0");
    exif.extend_from_slice(&[0x12, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00]);
    exif.extend_from_slice(&[0, 0, 0, 0]);
    {
        use image::ImageEncoder as _;
        let mut encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90);
        encoder.set_exif_metadata(exif).unwrap();
        let px = picture(40, 20).to_rgb8();
        encoder.write_image(px.as_raw(), 40, 20, image::ExtendedColorType::Rgb8).unwrap();
    }
    let out = render(&jpeg, &parse("image/info").unwrap(), &Limits::default()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.bytes).unwrap();
    assert_eq!(v["FileSize"]["value"], jpeg.len().to_string());
    assert_eq!(v["Format"]["value"], "jpg");
    assert_eq!(v["ImageWidth"]["value"], "40");
    assert_eq!(v["ImageHeight"]["value"], "20");
    assert_eq!(v["Orientation"]["value"], "6");
    assert_eq!(v["Make"]["value"], "Cam");
    // After auto-orient and a resize, the sizes are the chain's.
    let out =
        render(&jpeg, &parse("image/auto-orient,1/resize,h_10/info").unwrap(), &Limits::default()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.bytes).unwrap();
    assert_eq!(
        (v["ImageWidth"]["value"].as_str(), v["ImageHeight"]["value"].as_str()),
        (Some("5"), Some("10"))
    );
    if let Some(dims) = magick_info(&jpeg, &["-format", "%w %h %[EXIF:Orientation]"]) {
        assert_eq!(dims, "40 20 6");
    }
}

#[test]
fn relative_quality_scales_the_originals() {
    let input = picture(96, 64);
    let Some(bin) = convert_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in.png"), dir.path().join("out.jpg"));
    input.save_with_format(&src, ImageFormat::Png).unwrap();
    assert!(Command::new(&bin).arg(&src).args(["-quality", "80"]).arg(&dst).status().unwrap().success());
    let jpeg = std::fs::read(&dst).unwrap();
    // q_50 of a quality-80 original is quality 40; Q_50 is 50.
    let relative = render(&jpeg, &parse("image/quality,q_50").unwrap(), &Limits::default()).unwrap();
    assert_eq!(estimate_jpeg_quality(&relative.bytes), Some(40));
    let absolute = render(&jpeg, &parse("image/quality,Q_50").unwrap(), &Limits::default()).unwrap();
    assert_eq!(estimate_jpeg_quality(&absolute.bytes), Some(50));
    // A PNG original has no quality: q_ is absolute.
    let from_png =
        render(&png_of(&input), &parse("image/format,jpg/quality,q_50").unwrap(), &Limits::default())
            .unwrap();
    assert_eq!(estimate_jpeg_quality(&from_png.bytes), Some(50));
    let theirs: u8 = magick_info(&relative.bytes, &["-format", "%Q"]).unwrap().parse().unwrap();
    assert!(theirs.abs_diff(40) <= 1, "identify says {theirs}");
}
