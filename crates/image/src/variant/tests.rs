use super::*;
use crate::process::parse;
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;
use image::codecs::webp::WebPEncoder;
use image::{ImageBuffer, ImageEncoder, Luma, LumaA, Rgb, RgbImage, Rgba, RgbaImage};
use proptest::prelude::*;

fn encode_as(image: impl Into<DynamicImage>, format: ImageFormat) -> Vec<u8> {
    let image = image.into();
    let mut out = Vec::new();
    match format {
        ImageFormat::Jpeg => image.write_with_encoder(JpegEncoder::new_with_quality(&mut out, 95)),
        ImageFormat::Png => image.write_with_encoder(PngEncoder::new(&mut out)),
        ImageFormat::WebP => image.write_with_encoder(WebPEncoder::new_lossless(&mut out)),
        other => panic!("{other:?}"),
    }
    .unwrap();
    out
}

/// A smooth colour gradient, so that resampling has something to chew on.
fn gradient(w: u32, h: u32) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| Rgb([(x * 255 / w.max(1)) as u8, (y * 255 / h.max(1)) as u8, 128]))
}

/// Pixels that do not compress: lossy encoders have to throw detail away.
fn noise(w: u32, h: u32) -> RgbImage {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    RgbImage::from_fn(w, h, |_, _| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        Rgb([state as u8, (state >> 8) as u8, (state >> 16) as u8])
    })
}

fn png(w: u32, h: u32) -> Vec<u8> {
    encode_as(gradient(w, h), ImageFormat::Png)
}

fn run(original: &[u8], ops: &str) -> Result<Rendered, RenderError> {
    render(original, &parse(ops).unwrap(), &Limits::default())
}

/// Decodes a rendered variant, checking that it is what it claims to be.
fn open(rendered: &Rendered) -> DynamicImage {
    let format = image::guess_format(&rendered.bytes).unwrap();
    assert_eq!(format.to_mime_type(), rendered.content_type);
    let image = image::load_from_memory(&rendered.bytes).unwrap();
    assert_eq!(image.dimensions(), (rendered.width, rendered.height));
    image
}

#[test]
fn the_oss_example_sizes() {
    let original = png(200, 100);
    for (ops, size) in [
        ("image/resize,m_lfit,w_150,h_80", (150, 75)),
        ("image/resize,m_mfit,w_150,h_80", (160, 80)),
        ("image/resize,m_fill,w_150,h_80", (150, 80)),
        ("image/resize,m_pad,w_150,h_80", (150, 80)),
        ("image/resize,m_fixed,w_150,h_80", (150, 80)),
        ("image/resize,w_100", (100, 50)),
        ("image/resize,h_20", (40, 20)),
        ("image/resize,l_50", (50, 25)),
        ("image/resize,s_50", (100, 50)),
        ("image/resize,m_fill,w_30", (30, 30)),
    ] {
        let out = run(&original, ops).unwrap();
        assert_eq!((out.width, out.height), size, "{ops}");
        assert_eq!(open(&out).dimensions(), size, "{ops}");
    }
}

#[test]
fn pad_centres_the_picture_on_the_colour() {
    let blue = encode_as(RgbImage::from_pixel(200, 100, Rgb([0, 0, 255])), ImageFormat::Png);
    let out = run(&blue, "image/resize,m_pad,w_150,h_80,color_FF0000").unwrap();
    let img = open(&out).to_rgb8();
    // The picture is 150×75 at y = 2: two rows of padding above, three below.
    for y in [0, 1, 77, 78, 79] {
        assert_eq!(img.get_pixel(75, y), &Rgb([255, 0, 0]), "row {y}");
    }
    for y in [3, 40, 75] {
        assert_eq!(img.get_pixel(75, y), &Rgb([0, 0, 255]), "row {y}");
    }
    // Transparent pixels take the pad colour too.
    let clear = encode_as(RgbaImage::from_pixel(10, 10, Rgba([9, 9, 9, 0])), ImageFormat::Png);
    let out = run(&clear, "image/resize,m_pad,w_4,h_8,color_00ff00").unwrap();
    assert!(open(&out).to_rgb8().pixels().all(|p| *p == Rgb([0, 255, 0])));
}

