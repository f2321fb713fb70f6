//! Image variants of the mirroring gateway, as Alibaba OSS spells them:
//! `?x-oss-process=image/resize,m_lfit,w_260,h_470/quality,Q_80/format,webp`.
//!
//! * [`process`]: the strict grammar. [`parse`] turns the percent-decoded parameter into an
//!   [`ImageProcess`] that cannot hold an invalid value, or a [`ProcessError`] naming the
//!   offending parameter; [`ImageProcess::canonical`] is the stable spelling for cache keys.
//! * [`variant`]: [`render`] decodes the stored original within [`Limits`] (decompression
//!   bombs are refused from the header), resizes and encodes JPEG, PNG or WebP.
//!
//! Pure CPU code: no IO, no async. Rendering is heavy; callers run it on blocking threads.

pub mod process;
pub mod variant;

pub use process::{parse, Action, ImageProcess, OutputFormat, ProcessError, Report};
pub use variant::{
    memory_estimate, probe, render, render_with, Header, Limits, RenderError, Rendered, WatermarkImages,
};
