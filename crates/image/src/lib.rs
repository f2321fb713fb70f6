//! Image variants of the mirroring gateway, as Alibaba OSS spells them:
//! `?x-oss-process=image/resize,m_lfit,w_260,h_470/watermark,text_SGk/quality,Q_80/format,webp`.
//!
//! * [`process`]: the strict grammar of every OSS image action. [`parse`] turns the
//!   percent-decoded parameter into an [`ImageProcess`] (a chain of [`Action`]s in their order
//!   plus the encoder settings) that cannot hold an invalid value, or a [`ProcessError`]
//!   naming the offending parameter; [`ImageProcess::canonical`] is the stable spelling for
//!   cache keys.
//! * [`variant`]: [`probe`] and [`memory_estimate`] size a render from the original's header
//!   alone; [`render_with`] decodes within [`Limits`] (decompression bombs are refused from
//!   the header), checks the size after every action before any pixel work, runs the chain
//!   under a deadline and encodes JPEG, PNG, WebP, GIF or BMP, or answers `info` and
//!   `average-hue` as JSON.
//!
//! Pure CPU code: no IO, no async (watermark images are handed in). Rendering is heavy;
//! callers run it on blocking threads.
//!
//! The `codecs` feature (on by default) builds [`variant`] and the codecs it needs; without it
//! the crate is the grammar alone, which `httpdns-core` validates image styles with.

pub mod process;
#[cfg(feature = "codecs")]
pub mod variant;

pub use process::{parse, Action, ImageProcess, OutputFormat, ProcessError, Report};
#[cfg(feature = "codecs")]
pub use variant::{
    memory_estimate, probe, render, render_with, Header, Limits, RenderError, Rendered, WatermarkImages,
};