#[test]
fn fill_cuts_away_the_sides() {
    // White with black bands 5 px wide at the left and right: a 150×80 fill of 200×100 uses
    // the centred 188 columns, so no black may remain, while lfit keeps the bands.
    let banded = RgbImage::from_fn(200, 100, |x, _| {
        if !(5..195).contains(&x) {
            Rgb([0, 0, 0])
        } else {
            Rgb([255, 255, 255])
        }
    });
    let original = encode_as(banded, ImageFormat::Png);
    let fill = open(&run(&original, "image/resize,m_fill,w_150,h_80").unwrap()).to_rgb8();
    assert!(fill.pixels().all(|p| p[0] == 255), "fill left part of a band");
    let lfit = open(&run(&original, "image/resize,m_lfit,w_150,h_80").unwrap()).to_rgb8();
    assert!(lfit.get_pixel(0, 10)[0] < 128, "lfit keeps the band");
}

#[test]
fn output_format_follows_the_source_or_the_format_action() {
    let source = gradient(64, 48);
    let cases = [
        (ImageFormat::Png, "image/resize,w_32", "image/png"),
        (ImageFormat::Jpeg, "image/resize,w_32", "image/jpeg"),
        (ImageFormat::WebP, "image/resize,w_32", "image/webp"),
        (ImageFormat::Png, "image/format,jpg", "image/jpeg"),
        (ImageFormat::Png, "image/format,jpeg/quality,q_50", "image/jpeg"),
        (ImageFormat::Png, "image/resize,w_32/format,webp", "image/webp"),
        (ImageFormat::Jpeg, "image/format,png", "image/png"),
        (ImageFormat::WebP, "image/quality,Q_20", "image/webp"),
    ];
    for (format, ops, content_type) in cases {
        let out = run(&encode_as(source.clone(), format), ops).unwrap();
        assert_eq!(out.content_type, content_type, "{format:?} {ops}");
        open(&out);
    }
}

#[test]
fn webp_is_lossy_unless_absolute_quality_100() {
    let source = gradient(40, 30);
    let original = encode_as(source.clone(), ImageFormat::Png);
    let lossless = run(&original, "image/format,webp/quality,Q_100").unwrap();
    assert_eq!(open(&lossless).to_rgb8(), source, "Q_100 is lossless");
    let lossy = run(&original, "image/format,webp/quality,Q_30").unwrap();
    assert_ne!(open(&lossy).to_rgb8(), source, "Q_30 is lossy");
    let noisy = encode_as(noise(96, 96), ImageFormat::Png);
    let size = |ops: &str| run(&noisy, ops).unwrap().bytes.len();
    let (lossy_len, lossless_len) =
        (size("image/format,webp/quality,Q_30"), size("image/format,webp/quality,Q_100"));
    assert!(lossy_len * 2 < lossless_len, "{lossy_len} {lossless_len}");
    // The WebP header says which: VP8 (lossy) or VP8L (lossless).
    assert_eq!(&lossy.bytes[12..16], b"VP8 ");
    assert_eq!(&lossless.bytes[12..16], b"VP8L");
    assert_eq!(&run(&original, "image/format,webp").unwrap().bytes[12..16], b"VP8 ", "the default is lossy");
}

#[test]
fn transparency_becomes_white_in_jpeg() {
    let half =
        RgbaImage::from_fn(20, 20, |x, _| if x < 10 { Rgba([0, 0, 0, 0]) } else { Rgba([0, 0, 0, 255]) });
    let out = run(&encode_as(half, ImageFormat::Png), "image/format,jpg").unwrap();
    let img = open(&out).to_rgb8();
    assert!(img.get_pixel(2, 10)[0] > 240, "transparent → white: {:?}", img.get_pixel(2, 10));
    assert!(img.get_pixel(17, 10)[0] < 15, "opaque black stays black");
    // Grey with alpha, and 16-bit originals, all reach JPEG.
    let la = ImageBuffer::from_pixel(8, 8, LumaA([100u8, 128]));
    open(&run(&encode_as(DynamicImage::ImageLumaA8(la), ImageFormat::Png), "image/format,jpg").unwrap());
    let l16 = ImageBuffer::from_pixel(8, 8, Luma([40000u16]));
    let out = run(&encode_as(DynamicImage::ImageLuma16(l16), ImageFormat::Png), "image/resize,w_4").unwrap();
    assert_eq!(out.content_type, "image/png");
    let rgba16 = ImageBuffer::from_pixel(8, 8, Rgba([1u16, 2, 65535, 30000]));
    let out =
        run(&encode_as(DynamicImage::ImageRgba16(rgba16), ImageFormat::Png), "image/format,jpg").unwrap();
    open(&out);
}

