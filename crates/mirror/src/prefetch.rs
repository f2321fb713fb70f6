//! Prefetch (`POST /admin/v1/mirror/prefetch`): a list of mirror paths filled ahead of traffic,
//! at a bounded concurrency, with progress, restartable after a crash.
//!
//! A job is a JSON file in the prefetch directory (`<data dir>/mirror/prefetch/<id>.json`),
//! written atomically (temp file, fsync, rename, directory fsync) when it starts, every
//! [`SAVE_EVERY`] paths, and when it ends. A job found `running` at start (the process died
//! under it) runs again from the top: paths already stored count as done at the cost of one
//! lookup each, so only what was not filled yet goes to the origin.
//!
//! Fills of a job go through the same single-flight fills as live requests (a live miss of a
//! path being prefetched joins that fill), at most [`JOB_CONCURRENCY`] at a time per job and
//! [`GLOBAL_CONCURRENCY`] across jobs, so a prefetch never takes more than a few origin
//! connections from live misses.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use httpdns_core::model::FieldError;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::fill::{self, FillState};
use crate::origin::Ask;
use crate::Mirror;

/// Fills in flight per job.
pub const JOB_CONCURRENCY: usize = 4;
/// Fills in flight across every job.
pub const GLOBAL_CONCURRENCY: usize = 8;
/// Paths per job at most.
pub const MAX_PATHS: usize = 100_000;
/// Progress is saved every this many finished paths.
const SAVE_EVERY: u64 = 50;

/// A job as saved and reported.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobFile {
    pub id: String,
    pub state: JobState,
    pub total: u64,
    pub done: u64,
    pub failed: u64,
    pub created_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    /// Times the job was resumed after a restart.
    #[serde(default)]
    pub resumed: u32,
    /// The first failures (path and why), for the operator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<(String, String)>,
    /// Every path before this index has finished, and so have those at `finished_after`: a
    /// resumed job runs only the others, with `done` and `failed` as saved, so its progress
    /// goes on from the last save instead of from 0 and no path is counted twice.
    #[serde(default)]
    pub next: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finished_after: Vec<u64>,
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Done,
}

/// A job's progress as `GET .../prefetch/{id}` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    pub id: String,
    pub state: JobState,
    pub total: u64,
    pub done: u64,
    pub failed: u64,
    pub created_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    pub resumed: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<(String, String)>,
}

struct Live {
    file: Mutex<JobFile>,
    done: AtomicU64,
    failed: AtomicU64,
    /// Paths finished either way: each finish takes its own number, so exactly one in every
    /// [`SAVE_EVERY`] saves.
    finished: AtomicU64,
    mark: Mutex<Mark>,
}

/// The lowest path not finished yet, and which later ones have (a few: fills run
/// [`JOB_CONCURRENCY`] at a time).
#[derive(Default)]
struct Mark {
    next: u64,
    finished: std::collections::BTreeSet<u64>,
}

impl Mark {
    fn finish(&mut self, index: u64) {
        self.finished.insert(index);
        while self.finished.remove(&self.next) {
            self.next += 1;
        }
    }
}

const MAX_ERRORS: usize = 20;

/// Every job of this process.
pub(crate) struct Jobs {
    dir: Mutex<Option<PathBuf>>,
    live: Mutex<HashMap<String, Arc<Live>>>,
    global: Arc<Semaphore>,
}

impl Default for Jobs {
    fn default() -> Self {
        Self {
            dir: Mutex::default(),
            live: Mutex::default(),
            global: Arc::new(Semaphore::new(GLOBAL_CONCURRENCY)),
        }
    }
}

