//! A real HTTP origin for the mirror tests: serves objects from memory, counts requests,
//! records what it was sent, and can be told to fail, stall, truncate, lie about
//! `Content-MD5`, redirect, or — as OSS does — return a resized image when it sees an
//! `x-oss-process` query string.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

/// How the origin answers a path.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    Normal,
    Status(u16),
    /// Wait this long before the headers.
    Stall(Duration),
    /// Announce the full length, send half, then cut the connection.
    Truncate,
    /// Send a `Content-MD5` that does not match the body.
    WrongMd5,
    /// 302 to this location.
    Redirect(String),
    /// Send the body in 64 KiB chunks with this pause between them.
    Slow(Duration),
}

#[derive(Default)]
struct Inner {
    objects: HashMap<String, (Vec<u8>, String)>,
    modes: HashMap<String, Mode>,
    requests: HashMap<String, usize>,
    /// Every query string and interesting header the origin was sent.
    queries: Vec<String>,
    seen_headers: Vec<(String, String)>,
}

#[derive(Clone, Default)]
pub(crate) struct Origin {
    inner: Arc<Mutex<Inner>>,
}

pub(crate) struct RunningOrigin {
    pub(crate) origin: Origin,
    pub(crate) addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RunningOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RunningOrigin {
    pub(crate) async fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap()).await
    }

    pub(crate) async fn start_on(addr: SocketAddr) -> Self {
        let origin = Origin::default();
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(serve).with_state(origin.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { origin, addr, task }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops listening: connections are refused from now on.
    pub(crate) fn stop(self) -> Origin {
        self.task.abort();
        self.origin.clone()
    }
}

impl Origin {
    pub(crate) fn put(&self, path: &str, body: Vec<u8>, content_type: &str) {
        self.inner.lock().objects.insert(path.into(), (body, content_type.into()));
    }
    pub(crate) fn mode(&self, path: &str, mode: Mode) {
        self.inner.lock().modes.insert(path.into(), mode);
    }
    pub(crate) fn requests(&self, path: &str) -> usize {
        self.inner.lock().requests.get(path).copied().unwrap_or(0)
    }
    pub(crate) fn total_requests(&self) -> usize {
        self.inner.lock().requests.values().sum()
    }
    pub(crate) fn queries(&self) -> Vec<String> {
        self.inner.lock().queries.clone()
    }
    pub(crate) fn seen_headers(&self) -> Vec<(String, String)> {
        self.inner.lock().seen_headers.clone()
    }
}

async fn serve(State(origin): State<Origin>, method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path().to_owned();
    let (object, mode) = {
        let mut inner = origin.inner.lock();
        *inner.requests.entry(path.clone()).or_default() += 1;
        if let Some(q) = uri.query() {
            inner.queries.push(q.to_owned());
        }
        for h in ["range", "authorization", "cookie", "accept-encoding", "x-client-secret", "if-none-match"] {
            if let Some(v) = headers.get(h).and_then(|v| v.to_str().ok()) {
                inner.seen_headers.push((h.to_owned(), v.to_owned()));
            }
        }
        (inner.objects.get(&path).cloned(), inner.modes.get(&path).cloned().unwrap_or(Mode::Normal))
    };
    match &mode {
        Mode::Status(s) => return StatusCode::from_u16(*s).unwrap().into_response(),
        Mode::Stall(d) => tokio::time::sleep(*d).await,
        Mode::Redirect(to) => {
            return Response::builder().status(302).header("location", to).body(Body::empty()).unwrap()
        }
        _ => {}
    }
    let Some((mut body, content_type)) = object else {
        return StatusCode::NOT_FOUND.into_response();
    };
    // Like OSS: a query string asking for a resize gets the resized image.
    if let Some(ops) = uri.query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "x-oss-process").map(|(_, v)| v.into_owned())
    }) {
        if let Ok(ops) = httpdns_image::parse(&ops) {
            if let Ok(r) = httpdns_image::render(&body, &ops, &httpdns_image::Limits::default()) {
                body = r.bytes;
            }
        }
    }
    let len = body.len();
    let mut builder = Response::builder()
        .header("content-type", content_type)
        .header("content-length", len.to_string())
        .header("etag", "\"origin-v1\"")
        .header("last-modified", "Mon, 02 Nov 2026 10:00:00 GMT")
        .header("cache-control", "max-age=3600");
    if method == Method::HEAD {
        return builder.body(Body::empty()).unwrap();
    }
    match mode {
        Mode::Truncate => {
            let half = body[..len / 2].to_vec();
            let stream = futures_util::stream::iter(vec![
                Ok::<_, std::io::Error>(bytes::Bytes::from(half)),
                Err(std::io::Error::other("cut")),
            ]);
            builder.body(Body::from_stream(stream)).unwrap()
        }
        Mode::WrongMd5 => {
            let wrong = base64::engine::general_purpose::STANDARD.encode([0u8; 16]);
            builder = builder.header("content-md5", wrong);
            builder.body(Body::from(body)).unwrap()
        }
        Mode::Slow(pause) => {
            let chunks: Vec<bytes::Bytes> =
                body.chunks(64 << 10).map(bytes::Bytes::copy_from_slice).collect();
            let stream = futures_util::stream::unfold(chunks.into_iter(), move |mut it| async move {
                let next = it.next()?;
                tokio::time::sleep(pause).await;
                Some((Ok::<_, std::io::Error>(next), it))
            });
            builder.body(Body::from_stream(stream)).unwrap()
        }
        _ => {
            let md5 = {
                use md5::Digest as _;
                base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&body))
            };
            builder.header("content-md5", md5).body(Body::from(body)).unwrap()
        }
    }
}

/// A PNG of `w`×`h` with a gradient, so resized versions differ in size.
pub(crate) fn png(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, ((x + y) % 256) as u8])
    });
    img.write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png).unwrap();
    out
}

/// Width and height of an encoded image.
pub(crate) fn dimensions(bytes: &[u8]) -> (u32, u32) {
    image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .unwrap()
        .into_dimensions()
        .unwrap()
}

/// Deterministic pseudo-random bytes.
pub(crate) fn blob(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// One raw HTTP/1.1 request, so paths reach the server exactly as written (clients
/// normalise `..` and `%2e%2e` away). Returns the status and the whole response text.
pub(crate) async fn raw_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}