#[test]
fn limit_1_never_enlarges_and_limit_0_does() {
    let original = png(200, 100);
    for ops in [
        "image/resize,w_400",
        "image/resize,m_fill,w_300,h_300",
        "image/resize,m_pad,w_400,h_400",
        "image/resize,m_fixed,w_201,h_50",
    ] {
        let out = run(&original, ops).unwrap();
        assert_eq!((out.width, out.height), (200, 100), "{ops}");
    }
    let out = run(&original, "image/resize,w_400,limit_0").unwrap();
    assert_eq!((out.width, out.height), (400, 200));
    let out = run(&original, "image/resize,m_fill,w_300,h_300,limit_0").unwrap();
    assert_eq!((out.width, out.height), (300, 300));
}

#[test]
fn quality_applies_to_jpeg_only() {
    let noisy = RgbImage::from_fn(96, 96, |x, y| {
        let v = x.wrapping_mul(2654435761).wrapping_add(y.wrapping_mul(40503)) >> 7;
        Rgb([v as u8, (v >> 8) as u8, (v >> 16) as u8])
    });
    let jpeg = encode_as(noisy.clone(), ImageFormat::Jpeg);
    let size = |ops: &str| run(&jpeg, ops).unwrap().bytes;
    assert!(size("image/quality,Q_10").len() * 2 < size("image/quality,Q_95").len());
    assert_eq!(size("image/quality,q_10"), size("image/quality,Q_10"), "q_ is applied as absolute");
    assert_eq!(size("image/format,jpg"), size("image/quality,Q_85"), "the default is 85");
    let png = encode_as(noisy, ImageFormat::Png);
    assert_eq!(
        run(&png, "image/quality,Q_10").unwrap().bytes,
        run(&png, "image/resize,w_96").unwrap().bytes,
        "PNG ignores quality"
    );
}

/// A PNG chunk with its CRC-32.
fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut crc = !0u32;
    for &byte in kind.iter().chain(data) {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&(!crc).to_be_bytes());
    out
}

/// A well-formed PNG header claiming `w`×`h` RGB with a tiny IDAT: 70 bytes that would
/// decode to gigabytes.
fn bomb(w: u32, h: u32) -> Vec<u8> {
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(chunk(b"IHDR", &ihdr));
    // A zlib stream of one empty stored block: valid framing, almost no data.
    png.extend(chunk(b"IDAT", &[0x78, 0x01, 0x01, 0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01]));
    png.extend(chunk(b"IEND", &[]));
    png
}

#[test]
fn decompression_bombs_are_refused_from_the_header() {
    let bomb = bomb(60_000, 60_000);
    assert!(bomb.len() < 100);
    let started = Instant::now();
    assert_eq!(
        run(&bomb, "image/resize,w_10"),
        Err(RenderError::TooLarge { pixels: 3_600_000_000, limit: 50_000_000 })
    );
    // Refused without decoding: 10.8 GB of pixels cannot be allocated and filled this fast.
    assert!(started.elapsed() < Duration::from_secs(2));
    // The budget is exact.
    let original = png(200, 100);
    let ops = parse("image/format,png").unwrap();
    let limits = |max_input_pixels| Limits { max_input_pixels, ..Limits::default() };
    assert!(render(&original, &ops, &limits(20_000)).is_ok());
    assert_eq!(
        render(&original, &ops, &limits(19_999)),
        Err(RenderError::TooLarge { pixels: 20_000, limit: 19_999 })
    );
    // Within the pixel budget, the same header is a decode error, not a panic.
    assert!(matches!(run(&self::bomb(100, 100), "image/format,png"), Err(RenderError::Decode(_))));
}

#[test]
fn the_byte_budget_is_checked_first() {
    let original = png(20, 10);
    let limits = Limits { max_input_bytes: original.len() - 1, ..Limits::default() };
    assert_eq!(
        render(&original, &parse("image/format,png").unwrap(), &limits),
        Err(RenderError::InputTooLarge { bytes: original.len(), limit: original.len() - 1 })
    );
}

#[test]
fn the_output_budget_is_checked_before_resizing() {
    let tiny = png(10, 1);
    for ops in [
        "image/resize,m_mfit,w_16384,h_16384,limit_0",
        "image/resize,m_pad,w_16384,h_16384,limit_0",
        "image/resize,m_fixed,w_16384,h_16384,limit_0",
    ] {
        assert!(matches!(run(&tiny, ops), Err(RenderError::OutputTooLarge { .. })), "{ops}");
    }
    let limits = Limits { max_output_side: 100, ..Limits::default() };
    let ops = parse("image/resize,w_101,limit_0").unwrap();
    assert_eq!(render(&tiny, &ops, &limits), Err(RenderError::OutputTooLarge { width: 101, height: 10 }));
}

