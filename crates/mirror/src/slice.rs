//! Fills in slices (`slice_bytes`), as nginx's slice module: a miss of a rule with slices asks
//! the origin for the first slice (`Range: bytes=0-<slice-1>`), learns the object's length and
//! ETag from the `206`, stages a file of that length and fetches the other slices, a few at a
//! time, each with `If-Match: <ETag>`. A client's range is served as soon as the slices under
//! it are in (the slices a waiting client needs are fetched next), while the rest fill.
//!
//! Every slice is checked: a `206` whose `Content-Range` is the one asked, the same ETag as the
//! first, every byte. A slice that fails on the way (a 5xx, a timeout, a cut body) is fetched
//! again, up to [`ATTEMPTS`] times; a changed object (another ETag, a `412`) fails the whole
//! fill. The copy is committed only when every slice is in and the file is exactly the
//! origin's length, so a torn copy is never stored; clients get the last byte of the object
//! only after that commit. An origin that ignores ranges (`200`) fills the same file in order.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use object_store::path::Path;
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;

use crate::conditional::{parse_range, Decision};
use crate::copy_headers::value;
use crate::error::Failure;
use crate::fill::{FillError, FillHead, STORED_HEADERS};
use crate::metrics::Outcome;
use crate::objects::{StoredMeta, CHUNK};
use crate::origin::{Ask, FetchError};
use crate::serve::Request;
use crate::upstream::PassedHeaders;
use crate::{Mirror, RuleRuntime};

/// Slices fetched at once per object.
const WORKERS: usize = 4;
/// Tries per slice.
const ATTEMPTS: u32 = 3;

#[derive(Debug, Clone)]
struct Head {
    fill: Arc<FillHead>,
    length: u64,
    etag: Option<String>,
}

#[derive(Debug, Clone)]
enum End {
    Running,
    Committed,
    Failed(FillError),
}

/// What readers watch.
#[derive(Debug, Clone)]
struct View {
    head: Option<Head>,
    done: Arc<Vec<bool>>,
    end: End,
}

/// A fill in slices of one store path.
#[derive(Debug)]
pub(crate) struct SliceFill {
    file: Arc<std::fs::File>,
    slice: u64,
    view: watch::Sender<View>,
    /// Per slice: taken by a worker (or done).
    taken: Mutex<Vec<bool>>,
    /// Slices a waiting reader needs, first served.
    wanted: Mutex<VecDeque<usize>>,
}

impl SliceFill {
    fn want(&self, idx: usize) {
        let mut w = self.wanted.lock();
        if !w.contains(&idx) {
            w.push_front(idx);
        }
    }

    /// The next slice to fetch: a wanted one, else the first not taken.
    fn take(&self) -> Option<usize> {
        let mut taken = self.taken.lock();
        let wanted: Vec<usize> = self.wanted.lock().drain(..).collect();
        let idx = wanted
            .into_iter()
            .find(|i| taken.get(*i) == Some(&false))
            .or_else(|| taken.iter().position(|t| !t))?;
        taken[idx] = true;
        Some(idx)
    }

    fn fail(&self, why: FillError) {
        self.view.send_modify(|v| {
            if matches!(v.end, End::Running) {
                v.end = End::Failed(why);
            }
        });
    }

    /// Waits for the end of the fill.
    pub(crate) async fn finished(&self) -> Result<(), FillError> {
        let mut rx = self.view.subscribe();
        let end = rx.wait_for(|v| !matches!(v.end, End::Running)).await.map(|v| v.end.clone());
        match end {
            Ok(End::Committed) => Ok(()),
            Ok(End::Failed(e)) => Err(e),
            _ => Err(FillError::Ended),
        }
    }

    fn failed(&self) -> bool {
        matches!(self.view.borrow().end, End::Failed(_))
    }