/// Why a prefetch could not be started or read.
#[derive(Debug, thiserror::Error)]
pub enum PrefetchError {
    #[error("{}: {}", .0.field, .0.message)]
    Invalid(FieldError),
    #[error("saving the job: {0}")]
    Io(#[from] std::io::Error),
}

fn new_id() -> String {
    use sha2::Digest as _;
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = httpdns_core::clock::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let seed = format!("{nanos}:{}:{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    hex::encode(&sha2::Sha256::digest(seed.as_bytes())[..8])
}

fn valid_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Writes `job` to `<dir>/<id>.json` atomically.
fn save(dir: &std::path::Path, job: &JobFile) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new().prefix(".job-").tempfile_in(dir)?;
    tmp.write_all(&serde_json::to_vec(job).map_err(std::io::Error::other)?)?;
    tmp.as_file().sync_all()?;
    tmp.persist(dir.join(format!("{}.json", job.id))).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

impl Live {
    fn snapshot(&self) -> JobFile {
        let mut f = self.file.lock().clone();
        let mark = self.mark.lock();
        f.done = self.done.load(Ordering::Relaxed);
        f.failed = self.failed.load(Ordering::Relaxed);
        f.next = mark.next;
        f.finished_after = mark.finished.iter().copied().collect();
        f
    }
}

impl Jobs {
    pub(crate) fn set_dir(&self, dir: PathBuf) {
        *self.dir.lock() = Some(dir);
    }

    fn dir(&self) -> Option<PathBuf> {
        self.dir.lock().clone()
    }

    fn persist(&self, live: &Live) {
        let Some(dir) = self.dir() else { return };
        if let Err(e) = save(&dir, &live.snapshot()) {
            tracing::warn!(error = %e, "Could not save a prefetch job's progress.");
        }
    }

    pub(crate) fn progress(&self, id: &str) -> Option<Progress> {
        if !valid_id(id) {
            return None;
        }
        let job = match self.live.lock().get(id).cloned() {
            Some(live) => live.snapshot(),
            None => {
                let text = std::fs::read(self.dir()?.join(format!("{id}.json"))).ok()?;
                serde_json::from_slice::<JobFile>(&text).ok()?
            }
        };
        Some(Progress {
            id: job.id,
            state: job.state,
            total: job.total,
            done: job.done,
            failed: job.failed,
            created_ms: job.created_ms,
            finished_ms: job.finished_ms,
            resumed: job.resumed,
            errors: job.errors,
        })
    }
}

impl Mirror {
    /// Where prefetch jobs are saved (without it they live in memory only).
    pub fn with_prefetch_dir(self, dir: PathBuf) -> Self {
        self.prefetch.set_dir(dir);
        self
    }

    /// Starts a prefetch of `paths` (mirror request paths, e.g. `/image/a.jpg`); returns its id.
    /// Every path must be one a rule serves and keeps copies of.
    pub fn start_prefetch(self: &Arc<Self>, paths: Vec<String>) -> Result<String, PrefetchError> {
        let bad = |field: String, msg: &str| PrefetchError::Invalid(FieldError::new(field, msg.to_owned()));
        if paths.is_empty() {
            return Err(bad("paths".into(), "list at least one path"));
        }
        if paths.len() > MAX_PATHS {
            return Err(bad("paths".into(), "at most 100000 paths per job"));
        }
        for (i, p) in paths.iter().enumerate() {
            let uri: http::Uri = p
                .parse()
                .map_err(|_| bad(format!("paths[{i}]"), "not a request path such as /image/a.jpg"))?;
            if !p.starts_with('/') || uri.query().is_some() {
                return Err(bad(format!("paths[{i}]"), "not a request path such as /image/a.jpg"));
            }
            match crate::serve::parse_path(self, &uri) {
                Err(why) => return Err(bad(format!("paths[{i}]"), &why)),
                Ok(req) if !req.runtime.rule.spec.store => {
                    return Err(bad(format!("paths[{i}]"), "its rule keeps no copies (store: false)"))
                }
                Ok(_) => {}
            }
        }
        let job = JobFile {
            id: new_id(),
            state: JobState::Running,
            total: paths.len() as u64,
            done: 0,
            failed: 0,
            created_ms: httpdns_core::clock::unix_ms(),
            finished_ms: None,
            resumed: 0,
            errors: Vec::new(),
            next: 0,
            finished_after: Vec::new(),
            paths,
        };
        if let Some(dir) = self.prefetch.dir() {
            save(&dir, &job)?;
        }
        let id = job.id.clone();
        tracing::info!(job = %id, paths = job.total, "Prefetch started.");
        self.run_job(job);
        Ok(id)
    }

    /// Runs again every saved job a crash or a stop left `running`.
    pub fn resume_prefetches(self: &Arc<Self>) {
        let Some(dir) = self.prefetch.dir() else { return };
        let Ok(entries) = std::fs::read_dir(&dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Ok(Ok(job)) = std::fs::read(&path).map(|t| serde_json::from_slice::<JobFile>(&t)) else {
                tracing::warn!(file = %path.display(), "Skipping an unreadable prefetch job.");
                continue;
            };
            if job.state == JobState::Running {
                tracing::info!(job = %job.id, done = job.done, total = job.total, "Resuming a prefetch job.");
                let job = JobFile { resumed: job.resumed + 1, ..job };
                self.run_job(job);
            }
        }
    }

    /// The progress of a job, `None` when there is no such job.
    pub fn prefetch_progress(&self, id: &str) -> Option<Progress> {
        self.prefetch.progress(id)
    }

    fn run_job(self: &Arc<Self>, job: JobFile) {
        let paths = job.paths.clone();
        let mark = Mark { next: job.next, finished: job.finished_after.iter().copied().collect() };
        let (start, skip) = (mark.next, mark.finished.clone());
        let live = Arc::new(Live {
            done: AtomicU64::new(job.done),
            failed: AtomicU64::new(job.failed),
            finished: AtomicU64::new(job.done + job.failed),
            mark: Mutex::new(mark),
            file: Mutex::new(job),
        });
        let id = live.file.lock().id.clone();
        self.prefetch.live.lock().insert(id, live.clone());
        let mirror = self.clone();
        tokio::spawn(async move {
            let local = Arc::new(Semaphore::new(JOB_CONCURRENCY));
            let mut tasks = tokio::task::JoinSet::new();
            let todo = (0u64..).zip(paths).skip(start as usize).filter(|(i, _)| !skip.contains(i));
            for (index, path) in todo {
                let Ok(own) = local.clone().acquire_owned().await else { break };
                let Ok(global) = mirror.prefetch.global.clone().acquire_owned().await else { break };
                let (mirror, live) = (mirror.clone(), live.clone());
                tasks.spawn(async move {
                    let result = mirror.prefetch_one(&path).await;
                    drop((own, global));
                    {
                        // Under the mark's lock, as a snapshot reads them: a path the save
                        // marks finished is in its counts.
                        let mut mark = live.mark.lock();
                        mark.finish(index);
                        match result {
                            Ok(()) => live.done.fetch_add(1, Ordering::Relaxed),
                            Err(why) => {
                                let mut f = live.file.lock();
                                if f.errors.len() < MAX_ERRORS {
                                    f.errors.push((path, why));
                                }
                                live.failed.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                    }
                    let finished = live.finished.fetch_add(1, Ordering::Relaxed) + 1;
                    if finished % SAVE_EVERY == 0 {
                        mirror.prefetch.persist(&live);
                    }
                });
                // Finished tasks are reaped as the loop goes, so the set stays small.
                while tasks.try_join_next().is_some() {}
            }
            while tasks.join_next().await.is_some() {}
            {
                let mut f = live.file.lock();
                f.state = JobState::Done;
                f.finished_ms = Some(httpdns_core::clock::unix_ms());
            }
            mirror.prefetch.persist(&live);
            let s = live.snapshot();
            tracing::info!(job = %s.id, done = s.done, failed = s.failed, "Prefetch finished.");
            // A finished job is read from its file from now on: its paths leave memory.
            if mirror.prefetch.dir().is_some() {
                mirror.prefetch.live.lock().remove(&s.id);
            }
        });
    }

    /// Fills one path unless its copy is stored; `Err` says why it could not be.
    async fn prefetch_one(self: &Arc<Self>, path: &str) -> Result<(), String> {
        let uri: http::Uri = path.parse().map_err(|_| "not a request path".to_owned())?;
        let req = crate::serve::parse_path(self, &uri)?;
        let location = req.original_location();
        if self.objects.find(&location).await.map_err(|e| e.to_string())?.is_some() {
            return Ok(());
        }
        if req.runtime.rule.spec.slice_bytes.is_some() {
            let no_headers = http::HeaderMap::new();
            let (fill, _) =
                crate::slice::join_or_start(self, &req.runtime, &location, &req.origin_path, &no_headers)
                    .map_err(|e| e.to_string())?;
            return fill.finished().await.map_err(|e| e.to_string());
        }
        let (fill, _) =
            fill::join_or_start(self, &req.runtime, &location, req.origin_path.clone(), Ask::default())
                .map_err(|e| e.to_string())?;
        match fill.finished().await {
            FillState::Done { .. } | FillState::NotModified => Ok(()),
            FillState::Failed(e) => Err(e.to_string()),
            _ => Err("the fill ended without a result".into()),
        }
    }
}