#[test]
fn garbage_is_refused_without_panicking() {
    for bytes in [&b""[..], b"hello world", b"II*\x00\x08\x00\x00\x00", b"\x00\x00\x01\x00\x01\x00"] {
        assert_eq!(run(bytes, "image/format,png"), Err(RenderError::UnsupportedFormat), "{bytes:?}");
    }
    // GIF and BMP are originals now: broken ones are decode errors.
    for bytes in [&b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"[..], b"BM\x00\x00\x00\x00"] {
        assert!(matches!(run(bytes, "image/format,png"), Err(RenderError::Decode(_))), "{bytes:?}");
    }
    let mut broken = b"\x89PNG\r\n\x1a\n".to_vec();
    broken.extend_from_slice(b"definitely not chunks");
    assert!(matches!(run(&broken, "image/format,png"), Err(RenderError::Decode(_))));
    let valid = png(64, 64);
    let truncated = &valid[..valid.len() / 2];
    assert!(matches!(run(truncated, "image/format,png"), Err(RenderError::Decode(_))));
    let jpeg = encode_as(gradient(64, 64), ImageFormat::Jpeg);
    assert!(matches!(run(&jpeg[..40], "image/format,png"), Err(RenderError::Decode(_))));
    let webp = encode_as(gradient(64, 64), ImageFormat::WebP);
    assert!(matches!(run(&webp[..30], "image/format,png"), Err(RenderError::Decode(_))));
}

/// Minimal EXIF (TIFF, little endian) with one entry: Orientation = `value`.
fn exif_orientation(value: u16) -> Vec<u8> {
    let mut exif = b"II\x2a\x00\x08\x00\x00\x00\x01\x00".to_vec();
    exif.extend_from_slice(&[0x12, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00]);
    exif.extend_from_slice(&value.to_le_bytes());
    exif.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    exif
}

#[test]
fn exif_orientation_is_applied() {
    // Stored 40×20, left half red, right half blue, tagged "rotate 90° clockwise": it shows
    // 20×40 with red on top.
    let stored = RgbImage::from_fn(40, 20, |x, _| if x < 20 { Rgb([255, 0, 0]) } else { Rgb([0, 0, 255]) });
    let mut jpeg = Vec::new();
    let mut encoder = JpegEncoder::new_with_quality(&mut jpeg, 95);
    encoder.set_exif_metadata(exif_orientation(6)).unwrap();
    encoder.write_image(stored.as_raw(), 40, 20, image::ExtendedColorType::Rgb8).unwrap();
    // Without auto-orient,1 the stored pixel order is kept (OSS's default).
    let out = run(&jpeg, "image/format,png").unwrap();
    assert_eq!((out.width, out.height), (40, 20));
    let out = run(&jpeg, "image/auto-orient,1/format,png").unwrap();
    assert_eq!((out.width, out.height), (20, 40));
    let img = open(&out).to_rgb8();
    assert!(img.get_pixel(10, 5)[0] > 200 && img.get_pixel(10, 5)[2] < 60);
    assert!(img.get_pixel(10, 35)[2] > 200 && img.get_pixel(10, 35)[0] < 60);
    // And the resize sees the oriented size.
    let out = run(&jpeg, "image/resize,h_20/auto-orient,1").unwrap();
    assert_eq!((out.width, out.height), (10, 20));
    let out = run(&jpeg, "image/resize,h_20").unwrap();
    assert_eq!((out.width, out.height), (40, 20));
}