    /// Bytes `start..end` as their slices arrive.
    fn stream(
        self: &Arc<Self>,
        start: u64,
        end: u64,
    ) -> futures_util::stream::BoxStream<'static, Result<Bytes, std::io::Error>> {
        use futures_util::StreamExt as _;
        let rx = self.view.subscribe();
        futures_util::stream::unfold((self.clone(), rx, start), move |(fill, mut rx, pos)| async move {
            if pos >= end {
                return None;
            }
            let n = loop {
                let view = rx.borrow_and_update().clone();
                if let End::Failed(e) = &view.end {
                    return Some((Err(std::io::Error::other(e.to_string())), (fill, rx, u64::MAX)));
                }
                if let Some(head) = &view.head {
                    let idx = (pos / fill.slice) as usize;
                    if view.done.get(idx) == Some(&true) {
                        let slice_end = ((idx as u64 + 1) * fill.slice).min(head.length);
                        let n = (slice_end - pos).min(end - pos).min(CHUNK as u64);
                        // The object's last byte only once the copy is verified and committed.
                        if pos + n < head.length || matches!(view.end, End::Committed) {
                            break n;
                        }
                    } else {
                        fill.want(idx);
                    }
                }
                if rx.changed().await.is_err() {
                    return Some((Err(std::io::Error::other("the fill ended")), (fill, rx, u64::MAX)));
                }
            };
            let read = crate::objects::pread_blocking(fill.file.clone(), pos, n).await;
            let next = if read.is_ok() { pos + n } else { u64::MAX };
            Some((read, (fill, rx, next)))
        })
        .boxed()
    }
}

/// Serves a miss of a rule with slices.
pub(crate) async fn serve(
    mirror: &Arc<Mirror>,
    req: &Request,
    headers: &HeaderMap,
    location: &Path,
) -> (Outcome, Response) {
    let (fill, started) = match join_or_start(mirror, &req.runtime, location, &req.origin_path, headers) {
        Ok(f) => f,
        Err(e) => return Failure::from(&e).served(),
    };
    let mut rx = fill.view.subscribe();
    let head = match rx.wait_for(|v| v.head.is_some() || matches!(v.end, End::Failed(_))).await {
        Ok(v) => match (&v.head, &v.end) {
            (_, End::Failed(e)) => return Failure::from(e).served(),
            (Some(h), _) => h.clone(),
            (None, _) => return Failure::from(&FillError::Ended).served(),
        },
        Err(_) => return Failure::from(&FillError::Ended).served(),
    };
    let len = head.length;
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let decision = match range {
        Some(r) if headers.get(header::IF_RANGE).is_none() => parse_range(r, len),
        _ => Decision::Full,
    };
    let (status, start, end) = match decision {
        Decision::Partial { start, end } => (StatusCode::PARTIAL_CONTENT, start, end + 1),
        Decision::Unsatisfiable => {
            let mut r = crate::serve::error(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "InvalidRange",
                Some("range"),
                "the range is outside the object",
            );
            r.headers_mut().insert(header::CONTENT_RANGE, value(&format!("bytes */{len}")));
            return (Outcome::Miss, r);
        }
        _ => (StatusCode::OK, 0, len),
    };
    let body = if req.head_only || start == end {
        Body::empty()
    } else {
        let series = req.runtime.series.clone();
        use futures_util::StreamExt as _;
        Body::from_stream(fill.stream(start, end).inspect(move |c| {
            if let Ok(c) = c {
                series.served(c.len() as u64);
            }
        }))
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let hm = r.headers_mut();
    hm.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    if status == StatusCode::PARTIAL_CONTENT {
        hm.insert(header::CONTENT_RANGE, value(&format!("bytes {}-{}/{len}", start, end - 1)));
    }
    hm.insert(header::CONTENT_TYPE, value(&head.fill.content_type));
    for (k, v) in crate::copy_headers::replayed(&head.fill.headers) {
        hm.insert(k, v);
    }
    if let Some(lm) = head.fill.origin_last_modified.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
        hm.insert(header::LAST_MODIFIED, lm);
    }
    hm.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    hm.insert("x-cache", HeaderValue::from_static("MISS"));
    if !started {
        hm.insert("x-cache-coalesced", HeaderValue::from_static("1"));
    }
    (if started { Outcome::Miss } else { Outcome::Coalesced }, r)
}