#[test]
fn both_resampling_orders_agree() {
    let source: DynamicImage = gradient(60, 45).into();
    for (w, h) in [(10, 90), (90, 10), (30, 30), (7, 200)] {
        let direct = source.resize_exact(w, h, FILTER).to_rgb8();
        let rotated = source.rotate90().resize_exact(h, w, FILTER).rotate270().to_rgb8();
        let chosen = resample(source.clone(), w, h).to_rgb8();
        assert_eq!(chosen.dimensions(), (w, h));
        for ((a, b), c) in direct.pixels().zip(rotated.pixels()).zip(chosen.pixels()) {
            for i in 0..3 {
                assert!(a[i].abs_diff(b[i]) <= 2 && a[i].abs_diff(c[i]) <= 2, "{w}x{h}: {a:?} {b:?}");
            }
        }
    }
    // A wide strip made tall takes the cheap order: 8 000 × 16 384 × 16 bytes = 2 GB the
    // other way round, and a 50 M-pixel strip would need terabytes.
    assert!(horizontal_pass_first((8000, 1), (1, 16384)));
    assert!(horizontal_pass_first((50_000_000, 1), (1, 16384)));
    assert!(!horizontal_pass_first((1, 8000), (16384, 1)));
    assert!(!horizontal_pass_first((4000, 3000), (400, 300)), "a tie keeps image's own order");
    assert!(horizontal_pass_first((4000, 3000), (400, 301)));
    let strip = png(8000, 1);
    let out = run(&strip, "image/resize,m_fixed,w_1,h_16384,limit_0").unwrap();
    assert_eq!((out.width, out.height), (1, 16384));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn corrupted_originals_never_panic(
        format in prop_oneof![Just(ImageFormat::Png), Just(ImageFormat::Jpeg), Just(ImageFormat::WebP)],
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = encode_as(gradient(24, 16), format);
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let keep = cut.index(bytes.len() + 1).max(bytes.len() / 2);
        bytes.truncate(keep);
        let _ = run(&bytes, "image/resize,m_fill,w_10,h_7/format,jpg");
    }

    #[test]
    fn rendered_sizes_match_the_plan(
        sw in 1u32..=48, sh in 1u32..=48,
        w in 1u32..=64, h in 1u32..=64,
        mode in prop_oneof![Just("lfit"), Just("mfit"), Just("fill"), Just("pad"), Just("fixed")],
        sides in 0usize..4,
        limit in 0u8..=1,
    ) {
        let original = png(sw, sh);
        let dims = [format!("w_{w},h_{h}"), format!("w_{w}"), format!("l_{w}"), format!("l_{w},s_{h}")];
        let raw = format!("image/resize,m_{mode},{},limit_{limit}/format,webp", dims[sides]);
        let ops = parse(&raw).unwrap();
        let expected = geometry::plan((sw, sh), ops.resize().unwrap()).output_size((sw, sh));
        let out = render(&original, &ops, &Limits::default()).unwrap();
        prop_assert_eq!((u64::from(out.width), u64::from(out.height)), expected, "{}", raw);
        prop_assert_eq!(open(&out).dimensions(), (out.width, out.height));
    }
}

// --- the other actions: documented edges ---

#[test]
fn crop_edges() {
    let original = png(200, 100);
    let size = |ops: &str| {
        let out = run(&original, ops).unwrap();
        (out.width, out.height)
    };
    // Defaults reach the edges; too large a box is cut at the edges (OSS).
    assert_eq!(size("image/crop,x_150,y_50"), (50, 50));
    assert_eq!(size("image/crop,x_10,y_10,w_1000,h_1000"), (190, 90));
    assert_eq!(size("image/crop,w_0,h_0"), (200, 100));
    assert_eq!(size("image/crop,x_199,y_99"), (1, 1));
    // OSS's example: g_se moves the origin to the bottom-right cell; x/y go on from there.
    assert_eq!(size("image/crop,x_10,y_10,w_50,h_50,g_se"), (40, 40));
    // An origin outside the image is a bad request naming the coordinate.
    assert_eq!(
        run(&original, "image/crop,x_200"),
        Err(RenderError::BadParameter { param: "x", message: "the crop starts outside the image" })
    );
    assert!(matches!(run(&original, "image/crop,y_100"), Err(RenderError::BadParameter { param: "y", .. })));
}

#[test]
fn indexcrop_circle_and_rounded_corners_edges() {
    let original = png(200, 100);
    let size = |ops: &str| {
        let out = run(&original, ops).unwrap();
        (out.width, out.height)
    };
    assert_eq!(size("image/indexcrop,x_60,i_0"), (60, 100));
    assert_eq!(size("image/indexcrop,x_60,i_3"), (20, 100), "the last slice is what is left");
    assert_eq!(size("image/indexcrop,x_60,i_4"), (200, 100), "no such slice: the whole image (OSS)");
    assert_eq!(size("image/indexcrop,y_1,i_99"), (200, 1));
    assert_eq!(size("image/indexcrop,y_16384"), (200, 100));
    // circle: 2r+1 a side; r over half the short side becomes (short - 1) / 2 (OSS).
    assert_eq!(size("image/circle,r_10"), (21, 21));
    assert_eq!(size("image/circle,r_4096"), (99, 99));
    assert_eq!(size("image/circle,r_1"), (3, 3));
    let out = open(&run(&original, "image/circle,r_10").unwrap()).to_rgba8();
    assert_eq!(out.get_pixel(0, 0)[3], 0, "outside is transparent in PNG");
    assert_eq!(out.get_pixel(10, 10)[3], 255);
    let jpeg = open(&run(&original, "image/circle,r_10/format,jpg").unwrap()).to_rgb8();
    assert!(jpeg.get_pixel(0, 0).0.iter().all(|&c| c > 240), "outside is white in JPEG");
    // rounded-corners: the size stays; a radius over half the short side is clamped.
    assert_eq!(size("image/rounded-corners,r_4096"), (200, 100));
    let out = open(&run(&original, "image/rounded-corners,r_4096").unwrap()).to_rgba8();
    assert_eq!(out.get_pixel(0, 0)[3], 0);
    assert_eq!(out.get_pixel(100, 50)[3], 255);
}

#[test]
fn rotate_edges() {
    let original = png(200, 100);
    let out = run(&original, "image/rotate,90").unwrap();
    assert_eq!((out.width, out.height), (100, 200));
    let out = run(&original, "image/rotate,45").unwrap();
    // 200·cos45 + 100·sin45 = 212.13 → 213.
    assert_eq!((out.width, out.height), (213, 213));
    // Arbitrary angles of images over 4096 px a side are refused, as OSS does.
    let wide = png(4097, 1);
    assert!(matches!(run(&wide, "image/rotate,30"), Err(RenderError::BadParameter { param: "rotate", .. })));
    assert_eq!(run(&wide, "image/rotate,90").unwrap().height, 4097, "right angles are free");
}

#[test]
fn budgets_apply_after_every_action() {
    let tiny = png(10, 10);
    let limits = Limits { max_output_pixels: 10_000, ..Limits::default() };
    // The enlargement itself is over budget, although the crop after it would be small.
    let ops = parse("image/resize,w_1000,limit_0/crop,w_10,h_10").unwrap();
    assert_eq!(render(&tiny, &ops, &limits), Err(RenderError::OutputTooLarge { width: 1000, height: 1000 }));
    // Within budget step by step, the chain renders.
    let ops = parse("image/resize,w_100,limit_0/crop,w_10,h_10").unwrap();
    assert_eq!(render(&tiny, &ops, &limits).map(|r| (r.width, r.height)), Ok((10, 10)));
    // A rotation's bounding box counts too.
    let limits = Limits { max_output_pixels: 120, ..Limits::default() };
    assert!(matches!(
        render(&tiny, &parse("image/rotate,45").unwrap(), &limits),
        Err(RenderError::OutputTooLarge { .. })
    ));
    // Time: a render past its deadline stops.
    let limits = Limits { max_render_time: Duration::ZERO, ..Limits::default() };
    assert_eq!(
        render(&png(50, 50), &parse("image/blur,r_50,s_50").unwrap(), &limits),
        Err(RenderError::TimedOut)
    );
    // Memory is estimated from the header, before decoding, and grows with the work.
    let header = probe(&png(2000, 1000)).unwrap();
    assert_eq!((header.width, header.height, header.bytes_per_pixel), (2000, 1000, 3));
    let small =
        memory_estimate(&parse("image/resize,w_100").unwrap(), &header, 1000, &Limits::default()).unwrap();
    let large =
        memory_estimate(&parse("image/resize,w_4000,limit_0").unwrap(), &header, 1000, &Limits::default())
            .unwrap();
    assert!(small >= 2000 * 1000 * 3, "at least the decoded pixels: {small}");
    assert!(large > small * 4, "{large} vs {small}");
    assert_eq!(
        memory_estimate(
            &parse("image/resize,w_100").unwrap(),
            &header,
            1000,
            &Limits { max_input_pixels: 10, ..Limits::default() }
        ),
        Err(RenderError::TooLarge { pixels: 2_000_000, limit: 10 })
    );
}

#[test]
fn gif_and_bmp_originals_and_outputs() {
    let source = gradient(30, 20);
    let gif = run(&encode_as(source.clone(), ImageFormat::Png), "image/format,gif").unwrap();
    assert_eq!(gif.content_type, "image/gif");
    // A GIF original renders from its first frame and keeps its format.
    let out = run(&gif.bytes, "image/resize,w_15").unwrap();
    assert_eq!((out.content_type, out.width, out.height), ("image/gif", 15, 10));
    let bmp = run(&encode_as(source, ImageFormat::Png), "image/format,bmp").unwrap();
    assert_eq!(open(&bmp).dimensions(), (30, 20));
    let out = run(&bmp.bytes, "image/rotate,90/format,png").unwrap();
    assert_eq!((out.content_type, out.width, out.height), ("image/png", 20, 30));
}