/// Joins the sliced fill of `location`, or starts one.
pub(crate) fn join_or_start(
    mirror: &Arc<Mirror>,
    runtime: &Arc<RuleRuntime>,
    location: &Path,
    origin_path: &str,
    client: &HeaderMap,
) -> Result<(Arc<SliceFill>, bool), FillError> {
    let key = location.to_string();
    let mut fills = mirror.slices.lock();
    if let Some(f) = fills.get(&key) {
        return Ok((f.clone(), false));
    }
    let staged = mirror.objects.temp_file().map_err(FillError::store)?;
    let file = Arc::new(staged.reopen().map_err(FillError::store)?);
    let (view, _) = watch::channel(View { head: None, done: Arc::new(Vec::new()), end: End::Running });
    let slice = runtime.rule.spec.slice_bytes.unwrap_or(u64::MAX).max(1);
    let fill = Arc::new(SliceFill { file, slice, view, taken: Mutex::default(), wanted: Mutex::default() });
    fills.insert(key.clone(), fill.clone());
    drop(fills);
    let job = Job {
        mirror: mirror.clone(),
        runtime: runtime.clone(),
        location: location.clone(),
        origin_path: origin_path.to_owned(),
        passed: runtime.rule.spec.headers.passed(client),
        fill: fill.clone(),
        started: Instant::now(),
    };
    tokio::spawn(job.run(key, staged));
    Ok((fill, true))
}

struct Job {
    mirror: Arc<Mirror>,
    runtime: Arc<RuleRuntime>,
    location: Path,
    origin_path: String,
    passed: HeaderMap,
    fill: Arc<SliceFill>,
    started: Instant,
}

/// `bytes a-b/len` of a `Content-Range`.
fn content_range(v: &str) -> Option<(u64, u64, u64)> {
    let (range, len) = v.trim().strip_prefix("bytes ")?.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?, len.parse().ok()?))
}

/// Why one slice failed: `Retry` may pass, `Fatal` (a changed object, a bad answer) fails the fill.
enum SliceError {
    Retry(FillError),
    Fatal(FillError),
}

fn invalid(why: &str) -> FillError {
    FillError::Fetch(FetchError::Invalid(why.to_owned()))
}