#[test]
fn webp_refuses_sides_over_libwebps_limit_without_panicking() {
    let strip = png(16384, 1);
    assert_eq!(
        run(&strip, "image/format,webp"),
        Err(RenderError::BadParameter {
            param: "format",
            message: "WebP images are at most 16383 px a side"
        })
    );
    assert_eq!(
        run(&strip, "image/format,webp/quality,Q_100").unwrap_err(),
        run(&strip, "image/format,webp").unwrap_err()
    );
    assert_eq!(run(&png(16383, 1), "image/format,webp").unwrap().width, 16383);
    assert_eq!(run(&strip, "image/format,png").unwrap().width, 16384, "other formats take 16384");
}

#[test]
fn interlace_makes_progressive_jpeg() {
    let original = png(64, 64);
    let baseline = run(&original, "image/format,jpg").unwrap().bytes;
    let progressive = run(&original, "image/format,jpg/interlace,1").unwrap().bytes;
    let has_marker = |b: &[u8], m: u8| b.windows(2).any(|w| w == [0xff, m]);
    assert!(has_marker(&baseline, 0xc0) && !has_marker(&baseline, 0xc2), "SOF0: baseline");
    assert!(has_marker(&progressive, 0xc2), "SOF2: progressive");
    // PNG ignores it, as OSS does.
    assert_eq!(
        run(&original, "image/interlace,1/format,png").unwrap().bytes,
        run(&original, "image/format,png").unwrap().bytes
    );
}

#[test]
fn outputs_carry_no_metadata() {
    let stored = gradient(40, 20);
    let mut jpeg = Vec::new();
    let mut encoder = JpegEncoder::new_with_quality(&mut jpeg, 95);
    encoder.set_exif_metadata(exif_orientation(6)).unwrap();
    encoder.write_image(stored.as_raw(), 40, 20, image::ExtendedColorType::Rgb8).unwrap();
    for ops in ["image/resize,w_20", "image/auto-orient,1", "image/format,png", "image/format,webp"] {
        let out = run(&jpeg, ops).unwrap();
        assert!(!out.bytes.windows(4).any(|w| w == b"Exif"), "{ops}: no EXIF block");
        let mut reader =
            ImageReader::new(Cursor::new(&out.bytes)).with_guessed_format().unwrap().into_decoder().unwrap();
        assert_eq!(reader.exif_metadata().unwrap(), None, "{ops}");
    }
}

/// Chains over every action with values in and out of range: whatever parses renders within
/// its budgets or is refused, and never panics.
fn chain_soup() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just(0i64),
        Just(1),
        Just(50),
        Just(100),
        Just(361),
        Just(5000),
        Just(16384),
        Just(-5),
        0i64..400
    ];
    let action = (0usize..18, value.clone(), value.clone(), value).prop_map(|(a, x, y, z)| match a {
        0 => format!("resize,w_{x},h_{y}"),
        1 => format!("resize,m_pad,l_{x},limit_0"),
        2 => format!("resize,p_{x}"),
        3 => format!("crop,x_{x},y_{y},w_{z},g_center"),
        4 => format!("indexcrop,y_{x},i_{y}"),
        5 => format!("circle,r_{x}"),
        6 => format!("rounded-corners,r_{x}"),
        7 => format!("rotate,{x}"),
        8 => format!("blur,r_{},s_{}", x.rem_euclid(60), y.rem_euclid(60)),
        9 => format!("bright,{x}"),
        10 => format!("contrast,{y}"),
        11 => format!("sharpen,{x}"),
        12 => {
            format!("watermark,text_SGk,size_{},rotate_{y},g_sw,fill_{}", x.rem_euclid(200), z.rem_euclid(2))
        }
        13 => format!("quality,q_{x}"),
        14 => format!("format,{}", ["jpg", "png", "webp", "gif", "bmp"][x.rem_euclid(5) as usize]),
        15 => format!("auto-orient,{x}"),
        16 => format!("resize,m_fixed,w_{x},h_{z},limit_0"),
        _ => "average-hue".to_owned(),
    });
    proptest::collection::vec(action, 1..5).prop_map(|a| format!("image/{}", a.join("/")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn no_chain_panics_or_exceeds_its_budgets(raw in chain_soup(), w in 1u32..40, h in 1u32..40) {
        let Ok(ops) = parse(&raw) else { return Ok(()) };
        let limits = Limits {
            max_output_pixels: 40_000,
            max_output_side: 400,
            max_render_time: Duration::from_secs(5),
            ..Limits::default()
        };
        let original = png(w, h);
        let header = probe(&original).unwrap();
        let estimate = memory_estimate(&ops, &header, original.len() as u64, &limits);
        match render(&original, &ops, &limits) {
            Ok(out) => {
                prop_assert!(estimate.is_ok(), "{}: rendered although the estimate refused", raw);
                if out.content_type != "application/json" {
                    prop_assert!(u64::from(out.width) * u64::from(out.height) <= limits.max_output_pixels, "{}", raw);
                    prop_assert!(out.width <= limits.max_output_side && out.height <= limits.max_output_side, "{}", raw);
                    prop_assert_eq!(open(&out).dimensions(), (out.width, out.height));
                }
            }
            Err(RenderError::Encode(e)) => prop_assert!(false, "{}: encoder failed: {}", raw, e),
            Err(_) => {}
        }
    }
}

#[test]
fn info_counts_the_frames_of_animated_gifs() {
    // Three frames, the middle one with a local colour table, between extensions.
    let mut gif = Vec::new();
    {
        let mut encoder = image::codecs::gif::GifEncoder::new(&mut gif);
        encoder.set_repeat(image::codecs::gif::Repeat::Infinite).unwrap();
        for shade in [0u8, 120, 240] {
            let frame = RgbaImage::from_fn(24, 16, |x, y| Rgba([shade, (x * 10) as u8, (y * 15) as u8, 255]));
            encoder.encode_frame(image::Frame::new(frame)).unwrap();
        }
    }
    let out = run(&gif, "image/info").unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.bytes).unwrap();
    assert_eq!(v["Format"]["value"], "gif");
    assert_eq!(v["FrameCount"]["value"], "3", "{v}");
    assert_eq!(
        (v["ImageWidth"]["value"].as_str(), v["ImageHeight"]["value"].as_str()),
        (Some("24"), Some("16"))
    );
    // ImageMagick agrees on the count.
    if let Ok(tmp) = tempfile::NamedTempFile::new() {
        std::fs::write(tmp.path(), &gif).unwrap();
        if let Ok(out) = std::process::Command::new("identify").arg(tmp.path()).output() {
            if out.status.success() {
                assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
            }
        }
    }
    // A still image is one frame, and so is a GIF cut short after its first.
    let still_png = run(&png(20, 10), "image/info").unwrap();
    let v: serde_json::Value = serde_json::from_slice(&still_png.bytes).unwrap();
    assert_eq!(v["FrameCount"]["value"], "1");
    let still = run(&run(&png(8, 8), "image/format,gif").unwrap().bytes, "image/info").unwrap();
    let v: serde_json::Value = serde_json::from_slice(&still.bytes).unwrap();
    assert_eq!(v["FrameCount"]["value"], "1");
    for cut in [13, 40, gif.len() / 2] {
        assert!(report::frame_count(&gif[..cut], OutputFormat::Gif) >= 1);
    }
}

#[test]
fn info_reads_no_pixels() {
    // The estimate of `info` is the file and the decoder's state, whatever the image's size.
    let big = png(2000, 1500);
    let header = probe(&big).unwrap();
    let ops = parse("image/info").unwrap();
    let estimate = memory_estimate(&ops, &header, big.len() as u64, &Limits::default()).unwrap();
    assert!(estimate < big.len() as u64 + (2 << 20), "{estimate}");
    let resize =
        memory_estimate(&parse("image/resize,w_100").unwrap(), &header, big.len() as u64, &Limits::default())
            .unwrap();
    assert!(resize > 2000 * 1500 * 4, "{resize}");
}

#[test]
fn progressive_jpegs_are_told_from_the_header() {
    let source = gradient(64, 48);
    let baseline = run(&encode_as(source.clone(), ImageFormat::Png), "image/format,jpg").unwrap();
    let progressive = run(&encode_as(source, ImageFormat::Png), "image/interlace,1/format,jpg").unwrap();
    assert!(!probe(&baseline.bytes).unwrap().progressive);
    assert!(probe(&progressive.bytes).unwrap().progressive);
    // A cut header never panics.
    for cut in 0..progressive.bytes.len().min(700) {
        let _ = jpeg_is_progressive(&progressive.bytes[..cut]);
    }
}