impl Job {
    async fn run(self, key: String, staged: tempfile::NamedTempFile) {
        let job = Arc::new(self);
        let result = job.clone().fill_all(staged).await;
        let rule = &job.runtime.rule;
        match result {
            Ok(meta) => {
                job.mirror.metrics.fill_done(rule, job.started.elapsed());
                job.mirror.mark_validated(&job.location);
                tracing::info!(rule = %rule.name, key = %job.location, bytes = meta.length, ms = job.started.elapsed().as_millis() as u64, "Stored a copy filled in slices.");
                job.fill.view.send_modify(|v| v.end = End::Committed);
            }
            Err(e) => {
                job.mirror.metrics.fill_failed(rule);
                if matches!(e, FillError::Fetch(FetchError::NotFound)) {
                    job.mirror.remember_missing(&job.location, rule.negative_ttl());
                }
                tracing::warn!(rule = %rule.name, key = %job.location, error = %e, "Sliced fill failed; nothing stored.");
                job.fill.fail(e);
            }
        }
        // As whole fills: late joiners read the finished file for a moment, then the store.
        let (mirror, fill) = (job.mirror.clone(), job.fill.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let mut fills = mirror.slices.lock();
            if fills.get(&key).is_some_and(|f| Arc::ptr_eq(f, &fill)) {
                fills.remove(&key);
            }
        });
    }

    async fn fill_all(self: Arc<Self>, staged: tempfile::NamedTempFile) -> Result<StoredMeta, FillError> {
        let rule = &self.runtime.rule;
        let slice = self.fill.slice;
        let mut first = None;
        let mut range = Some((0, slice.saturating_sub(1)));
        for attempt in 1..=ATTEMPTS {
            match self.fetch(range, None).await {
                Ok(r) => {
                    first = Some(r);
                    break;
                }
                // An empty object has no first slice: it is asked for whole.
                Err(SliceError::Fatal(FillError::Fetch(FetchError::Status(416)))) if range.is_some() => {
                    range = None;
                }
                Err(SliceError::Fatal(e)) => return Err(e),
                Err(SliceError::Retry(e)) if attempt == ATTEMPTS => return Err(e),
                Err(SliceError::Retry(_)) => {
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
            }
        }
        let Some((response, head)) = first else { return Err(FillError::Ended) };
        if head.length > rule.spec.max_object_bytes {
            return Err(FillError::TooLarge(rule.spec.max_object_bytes));
        }
        self.fill.file.set_len(head.length).map_err(FillError::store)?;
        let slices = head.length.div_ceil(slice) as usize;
        *self.fill.taken.lock() = vec![false; slices];
        let whole = response.status().as_u16() == 200;
        self.fill.view.send_modify(|v| {
            v.head = Some(head.clone());
            v.done = Arc::new(vec![false; slices]);
        });
        if whole {
            // The origin ignores ranges: the whole body in order, each slice done as it passes.
            self.fill.taken.lock().iter_mut().for_each(|t| *t = true);
            self.write(response, 0, head.length).await.map_err(|e| match e {
                SliceError::Retry(e) | SliceError::Fatal(e) => e,
            })?;
        } else {
            self.fill.taken.lock()[0] = true;
            let end = slice.min(head.length);
            if let Err(SliceError::Retry(e) | SliceError::Fatal(e)) = self.write(response, 0, end).await {
                return Err(e);
            }
            let mut workers = tokio::task::JoinSet::new();
            for _ in 0..WORKERS.min(slices.saturating_sub(1)) {
                let job = self.clone();
                let etag = head.etag.clone();
                workers.spawn(async move { job.worker(head.length, etag).await });
            }
            while let Some(r) = workers.join_next().await {
                if let Ok(Err(e)) | Err(e) = r.map_err(|_| FillError::Ended) {
                    self.fill.fail(e.clone());
                    return Err(e);
                }
            }
        }
        if self.fill.view.borrow().done.iter().any(|d| !d) {
            return Err(invalid("a slice is missing"));
        }
        // The assembled copy: exactly the origin's length, hashed for our ETag.
        let file = self.fill.file.clone();
        let (length, digest) = tokio::task::spawn_blocking(move || -> std::io::Result<(u64, Vec<u8>)> {
            let len = file.metadata()?.len();
            let mut sha = Sha256::new();
            let mut buf = vec![0u8; CHUNK];
            let mut at = 0;
            while at < len {
                let n = (len - at).min(CHUNK as u64) as usize;
                file.read_exact_at(&mut buf[..n], at)?;
                sha.update(&buf[..n]);
                at += n as u64;
            }
            Ok((len, sha.finalize().to_vec()))
        })
        .await
        .map_err(|_| FillError::Ended)?
        .map_err(FillError::store)?;
        if length != head.length {
            return Err(FillError::Truncated { got: length, expected: head.length });
        }
        let meta = StoredMeta {
            content_type: head.fill.content_type.clone(),
            length,
            etag: crate::objects::strong_etag(&digest),
            origin_etag: head.etag.clone(),
            origin_last_modified: head.fill.origin_last_modified.clone(),
            headers: head.fill.headers.clone(),
            stored_at_ms: httpdns_core::clock::unix_ms(),
            location: None,
        };
        self.mirror.objects.commit(&self.location, staged, &meta).await.map_err(FillError::store)?;
        Ok(meta)
    }

    /// Fetches slices until none is left to take.
    async fn worker(self: Arc<Self>, length: u64, etag: Option<String>) -> Result<(), FillError> {
        while let Some(idx) = self.fill.take() {
            if self.fill.failed() {
                return Ok(());
            }
            let start = idx as u64 * self.fill.slice;
            let end = (start + self.fill.slice).min(length);
            let mut attempt = 0;
            loop {
                attempt += 1;
                let result = match self.fetch(Some((start, end - 1)), etag.as_deref()).await {
                    Ok((_, head)) if head.length != length || head.etag != etag => {
                        Err(SliceError::Fatal(invalid("the object changed at the origin during the fill")))
                    }
                    Ok((response, _)) if response.status().as_u16() != 206 => {
                        Err(SliceError::Fatal(invalid("the origin stopped answering ranges")))
                    }
                    Ok((response, _)) => self.write(response, start, end).await,
                    Err(e) => Err(e),
                };
                match result {
                    Ok(()) => break,
                    Err(SliceError::Fatal(e)) => return Err(e),
                    Err(SliceError::Retry(e)) if attempt >= ATTEMPTS => return Err(e),
                    Err(SliceError::Retry(e)) => {
                        tracing::debug!(key = %self.location, slice = idx, error = %e, "Fetching a slice again.");
                        tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                    }
                }
            }
        }
        Ok(())
    }

    /// One ranged origin request; the answer and what it says of the object.
    async fn fetch(
        &self,
        range: Option<(u64, u64)>,
        if_match: Option<&str>,
    ) -> Result<(reqwest::Response, Head), SliceError> {
        let rule = &self.runtime.rule;
        let metrics = &self.mirror.metrics;
        let mut passed = self.passed.clone();
        let (from, to) = range.unwrap_or((0, u64::MAX));
        if range.is_some() {
            passed.insert(header::RANGE, value(&format!("bytes={from}-{to}")));
        }
        if let Some(e) = if_match.and_then(|e| HeaderValue::from_str(e).ok()) {
            passed.insert(header::IF_MATCH, e);
        }
        metrics.origin_fetch(rule);
        let ask = Ask { passed, proxy: true, ..Ask::default() };
        let response = match self.runtime.client.fetch(rule, &self.origin_path, &ask).await {
            Ok(f) => f.response,
            Err(e) => {
                metrics.origin_status(rule, e.class());
                return Err(match e {
                    FetchError::Timeout | FetchError::Unreachable(_) => SliceError::Retry(e.into()),
                    FetchError::Status(s) if s >= 500 => SliceError::Retry(e.into()),
                    FetchError::Status(412) => {
                        SliceError::Fatal(invalid("the object changed at the origin during the fill"))
                    }
                    e => SliceError::Fatal(e.into()),
                });
            }
        };
        let status = response.status().as_u16();
        metrics.origin_status(rule, if status < 300 { "2xx" } else { "4xx" });
        let h = response.headers();
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let length = match status {
            206 => match text("content-range").as_deref().and_then(content_range) {
                Some((a, b, len)) if a == from && b == to.min(len.saturating_sub(1)) => len,
                _ => return Err(SliceError::Fatal(invalid("the origin answered another range"))),
            },
            200 => text("content-length")
                .and_then(|l| l.trim().parse().ok())
                .ok_or_else(|| SliceError::Fatal(invalid("the origin sent no length")))?,
            412 => {
                return Err(SliceError::Fatal(invalid("the object changed at the origin during the fill")))
            }
            s => return Err(SliceError::Fatal(FetchError::Status(s).into())),
        };
        let head = Head {
            fill: Arc::new(FillHead {
                content_type: text("content-type").unwrap_or_else(|| "application/octet-stream".into()),
                content_length: Some(length),
                origin_last_modified: text("last-modified"),
                headers: STORED_HEADERS.iter().filter_map(|n| Some(((*n).to_owned(), text(n)?))).collect(),
            }),
            length,
            etag: text("etag"),
        };
        Ok((response, head))
    }

    /// Writes an answer's body at `start..end` of the staged file, marking slices done as their
    /// last byte lands.
    async fn write(&self, mut response: reqwest::Response, start: u64, end: u64) -> Result<(), SliceError> {
        let rule = &self.runtime.rule;
        let slice = self.fill.slice;
        let mut at = start;
        loop {
            let chunk = match tokio::time::timeout(rule.idle_timeout(), response.chunk()).await {
                Err(_) => return Err(SliceError::Retry(FetchError::Timeout.into())),
                Ok(Err(_)) => {
                    return Err(SliceError::Retry(FillError::Truncated {
                        got: at - start,
                        expected: end - start,
                    }))
                }
                Ok(Ok(None)) => break,
                Ok(Ok(Some(c))) => c,
            };
            if at + chunk.len() as u64 > end {
                return Err(SliceError::Fatal(invalid("more bytes than the range")));
            }
            self.fill.file.write_all_at(&chunk, at).map_err(|e| SliceError::Fatal(FillError::store(e)))?;
            self.mirror.metrics.origin_bytes(rule, chunk.len() as u64);
            let before = at;
            at += chunk.len() as u64;
            // Slices whose last byte just landed.
            let (first, last) = (before / slice, at / slice);
            if last > first || at == end {
                let upto = if at == end { end.div_ceil(slice) } else { last };
                self.fill.view.send_modify(|v| {
                    let done = Arc::make_mut(&mut v.done);
                    for i in (start / slice)..upto {
                        if let Some(d) = done.get_mut(i as usize) {
                            *d = true;
                        }
                    }
                });
            }
        }
        if at != end {
            return Err(SliceError::Retry(FillError::Truncated { got: at - start, expected: end - start }));
        }
        Ok(())
    }
}
